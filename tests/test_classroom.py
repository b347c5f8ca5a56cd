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
    block = _cell("markdown", "```python\nclass A:\n" + "    x = 1\n" * 40 + "```")
    assert slides.is_pattern_to_copy([block], 0)
    assert not slides.is_pattern_to_copy([_cell("markdown", "Some words.\n" + "".join(block["source"]))], 0)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_each_lesson_asks_before_its_main_measurement_and_keeps_the_pick(path):
    sources = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    asked = {m.group(1): i for i, s in enumerate(sources)
             for m in re.finditer(r"(\w+) = helpers\.Prediction\(", s)}
    # a measurement: a DataLoader run, a recording, one of the lab's timing helpers (helpers.time_...)
    # a training run killed and resumed, or a failure demo, in child processes
    measured = [i for i, s in enumerate(sources)
                if any(m in s for m in ("DataLoader(", "record", "helpers.time_", "helpers.diagnose(",
                                        "helpers.kill_and_resume(", "helpers.run_demo("))]
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


def _notebook(path: Path, *cells: str) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_a_failed_lesson_check_or_a_crash_costs_no_page_and_the_build_fails_naming_them(tmp_path, capsys):
    """A failed check (a slower machine's, say) stops no build: every page and the index are
    written, the stopped ones are marked, and the command exits 1 naming them."""
    import handouts

    source, out = tmp_path / "notebooks", tmp_path / "handouts"
    source.mkdir()
    _notebook(source / "01_passes.ipynb", "print('all good')")
    _notebook(source / "02_check_fails.ipynb", "print('before the check')",
              "import ipywidgets\nipywidgets.IntSlider(value=7, description='picked')",
              "from helpers.classroom.checks import Check, show_checks\n"
              "show_checks([Check('workers run ahead', '0 batches ahead', False, id='03.example.ahead'),\n"
              "             Check('it runs', 'yes', True, id='03.example.runs')])",
              "print('after', 'the check')")
    _notebook(source / "03_crashes.ipynb", "print('started')", "import os\nos._exit(1)", "print('never')")
    code = handouts.main(["--cdn", "--quick", "--source", str(source), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 1
    failures = printed[printed.index("FAILED: 2 of 3 notebooks"):]
    assert "02_check_fails: lesson check failed: 1 of 2" in failures
    assert "03_crashes: kernel died" in failures and "01_passes" not in failures
    passed, failed, crashed = (out / f"{p.stem}.html" for p in sorted(source.glob("*.ipynb")))
    assert "all good" in passed.read_text() and "dllab-stopped" not in passed.read_text()
    page = failed.read_text()
    banner = page[page.index("<body"):page.index("before the check")]  # at the top, above the outputs
    assert "A lesson check failed on this run" in banner and "workers run ahead (measured: 0 batches ahead)" \
        in banner and "1 of 2 lesson checks failed" in banner and "show_checks" in banner
    assert "LessonCheckFailed" in page[page.index("before the check"):], "the cell shows its error"
    assert "application/vnd.jupyter.widget-state+json" in page and '"description": "picked"' in page, \
        "the widgets shown before the failure keep their state"
    assert "after the check" not in page, "the cells after it did not run"
    page = crashed.read_text()
    assert page.index("the kernel died") < page.index("started") and "_exit" in page
    assert "DeadKernelError" in page[page.index("started"):], "the cell shows the error"
    index = (out / "index.html").read_text()
    assert all(f"href='{p.stem}.html'" in index for p in source.glob("*.ipynb"))
    assert "2 notebooks did not run to the end" in index
    assert "✗ lesson check failed: 1 of 2 lesson checks failed on this run: - workers run ahead" in index
    assert "(not built)" not in index, "the README's rows are those of the notebooks in --source"
    assert "✗ kernel died" in index and index.count("✗") == 3  # the two rows and the note above the table
    assert list(json.loads((out / "run_times.json").read_text())) == ["01_passes"]
    # Rebuilding one page keeps the other pages' marks in the index.
    assert handouts.main(["--cdn", "--quick", "--source", str(source), "--out", str(out), "01"]) == 0
    index = (out / "index.html").read_text()
    assert "✗ lesson check failed" in index and "✗ kernel died" in index


def test_a_cell_past_the_timeout_stops_its_run_and_shows_where(tmp_path):
    import handouts

    _notebook(tmp_path / "01_slow.ipynb", "print('started')", "import time\ntime.sleep(3)", "print('never')")
    ran, seconds, stop = handouts.execute(tmp_path / "01_slow.ipynb", quick=True, timeout=1)
    assert stop.kind == "timeout" and "timed out" in stop.message and stop.code == "import time"
    assert ran.cells[0].outputs and not ran.cells[2].outputs
    assert ran.cells[1].outputs[-1].output_type == "error", "the cell shows the timeout"
    page = handouts.mark_stopped("<html><body class='x'><p>cells</p></body></html>", stop)
    assert page.index("a cell ran past the time limit") < page.index("<p>cells</p>")
    assert f"href='#cell-id={ran.cells[1].id}'" in page and handouts.stopped_on(page) == stop.summary()
    assert handouts.mark_stopped("<body>", None) == "<body>"
