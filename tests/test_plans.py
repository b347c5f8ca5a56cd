"""Teaching material that fits a real course: the guide's plans reach every notebook; its first page
holds what an instructor needs to teach the class; each notebook's instructor note is its own (its
prediction, what to show); the overview deck runs nothing and carries the current reference figures."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import slides  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
OVERVIEW = ROOT / "notebooks" / slides.OVERVIEW
GUIDE = ROOT / "INSTRUCTORS.md"
#: Two notes may share a run of at most this many words (a link, "in quick mode", a title).
SHARED_WORDS = 9


def _number(path: Path) -> str:
    return path.name.split("_")[0]


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def plan_rows(guide: str) -> list[list[str]]:
    """The cells of every table row of the plans: the 90-minute class on the first page and the
    "Course plans" section (header rows left out)."""
    rows = []
    for heading in ("## The 90-minute class", "## Course plans"):
        for line in _section(guide, heading).splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("|") and cells[0] not in ("min", "") and not set(cells[0]) <= set("-"):
                rows.append(cells)
    return rows


def planned_notebooks(guide: str) -> set[str]:
    """The notebook numbers the plans' tables name in their second column (00, 00b, 01 …)."""
    return {n for row in plan_rows(guide) for n in re.findall(r"\b\d\d[a-z]?\b", row[1])}


def missing_from_plans(guide: str, notebooks: list[Path]) -> list[str]:
    planned = planned_notebooks(guide)
    return [p.name for p in notebooks if _number(p) not in planned]


def test_the_plans_together_cover_every_notebook():
    assert missing_from_plans(GUIDE.read_text(), NOTEBOOKS) == []


def test_a_plan_that_stops_before_a_notebook_is_caught():
    guide = GUIDE.read_text()
    without_16 = "\n".join(line for line in guide.splitlines()
                            if not re.match(r"\| [\d–]+ \| \[?16\b", line))
    assert "16_diagnose.ipynb" in missing_from_plans(without_16, NOTEBOOKS)


# -- instructor notes ------------------------------------------------------------------------------
def note(path: Path) -> str:
    """The guide's note for a notebook: its section in INSTRUCTORS.md, heading left out (not in the
    notebook: a learner reads every cell, and a note gives the vote away)."""
    guide = GUIDE.read_text()
    heading = f"\n### Notebook {_number(path)}\n"
    assert heading in guide, f"{path.name}: no section '### Notebook {_number(path)}' in INSTRUCTORS.md"
    start = guide.index(heading) + len(heading)
    return guide[start:re.search(r"\n##+ ", guide[start:]).start() + start].strip()


#: What an instructor needs from the first page, and a phrase that shows each is there.
FIRST_PAGE_NEEDS = {"the plan": "| min | notebook |", "the measured answers, both modes": "full size · quick",
                    "a fallback for each notebook": "if you skip the run", "how to present": "deck button",
                    "reveal after the vote": "Show the measured answer", "Run All before class": "Run All",
                    "07 without a GPU": "Without a GPU, 07", "what to skip": "Short of time",
                    "what to hand out": "What to hand out"}


def test_the_90_minute_class_is_the_guides_first_page():
    guide = GUIDE.read_text()
    assert "## The 90-minute class" in guide[:200], "the guide opens with the 90-minute class"
    first_words = " ".join(guide.split()[:800])
    missing = [need for need, phrase in FIRST_PAGE_NEEDS.items() if phrase not in first_words]
    assert missing == [], f"not within the first page's 800 words: {missing}"
    first_page = guide[:guide.index("\n## ", guide.index("## The 90-minute class") + 1)]
    rows = plan_rows(first_page + "\n## Course plans\n")
    planned = {re.search(r"\b(\d\d\w?)\b", row[1]).group(1) for row in rows}
    cards = set(re.findall(r"^- \*\*(\d\d\w?)\*\* ·", first_page, re.M))
    assert planned == cards, "a card for each notebook of the plan"
    for card in re.split(r"\n(?=- \*\*)", first_page[first_page.index("**The cards**"):
                                                     first_page.index("**Short of time**")])[1:]:
        assert len(card.strip().splitlines()) <= 4, f"a card of more than four lines: {card[:40]}"


def longest_shared_words(a: str, b: str) -> tuple[int, str]:
    """The longest run of words two texts share: (its length, the words)."""
    x, y = a.split(), b.split()
    best, end = 0, 0
    previous = [0] * (len(y) + 1)
    for i in range(1, len(x) + 1):
        current = [0] * (len(y) + 1)
        for j in range(1, len(y) + 1):
            if x[i - 1] == y[j - 1]:
                current[j] = previous[j - 1] + 1
                if current[j] > best:
                    best, end = current[j], i
        previous = current
    return best, " ".join(x[end - best:end])


def test_no_two_instructor_notes_share_more_than_a_short_phrase():
    notes = {p.stem: note(p) for p in NOTEBOOKS}
    names = sorted(notes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            n, words = longest_shared_words(notes[a], notes[b])
            assert n <= SHARED_WORDS, f"{a} and {b} share {n} words: {words!r}"


def test_the_shared_phrase_check_catches_a_boilerplate_sentence():
    boilerplate = "restart the kernel and Run All before class, select this title cell, press the deck button"
    n, words = longest_shared_words(f"One note. {boilerplate}.", f"Another note: {boilerplate}!")
    assert n > SHARED_WORDS and "select this title cell" in words


def question_pattern(source: str) -> re.Pattern | None:
    """The question of the notebook's main prediction (``guess = helpers.Prediction(key, question,
    ...)``) as a pattern: its literal text, with any value an f-string fills in matching anything."""
    for node in ast.walk(ast.parse(source)):
        call = getattr(node, "value", None)
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["guess"]
                and isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "Prediction"):
            question = node.value.args[1]
            parts = question.values if isinstance(question, ast.JoinedStr) else [question]
            text = "".join(re.escape(p.value) if isinstance(p, ast.Constant) else "(.+?)" for p in parts)
            return re.compile(re.sub(r"(\\ )+", r"\\s+", text))
    return None


def _code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def _headings(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return [line[3:].strip() for c in cells if c["cell_type"] == "markdown"
            for line in "".join(c["source"]).splitlines() if line.startswith("## ")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_note_names_its_prediction_and_what_to_show(path):
    text = " ".join(note(path).split())
    pattern = question_pattern(_code(path))
    if "helpers.Prediction(" in _code(path):
        assert pattern is not None, "the main prediction is guess = helpers.Prediction(key, question, ...)"
        assert pattern.search(text), f"the note quotes the vote's question: {pattern.pattern!r}"
    figures = [f for f in re.findall(r"images/[\w.-]+\.png", text) if (ROOT / f).is_file()]
    slides_named = [h for h in _headings(path) if f"*{h}*" in text]
    assert figures or slides_named, "the note names the figure (images/…) or the slide (*heading*) to show"


def test_the_question_pattern_reads_f_strings():
    source = 'guess = helpers.Prediction("k", f"With {N} workers: how long per batch?", {"1": 1})'
    pattern = question_pattern(source)
    assert pattern.search("the vote: With 4 workers: how long per batch? expect 1")
    assert not pattern.search("How long per batch?")
    assert question_pattern("x = 1") is None


# -- the overview deck -----------------------------------------------------------------------------
def test_the_overview_runs_nothing_and_carries_the_current_figures():
    nb = json.loads(OVERVIEW.read_text())
    assert {c["cell_type"] for c in nb["cells"]} == {"markdown"}
    assert slides.figure_problems(OVERVIEW, ROOT / "images") == []
    shown = {name for c in nb["cells"] for name, _, _ in slides.FIGURE.findall("".join(c["source"]))}
    assert len(shown) >= 6 and all((ROOT / "images" / name).is_file() for name in shown)
    assert OVERVIEW in slides.notebooks(), "the slide rule (and its --check) covers the overview"
    assert "notebooks/overview.ipynb" in (ROOT / "README.md").read_text()


def test_a_stale_or_missing_overview_figure_is_caught(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    png = (ROOT / "images" / "resume.png").read_bytes()
    (images / "resume.png").write_bytes(png)
    cell = {"cell_type": "markdown", "metadata": {},
            "source": ['## A slide\n', '<img src="attachment:resume.png" alt="resume" width="0">\n']}
    nb = {"cells": [cell]}
    assert slides.apply_figures(nb, images)
    path = tmp_path / slides.OVERVIEW
    path.write_text(json.dumps(nb))
    assert slides.figure_problems(path, images) == []
    assert f'width="{slides.figure_width(images / "resume.png")}"' in "".join(nb["cells"][0]["source"])
    (images / "resume.png").write_bytes(png[:-8] + b"changed!")  # a regenerated figure
    assert "differ from images/" in slides.figure_problems(path, images)[0]
    (images / "resume.png").unlink()
    assert any("does not exist" in p for p in slides.figure_problems(path, images))
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": ["1"], "outputs": [],
                        "execution_count": None})
    path.write_text(json.dumps(nb))
    assert any("runs nothing" in p for p in slides.figure_problems(path, images))


def test_a_figure_fits_a_slide():
    for name in ("device_prefetch_gpu.png", "blog_timeline_0_vs_2_workers.png", "diagnose_mysteries.png"):
        png = ROOT / "images" / name
        width, height = (int.from_bytes(png.read_bytes()[i:i + 4], "big") for i in (16, 20))
        shown = slides.figure_width(png)
        assert shown <= slides.FIGURE_MAX_WIDTH and shown * height / width <= slides.FIGURE_MAX_HEIGHT + 1


def _table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| What you see")]


def test_the_overview_decision_table_is_00b_s():
    def table(path: Path) -> list[str]:
        cells = json.loads(path.read_text())["cells"]
        sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
        return [row for source in sources if "| What you see |" in source for row in _table_rows(source)]

    way_in = table(ROOT / "notebooks" / "00b_my_gpu_is_idle.ipynb")
    assert len(way_in) >= 10 and table(OVERVIEW) == way_in
