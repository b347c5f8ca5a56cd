"""Slide metadata for presenting the notebooks live (jupyterlab-slideshow, also RISE/nbconvert).

One rule for every notebook, so each slide holds one idea:

- a markdown cell that opens with a heading starts a **slide** (the title, each section's
  question and prediction, Explore, Lesson checks, Key takeaways);
- any other markdown cell (the reading of a picture, a further step) is a **subslide**;
- a code cell is a **subslide**: the DataLoader call with its picture or table;
- the prediction widget (``helpers.Prediction``) is a **fragment** on its question's slide,
  and its reveal is a subslide of its own: the answer, after the run;
- the setup cell (``helpers.use_start_method()``) and the results file (``save_results``)
  are **skipped**: they run, but a room does not need to see them;
- the instructor's note under the title is **notes** (speaker notes).

``--write`` applies the rule to every notebook; ``--check`` exits 1 when a notebook's
metadata differs from it or a slide is too long to fit (a test runs it).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: At most this many lines on one slide (its cells' source, long lines counted as wrapped at
#: WRAP characters): about what a 1280×720 window shows at JupyterLab's default font size.
MAX_SLIDE_LINES = 30
WRAP = 100
NOTES_MARK = "*Instructor's note:*"


def slide_type(cell: dict) -> str:
    source = "".join(cell["source"])
    if cell["cell_type"] == "markdown":
        if source.startswith(NOTES_MARK):
            return "notes"
        return "slide" if source.startswith("#") else "subslide"
    if "helpers.use_start_method()" in source or "helpers.save_results(" in source:
        return "skip"
    if "helpers.Prediction(" in source:
        return "fragment"
    return "subslide"


def wrapped_lines(source: str) -> int:
    return sum(max(1, math.ceil(len(line) / WRAP)) for line in source.splitlines())


def slides(cells: list[dict]) -> list[tuple[int, int]]:
    """(index of the slide's first cell, its lines) for every slide and subslide."""
    out: list[list[int]] = []
    for i, cell in enumerate(cells):
        kind = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
        if kind in ("skip", "notes"):
            continue
        lines = wrapped_lines("".join(cell["source"]))
        if kind in ("slide", "subslide") or not out:
            out.append([i, lines])
        else:  # "-" and fragments add to the slide on screen
            out[-1][1] += lines
    return [(i, n) for i, n in out]


def apply(nb: dict) -> bool:
    changed = False
    for cell in nb["cells"]:
        want = slide_type(cell)
        meta = cell.setdefault("metadata", {})
        if meta.get("slideshow", {}).get("slide_type") != want:
            meta["slideshow"] = {"slide_type": want}
            changed = True
    return changed


def problems(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    out = []
    for i, cell in enumerate(nb["cells"]):
        got = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
        if got != slide_type(cell):
            out.append(f"{path.name} cell {i}: slide_type {got!r}, the rule says {slide_type(cell)!r}")
    for i, lines in slides(nb["cells"]):
        if lines > MAX_SLIDE_LINES:
            out.append(f"{path.name} cell {i}: a slide of {lines} lines (at most {MAX_SLIDE_LINES}): "
                       "split the markdown cell at a paragraph")
    return out


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def main(argv: list[str]) -> int:
    if "--write" in argv:
        for path in notebooks():
            nb = json.loads(path.read_text())
            if apply(nb):
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
                print(f"updated {path.name}")
    found = [p for path in notebooks() for p in problems(path)]
    print("\n".join(found) or "every cell has its slide type and every slide fits")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
