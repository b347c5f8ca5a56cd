"""Every lesson check can fail, shown by name: each id a lesson writes is asserted failing, with its
premise held, by a passing unit test.

A lesson builds every check with ``id="<notebook>.<topic>.<claim>"``, a string literal in
``helpers/lessons/`` (the constructors of ``helpers/classroom/checks.py`` that can return ✓ or ✗
require it). :func:`lesson_ids` reads those literals from the source. The test files that call
``assert_fails`` (``tests/lesson_checks.py``) run in a pytest subprocess with
``tests/check_recorder.py``, which writes down the ids each *passing* test asserted failing. An id
that no passing test asserted is red; so is an asserted id that no lesson writes. Nothing is
matched by claim text, and a test that only counts ✗s credits no id.

The subprocess makes the result independent of the order the tests run in, and of pytest-xdist (the
plugin is loaded by every process, each writes its own record file).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "helpers" / "lessons"

#: ``<notebook>.<topic>.<claim>``: the notebook as the notebooks number themselves (00, 00b, 01 … 20),
#: then lower-case words with underscores.
ID = re.compile(r"(?:\d\d|00b)\.[a-z0-9_]+\.[a-z0-9_]+")
#: A lesson module's docstring opens with its notebook: "Notebook 05 · worker start-up…".
NOTEBOOK = re.compile(r"Notebook (\w+) ·")


def id_keywords(source: str) -> list[tuple[int, str, ast.expr]]:
    """Every ``id=`` keyword of a call in ``source``: (line, the called function's name, the value)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "?")
            out += [(kw.lineno, name, kw.value) for kw in node.keywords if kw.arg == "id"]
    return out


def lesson_ids() -> dict[str, list[str]]:
    """Every id a lesson writes -> where (``file:line``). Each must be a string literal."""
    ids: dict[str, list[str]] = {}
    for path in sorted(LESSONS.glob("*.py")):
        for line, _, value in id_keywords(path.read_text()):
            where = f"{path.relative_to(ROOT).as_posix()}:{line}"
            assert isinstance(value, ast.Constant) and isinstance(value.value, str), \
                f"{where}: id={ast.unparse(value)} is not a string literal"
            ids.setdefault(value.value, []).append(where)
    return ids


def asserting_test_files() -> list[Path]:
    """The test files that import :mod:`lesson_checks` (the only way a test can credit an id)."""
    return [path for path in sorted((ROOT / "tests").glob("test_*.py"))
            if path.name != Path(__file__).name
            and re.search(r"^\s*(from lesson_checks import|import lesson_checks)", path.read_text(), re.M)]


def run_recorded(folder: Path, files: list[Path] | None = None) -> tuple[list[dict], str]:
    """Runs the test files that assert ids (or ``files``) with the recorder: its records, one per id a
    passing test asserted failing, and pytest's summary line ("81 passed in 0.9s")."""
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}  # e.g. a -k of ours
    env.update(DLLAB_CHECK_RECORD_DIR=str(folder),
               # PYTEST_PLUGINS: loaded by every process of the run, pytest-xdist's workers too
               PYTEST_PLUGINS="check_recorder",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    # No nbmake: no notebook runs here, and its plugin imports nbformat and jsonschema's checks (~0.9 s).
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:nbmake",
               *map(str, asserting_test_files() if files is None else files)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    # 0: all passed; 1: some failed (they record nothing, so their ids show as not asserted)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    records = []
    for path in sorted(folder.glob("records-*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines()]
    lines = done.stdout.strip().splitlines()
    return records, lines[-1].strip("= ") if lines else "no output"


def test_every_id_is_a_literal_named_for_its_notebook():
    ids = lesson_ids()
    assert len(ids) >= 40, f"too few ids found: {sorted(ids)}"
    bad = [f"{id} ({', '.join(where)})" for id, where in ids.items() if not ID.fullmatch(id)]
    assert not bad, "ids not of the form <notebook>.<topic>.<claim> (lower case, dots, underscores):\n" + \
        "\n".join(bad)
    for path in LESSONS.glob("*.py"):
        number = NOTEBOOK.search(ast.get_docstring(ast.parse(path.read_text())) or "")
        written = {value.value for _, _, value in id_keywords(path.read_text())}
        if written:
            assert number, f"{path.name}: its docstring names no notebook ('Notebook NN · …')"
            assert all(id.split(".")[0] == number.group(1) for id in written), (path.name, sorted(written))


def test_an_id_is_judged_in_one_place():
    # One id, one claim: the call that judges it is written once (in a loop, it judges every instance);
    # the same id on premise_failed(...) names the claim where the run cannot test it.
    judged: dict[str, list[str]] = {}
    for path in sorted(LESSONS.glob("*.py")):
        for line, name, value in id_keywords(path.read_text()):
            if name != "premise_failed":
                judged.setdefault(value.value, []).append(f"{path.name}:{line}")
    twice = {id: where for id, where in judged.items() if len(where) > 1}
    assert not twice, twice
    only_premise = set(lesson_ids()) - set(judged)
    assert not only_premise, f"ids only ever given to premise_failed: {sorted(only_premise)}"


def missing_ids(ids: dict[str, list[str]], records: list[dict]) -> list[str]:
    """The ids no record shows asserted failing by a passing test."""
    return sorted(set(ids) - {r["id"] for r in records})


def test_every_lesson_check_is_shown_failing_by_its_id(tmp_path):
    ids = lesson_ids()
    records, outcome = run_recorded(tmp_path)
    asserted = {r["id"] for r in records}
    assert asserted, f"no test asserted any id: did the lesson tests run? ({outcome})"
    missing = missing_ids(ids, records)
    if missing:
        pytest.fail(f"{len(missing)} of {len(ids)} lesson checks are never asserted failing (assert_fails) "
                    f"by a passing test (the tests: {outcome}):\n"
                    + "\n".join(f"- {id} ({', '.join(ids[id])})" for id in missing), pytrace=False)
    unknown = sorted(asserted - set(ids))
    assert not unknown, f"tests assert ids no lesson writes: {unknown}"


_RECORDED = '''
import pytest
from lesson_checks import assert_fails

from helpers.classroom.checks import at_least, holds


def failing(checks):
    return [c.claim for c in checks if c.passed is False]


CHECKS = [holds("a claim", False, "measured", id="99.example.counted"),
          at_least("another", 1.0, 2.0, id="99.example.asserted"),
          at_least("a third", 1.0, 2.0, id="99.example.asserted_then_the_test_fails"),
          holds("not measured", False, "nan", id="99.example.premise", inputs=(float("nan"),))]


def test_counts_the_failures():  # every ✗ read, none named
    assert len(failing(CHECKS)) == 3


def test_asserts_one_id():
    assert assert_fails(CHECKS, "99.example.asserted").claim == "another"


def test_asserts_an_id_and_then_fails():
    assert_fails(CHECKS, "99.example.asserted_then_the_test_fails")
    assert False


def test_a_failed_premise_is_not_a_failure():
    with pytest.raises(AssertionError, match="did not fail"):
        assert_fails(CHECKS, "99.example.premise")
'''


def test_only_a_passing_test_s_assert_fails_credits_an_id(tmp_path):
    example = tmp_path / "test_recorded.py"
    example.write_text(_RECORDED)
    folder = tmp_path / "records"
    folder.mkdir()
    records, outcome = run_recorded(folder, [example])
    assert "1 failed, 3 passed" in outcome, outcome
    assert [(r["id"], r["test"].split("::")[-1]) for r in records] == [
        ("99.example.asserted", "test_asserts_one_id")], records


def test_a_file_that_only_counts_failures_credits_nothing(tmp_path):
    example = tmp_path / "test_counting.py"
    example.write_text(_RECORDED.split("\n\ndef test_asserts_one_id")[0])
    folder = tmp_path / "records"
    folder.mkdir()
    records, outcome = run_recorded(folder, [example])
    assert "1 passed" in outcome and records == [], (outcome, records)
    # so the coverage test is red for the ids it only counted
    built = {"99.example.counted": ["example"], "99.example.asserted": ["example"]}
    assert missing_ids(built, records) == ["99.example.asserted", "99.example.counted"]
