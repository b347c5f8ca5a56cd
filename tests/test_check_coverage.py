"""Every lesson check can fail, shown: each place in ``helpers/lessons/`` that builds a check has a
unit test in which it fails (verdict ✗) on a configuration where its lesson is false.

The check sites are found in the source: every call, in a lesson module, of ``Check(...)`` or of a
function of ``helpers/classroom/checks.py`` that returns one (``holds``, ``at_least``, ``near``,
``exceeds``, …), except those that can only say "premise failed" (``premise_failed``,
``Check(..., None, ...)``): a premise is not a claim. A site whose verdict is the literal True
cannot fail: it is never covered (build the ✓ and the ✗ from one expression, e.g.
``holds(claim, after > before, ...)``).

The test files that use a lesson's checks run in a pytest subprocess with ``tests/check_recorder.py``,
which notes, for every check a *passing* test built, the call site in ``helpers/lessons/`` that built
it, its verdict, and whether the test read that verdict. A site is covered when at least one of its
checks came out ✗, a passing test read it (a ✗ built on the way and never looked at shows nothing),
and that test names the claim (:func:`named`: a test that counts the ✗s names none). A ✗ is a
claim judged on a held premise: a premise that fails, a NaN among them, gives "premise failed"
(``helpers/classroom/checks.py``), which covers nothing. A site in a loop (one claim per stage,
say) is covered by any of its claims, as they share
the expression that decides the verdict. The subprocess makes the result
independent of the order the tests run in, and of pytest-xdist (the plugin is loaded by every
process, each writes its own record file). It takes about 9 s on 2 cores, most of it importing torch
(the lesson tests themselves: about 1 s).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "helpers" / "lessons"

#: Check sites allowed to have no failing case: ``(file name, source of the claim argument)`` ->
#: why. Keep it empty: a check whose failure needs hardware this machine lacks (a GPU) is still
#: tested with simulated or constructed values. An entry that is covered again makes the test fail.
EXEMPT: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Site:
    """One call in a lesson module that builds a check."""

    file: str  #: relative to the repository, e.g. "helpers/lessons/startup.py"
    line: int
    col: int
    end_line: int
    end_col: int
    constructor: str  #: "at_least", "holds", "Check", …
    claim: str  #: the source of the claim argument (a string, an f-string or a name)
    always_passes: bool = False  #: its verdict is the literal True: it cannot fail

    def contains(self, span: list[int | None]) -> bool:
        line, end_line, col, end_col = span
        if col is None or end_col is None:  # no column information: lines only
            return self.line <= line and end_line <= self.end_line
        return (self.line, self.col) <= (line, col) and (end_line, end_col) <= (self.end_line, self.end_col)

    def size(self) -> tuple[int, int]:
        return self.end_line - self.line, self.end_col - self.col

    def __str__(self) -> str:
        claim = self.claim if len(self.claim) <= 110 else self.claim[:107] + "..."
        return f"{self.file}:{self.line}: {self.constructor}({claim}, ...)" + (
            " — its verdict is the literal True: it cannot fail" if self.always_passes else "")


def constructors() -> tuple[set[str], set[str]]:
    """The functions of ``helpers/classroom/checks.py`` that return a :class:`Check`, with ``Check`` itself:
    (those that can return a ✗, those that can only return "premise failed")."""
    tree = ast.parse((ROOT / "helpers" / "classroom" / "checks.py").read_text())
    can_fail, premise_only = {"Check"}, set()
    for node in tree.body:
        returns = getattr(node, "returns", None)
        if isinstance(node, ast.FunctionDef) and isinstance(returns, ast.Name) and returns.id == "Check":
            verdicts = [_passed_argument(call, "Check") for call in ast.walk(node)
                        if _called_name(call) == "Check"]
            only_none = verdicts and all(isinstance(v, ast.Constant) and v.value is None for v in verdicts)
            (premise_only if only_none else can_fail).add(node.name)
    return can_fail, premise_only


def _called_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return node.func.id
        if isinstance(node.func, ast.Attribute):
            return node.func.attr
    return None


def _passed_argument(call: ast.Call, constructor: str) -> ast.expr | None:
    """The argument that decides the verdict: ``Check``'s ``passed``, ``holds``'s ``ok``."""
    position, keyword = {"Check": (2, "passed"), "holds": (1, "ok")}.get(constructor, (None, None))
    if position is None:
        return None
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _claim_argument(call: ast.Call) -> str:
    for kw in call.keywords:
        if kw.arg == "claim":
            return ast.unparse(kw.value)
    return ast.unparse(call.args[0]) if call.args else "?"


def check_sites(source: str, file: str) -> list[Site]:
    """The calls in one lesson module (its source, its path) that build a check that can fail."""
    can_fail, _ = constructors()
    tree = ast.parse(source)
    names: dict[str, str] = {}  # local name -> constructor, from `from ..checks import x as y`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "checks":
            names.update({alias.asname or alias.name: alias.name for alias in node.names})
    sites = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name):
            constructor = names.get(node.func.id)
        elif isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value).split(".")[-1] == "checks":
            constructor = node.func.attr  # checks.at_least(...), helpers.classroom.checks.at_least(...)
        else:
            constructor = None
        if constructor not in can_fail:  # not a check (timing_noise_s, …), or only a premise
            continue
        passed = _passed_argument(node, constructor)
        if isinstance(passed, ast.Constant) and passed.value is None:
            continue  # Check(claim, measured, None, premise): a premise, not a claim
        sites.append(Site(file, node.lineno, node.col_offset, node.end_lineno,
                          node.end_col_offset, constructor, _claim_argument(node),
                          isinstance(passed, ast.Constant) and passed.value is True))
    return sites


def all_check_sites() -> list[Site]:
    """Every check site of every lesson module, by file and line."""
    return sorted((site for path in LESSONS.glob("*.py")
                   for site in check_sites(path.read_text(), path.relative_to(ROOT).as_posix())),
                  key=lambda s: (s.file, s.line, s.col))


def _uses_lesson_checks(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):  # from helpers.lessons import startup
        return (node.module or "").startswith("helpers.lessons")
    if isinstance(node, ast.Import):  # import helpers.lessons.startup
        return any(alias.name.startswith("helpers.lessons") for alias in node.names)
    if isinstance(node, ast.Attribute) and node.attr == "checks":  # helpers.lessons.startup.checks(...)
        return ast.unparse(node.value).startswith("helpers.lessons.")
    return False


def lesson_test_files() -> list[Path]:
    """The test files that import a lesson module or call a lesson's ``checks`` (a test that only uses
    another helper of a lesson module, as ``test_timeline.py`` does, builds no check)."""
    return [path for path in sorted((ROOT / "tests").glob("test_*.py"))
            if path.name != Path(__file__).name
            and any(_uses_lesson_checks(node) for node in ast.walk(ast.parse(path.read_text())))]


def run_lesson_tests(folder: Path, files: list[Path] | None = None) -> tuple[list[dict], str]:
    """Runs the lesson tests (or ``files``) with the recorder: its records (one per check a passing
    test built), and pytest's summary line ("81 passed in 0.9s")."""
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}  # e.g. a -k of ours
    env.update(DLLAB_CHECK_RECORD_DIR=str(folder),
               # PYTEST_PLUGINS: loaded by every process of the run, pytest-xdist's workers too
               PYTEST_PLUGINS="check_recorder",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    # No nbmake: no notebook runs here, and its plugin imports nbformat and jsonschema's checks (~0.9 s).
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:nbmake",
               *map(str, lesson_test_files() if files is None else files)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    # 0: all passed; 1: some failed (their records are left out, so their sites show as uncovered)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    records = []
    for path in sorted(folder.glob("records-*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines()]
    lines = done.stdout.strip().splitlines()
    return records, lines[-1].strip("= ") if lines else "no output"


def site_of(record: dict, sites: list[Site]) -> Site | None:
    """The innermost site whose call contains the instruction that built the check."""
    containing = [s for s in sites if s.file == record["file"] and s.contains(record["span"])]
    return min(containing, key=Site.size, default=None)


#: The shortest piece of a claim a test may name it by (a claim shorter than this: the whole claim).
NAME_CHARS = 12


def _strings(node: ast.AST) -> set[str]:
    """The string literals in ``node``, with the literal parts of its f-strings."""
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@functools.cache
def names_in_test(test_file: str, function: str) -> frozenset[str]:
    """The strings a test function names claims by: its own literals (decorators included) and
    those of the module-level names it uses (``CLAIM = "..."``, a tuple of claims, a function of the
    test file that picks a claim by its words)."""
    tree = ast.parse(Path(test_file).read_text())
    module_values: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != function:
            module_values.setdefault(node.name, set()).update(_strings(node))
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        module_values.setdefault(name.id, set()).update(_strings(node.value))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            found |= _strings(node)
            for name in ast.walk(node):
                if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Load):
                    found |= module_values.get(name.id, set())
    return frozenset(found)


def named(record: dict) -> bool:
    """Whether the test that read this ✗ names its claim: a literal of the test (or a module-level
    constant it uses) is the claim, or a piece of it at least :data:`NAME_CHARS` long. A test that
    reads every verdict and counts the ✗s (``len(failing(...)) == 3``) names none."""
    claim = record["claim"]
    return any(text == claim or (len(text) >= min(NAME_CHARS, len(claim)) and text in claim)
               for text in names_in_test(record["test_file"], record["test_function"]))


def test_the_site_finder_knows_the_constructors():
    can_fail, premise_only = constructors()
    assert {"Check", "holds", "at_least", "at_most", "near", "exceeds", "clearly_above"} <= can_fail
    assert premise_only == {"premise_failed"}
    source = ("from ..checks import Check, holds as h, premise_failed\n"
              "a = [h('x', n > 1, ''), Check('y', '', True), premise_failed('z', '', 'no GPU'),\n"
              "     Check('w', '', None, 'no GPU')]\n")
    sites = check_sites(source, "helpers/lessons/example.py")
    assert [(s.constructor, s.claim, s.always_passes) for s in sites] == [
        ("holds", "'x'", False), ("Check", "'y'", True)]


def test_every_lesson_check_has_a_failing_case(tmp_path):
    sites = all_check_sites()
    assert len(sites) > 100, "the site finder found too few checks"
    records, outcome = run_lesson_tests(tmp_path)
    assert records, f"the recorder saw no check: did the lesson tests run? ({outcome})"
    failed = [r for r in records if r["passed"] is False and r["read"] and named(r)]
    unplaced = [r for r in failed if site_of(r, sites) is None]
    if unplaced:
        pytest.fail("checks built where the site finder does not look (a constructor it does not know?):\n"
                    + "\n".join(f"- {r['file']}:{r['span'][0]}: {r['claim']}" for r in unplaced),
                    pytrace=False)
    covered = {site_of(r, sites) for r in failed}
    unread = {site_of(r, sites) for r in records if r["passed"] is False and not r["read"]}
    unnamed = {site_of(r, sites) for r in records if r["passed"] is False and r["read"] and not named(r)}
    claims: dict[Site, set[str]] = {}
    for r in records:  # the claims each site was seen to make, to name them in the message
        site = site_of(r, sites)
        if site is not None:
            claims.setdefault(site, set()).add(r["claim"])
    uncovered = [s for s in sites if s not in covered and (Path(s.file).name, s.claim) not in EXEMPT]
    if uncovered:
        pytest.fail(
            f"{len(uncovered)} of {len(sites)} lesson checks never fail in a passing unit test "
            f"(add a configuration where the lesson is false; the lesson tests: {outcome}):\n"
            + "\n".join(f"- {s}" + (" — a test read its ✗ but never named the claim" if s in unnamed
                                    else " — a test built its ✗ but never read the verdict" if s in unread
                                    else "")
                        + "".join(f"\n    claim: {c}" for c in sorted(claims.get(s, ())))
                        for s in uncovered), pytrace=False)
    stale = [key for key in EXEMPT if not any((Path(s.file).name, s.claim) == key for s in sites)
             or any((Path(s.file).name, s.claim) == key for s in covered)]
    assert not stale, f"exempt, yet covered now or gone (remove from EXEMPT): {stale}"


_READS = r"""
import os

import helpers.lessons
from helpers.classroom.checks import LessonChecks, holds

# A check built from a frame the recorder takes for a lesson module's (the file need not exist).
SITE = os.path.join(os.path.dirname(helpers.lessons.__file__), "recorder_example.py")


def build(source):
    namespace = {"holds": holds}
    exec(compile(source, SITE, "exec"), namespace)
    return namespace["made"]


def test_read_directly():
    assert build("made = holds('read directly', False, '')").passed is False


def test_read_through_lesson_checks():
    assert LessonChecks([build("made = holds('read through LessonChecks', False, '')")]).failed()


def test_built_and_never_read():
    build("made = holds('never read', False, '')")


def test_read_only_by_the_lesson():
    build("made = holds('read by the lesson', False, ''); made.passed")


# A comparison built as a check, its verdict folded into the check the learner sees (bugs.py does this)
FOLDED = ("step = holds('{0}: the comparison', False, '')\n"
          "made = holds('{0}: the claim shown', step.passed, '')")


def test_folded_and_the_shown_check_read():
    assert build(FOLDED.format("folded, read")).passed is False


def test_folded_and_the_shown_check_never_read():
    build(FOLDED.format("folded, unread"))
"""


def test_a_failing_check_counts_only_where_the_test_reads_its_verdict(tmp_path):
    # The recorder against tests that each build a ✗ from a lesson's frame: only those whose test reads
    # the verdict (directly, or through LessonChecks) are marked read, and a comparison the lesson
    # folded into the check it shows only when the test reads that check.
    example = tmp_path / "test_reads.py"
    example.write_text(_READS)
    folder = tmp_path / "records"
    folder.mkdir()
    records, outcome = run_lesson_tests(folder, [example])
    read = {r["claim"]: r["read"] for r in records}
    assert read == {"read directly": True, "read through LessonChecks": True, "never read": False,
                    "read by the lesson": False,
                    "folded, read: the comparison": True, "folded, read: the claim shown": True,
                    "folded, unread: the comparison": False, "folded, unread: the claim shown": False}, \
        (read, outcome)


_NAMING = '''
CLAIM = "a claim kept in a module constant"


def pick(checks):
    return [c for c in checks if "picked by a helper of the file" in c.claim]


def test_named_in_full():
    assert failing(checks) == ["a claim named in full by the test"]


def test_named_by_a_piece():
    assert any(c.startswith("named by a piece") for c in failing(checks))


def test_counted():  # what main_process.py's checks had: the ✗s counted, none named
    assert len(failing(main_process_case(sweep={5: 0.018, 1: 0.04}))) == 3


def test_by_constant():
    assert CLAIM in failing(checks)


def test_by_helper():
    (check,) = pick(checks)
'''


def test_a_failing_check_counts_only_where_the_test_names_its_claim(tmp_path):
    example = tmp_path / "test_naming.py"
    example.write_text(_NAMING)

    def is_named(claim, function):
        return named({"claim": claim, "test_file": str(example), "test_function": function})

    assert is_named("a claim named in full by the test", "test_named_in_full")
    assert is_named("named by a piece of its words, the rest measured: 3.2 ms", "test_named_by_a_piece")
    assert not is_named("5 workers: the time per batch is the model's floor y + m, not n/5", "test_counted")
    assert not is_named("a claim named in full by the test", "test_counted")  # named by another test only
    assert is_named("a claim kept in a module constant", "test_by_constant")
    assert is_named("a claim picked by a helper of the file, and more", "test_by_helper")
