"""Presenting in class: slide metadata on every cell by one rule, slides that fit, a prediction
before each lesson's main measurement, and a handout page built from a real run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import slides  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
LESSONS = [p for p in NOTEBOOKS if not p.name.startswith("00_")]


def _cell(kind: str, source: str, slide_type: str | None = None) -> dict:
    meta = {"slideshow": {"slide_type": slide_type}} if slide_type else {}
    return {"cell_type": kind, "metadata": meta, "source": source.splitlines(keepends=True)}


def test_every_cell_of_every_notebook_has_its_slide_type_and_every_slide_fits():
    assert slides.main(["--check"]) == 0


def test_the_slide_check_fails_on_a_missing_type_and_an_overlong_slide(tmp_path):
    path = tmp_path / "01_x.ipynb"
    cells = [_cell("markdown", "# Title", "slide"), _cell("code", "DataLoader(dataset)")]
    path.write_text(json.dumps({"cells": cells}))
    assert "slide_type None, the rule says 'subslide'" in slides.problems(path)[0]
    long = _cell("markdown", "## A section\n" + "a line\n" * slides.MAX_SLIDE_LINES, "slide")
    path.write_text(json.dumps({"cells": [long]}))
    assert "split the markdown cell" in slides.problems(path)[0]
    wide = _cell("markdown", "## A section\n" + "x" * slides.WRAP * (slides.MAX_SLIDE_LINES + 1), "slide")
    path.write_text(json.dumps({"cells": [wide]}))
    assert slides.problems(path), "a long line counts as the lines it wraps to"


def test_the_rule_gives_each_part_of_the_rhythm_its_place():
    assert slides.slide_type(_cell("markdown", "## 1 · Question\n**Predict:** ...")) == "slide"
    assert slides.slide_type(_cell("markdown", "**Reading it.** ...")) == "subslide"
    assert slides.slide_type(_cell("code", "loader = DataLoader(d, num_workers=2)")) == "subslide"
    assert slides.slide_type(_cell("code", "guess = helpers.Prediction('k', 'q', {})")) == "fragment"
    assert slides.slide_type(_cell("code", "START = helpers.use_start_method()")) == "skip"
    assert slides.slide_type(_cell("markdown", slides.NOTES_MARK + " run all first")) == "notes"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_each_lesson_asks_before_its_main_measurement_and_keeps_the_pick(path):
    sources = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    asked = {m.group(1): i for i, s in enumerate(sources)
             for m in re.finditer(r"(\w+) = helpers\.Prediction\(", s)}
    # a measurement: a DataLoader run, a recording, one of the lab's timing helpers (helpers.time_...)
    # or a training run killed and resumed in child processes
    measured = [i for i, s in enumerate(sources)
                if any(m in s for m in ("DataLoader(", "record", "helpers.time_",
                                        "helpers.kill_and_resume("))]
    assert asked and "guess" in asked, "the main prediction is called guess"
    for name, question in asked.items():
        revealed = [i for i, s in enumerate(sources) if f"{name}.reveal(" in s]
        assert revealed and revealed[0] > question, f"{name} is revealed after it is asked"
        assert any(question < i <= revealed[0] for i in measured), \
            f"a measurement between {name} and its answer"
        assert any("save_results(" in s and f"{name}.result()" in s for s in sources), \
            f"{name}'s pick is kept"


def test_a_handout_page_is_built_from_a_real_run(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "handouts.py"), "--quick", "--cdn",
                           "--out", str(tmp_path), "06"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "06_pinned_memory.html").read_text()
    assert "data:image/png;base64" in page, "the figures are embedded"
    assert "application/vnd.jupyter.widget-state+json" in page, "the widget state is embedded"
    assert "dllab-answer" in page, "the prediction's answer (an HTML widget's state) is on the page"
    assert "pinned_run" in page and "lesson checks passed" in page, "code and outputs of the run"
    index = (tmp_path / "index.html").read_text()
    assert "href='06_pinned_memory.html'" in index and "(not built)" in index
    times = json.loads((tmp_path / "run_times.json").read_text())
    assert times["06_pinned_memory"]["quick"] > 0


def test_handouts_refuse_an_unknown_notebook(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "handouts.py"), "--cdn", "--out",
                           str(tmp_path), "99"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no notebook '99'" in done.stderr


def test_every_notebook_states_its_measured_run_time_in_both_modes(tmp_path, monkeypatch):
    import run_times

    assert run_times.problems() == []
    for path in NOTEBOOKS:
        times = json.loads(path.read_text())["metadata"]["dataloader_lab"]["run_time_s"]
        assert times["full"] > 0 and times["quick"] > 0 and times["machine"]
    # A notebook without measurements, or whose line disagrees with them, is reported.
    (tmp_path / "notebooks").mkdir()
    nb = {"metadata": {}, "cells": [_cell("markdown", "# 01 · Title\n\nText")]}
    (tmp_path / "notebooks" / "01_x.ipynb").write_text(json.dumps(nb))
    monkeypatch.setattr(run_times, "ROOT", tmp_path)
    assert "no measured run time" in run_times.problems()[0]
    run_times.write({"01_x": {"full": 31.9, "quick": 11.4}}, "a test machine")
    written = json.loads((tmp_path / "notebooks" / "01_x.ipynb").read_text())
    assert "".join(written["cells"][0]["source"]).splitlines()[2].startswith("*Run time on a test machine")
    assert run_times.problems() == []
    written["metadata"]["dataloader_lab"]["run_time_s"]["full"] = 99.0
    (tmp_path / "notebooks" / "01_x.ipynb").write_text(json.dumps(written))
    assert "does not state the measured run time" in run_times.problems()[0]


def test_a_notebook_that_stops_still_gets_its_page_marked_and_the_run_fails(tmp_path):
    import nbformat

    import handouts

    cells = ["print('before')", "raise RuntimeError('a lesson check failed')", "print('after')"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "99_stops.ipynb"
    nbformat.write(nb, path)
    ran, seconds, error = handouts.execute(path, quick=True)
    assert "a lesson check failed" in error and seconds > 0
    assert ran.cells[0].outputs and not ran.cells[2].get("outputs")
    page = handouts.mark_stopped("<html><body class='x'><p>cells</p></body></html>", error)
    assert page.index("This run stopped before its end") < page.index("<p>cells</p>")
    assert handouts.mark_stopped("<body>", None) == "<body>"
    stem = NOTEBOOKS[0].stem
    index = handouts.index_page({stem: 1.0}, True, {stem: error})
    assert "✗ stopped: RuntimeError: a lesson check failed" in index
