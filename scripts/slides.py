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
- a slide may hold more than ``MAX_SLIDE_LINES`` lines only when it is one code block alone: a
  whole pattern to copy (07's prefetcher), which scrolls in the deck.

The overview deck (``notebooks/overview.ipynb``: markdown only, for a first lecture or a talk)
follows the same rule. Its figures are the reference figures of ``images/``, carried as cell
attachments (JupyterLab serves ``notebooks/`` only, so a link to ``../images`` would not load):
each ``<img src="attachment:NAME.png" ...>`` carries the bytes of ``images/NAME.png`` and a width
at which the figure is at most ``FIGURE_MAX_HEIGHT`` pixels tall, so that a slide with its
heading and a short caption fits a 1280×720 window.

``--write`` applies the rule to every notebook and refreshes the overview's figures from
``images/``; ``--check`` exits 1 when a notebook's metadata differs from the rule, a slide is
too long to fit, or an overview figure differs from ``images/`` (a test runs it).
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: At most this many lines on one slide (its cells' source, long lines counted as wrapped at
#: WRAP characters): about what a 1280×720 window shows at JupyterLab's default font size.
MAX_SLIDE_LINES = 30
WRAP = 100
#: The slides-only deck: markdown cells, figures from images/ as attachments.
OVERVIEW = "overview.ipynb"
FIGURE = re.compile(r'<img src="attachment:([\w.-]+\.png)" alt="([^"]*)" width="(\d+)">')
#: An overview figure's height and width on a slide, at most (pixels at 100 % zoom).
FIGURE_MAX_HEIGHT = 420
FIGURE_MAX_WIDTH = 1000


def slide_type(cell: dict) -> str:
    source = "".join(cell["source"])
    if cell["cell_type"] == "markdown":
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


def is_pattern_to_copy(cells: list[dict], i: int) -> bool:
    """Whether the slide starting at cell ``i`` is one code block alone (a whole pattern, such as
    07's prefetcher, shown to be copied): it may run past a window's height and scroll, since cut
    in two it could not be copied."""
    source = "".join(cells[i]["source"]).strip()
    after = cells[i + 1] if i + 1 < len(cells) else {}
    following = after.get("metadata", {}).get("slideshow", {}).get("slide_type")
    return (cells[i]["cell_type"] == "markdown" and following in (None, "slide", "subslide", "skip", "notes")
            and re.fullmatch(r"```python\n(?:(?!```).)*\n```", source, re.S) is not None)


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
        if lines > MAX_SLIDE_LINES and not is_pattern_to_copy(nb["cells"], i):
            out.append(f"{path.name} cell {i}: a slide of {lines} lines (at most {MAX_SLIDE_LINES}): "
                       "split the markdown cell at a paragraph")
    return out


def figure_width(png: Path) -> int:
    """The width (pixels) at which a PNG is at most FIGURE_MAX_HEIGHT tall and FIGURE_MAX_WIDTH wide."""
    width, height = struct.unpack(">II", png.read_bytes()[16:24])
    return min(FIGURE_MAX_WIDTH, width, math.floor(width * FIGURE_MAX_HEIGHT / height))


def _figures_wanted(cell: dict, images: Path) -> tuple[str, dict]:
    """A markdown cell's source with each figure's width set, and the attachments it needs."""
    attachments = {}

    def sized(match: re.Match) -> str:
        name, alt, _ = match.groups()
        png = images / name
        if not png.is_file():
            return match.group(0)  # reported by figure_problems
        attachments[name] = {"image/png": base64.b64encode(png.read_bytes()).decode("ascii")}
        return f'<img src="attachment:{name}" alt="{alt}" width="{figure_width(png)}">'

    return FIGURE.sub(sized, "".join(cell["source"])), attachments


def apply_figures(nb: dict, images: Path) -> bool:
    """Set the overview's figures from ``images``: attachments and widths."""
    changed = False
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source, attachments = _figures_wanted(cell, images)
        if source != "".join(cell["source"]) or attachments != cell.get("attachments", {}):
            cell["source"] = source.splitlines(keepends=True)
            if attachments:
                cell["attachments"] = attachments
            else:
                cell.pop("attachments", None)
            changed = True
    return changed


def figure_problems(path: Path, images: Path) -> list[str]:
    """The overview's figures that are missing from ``images`` or differ from it."""
    out = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            out.append(f"{path.name} cell {i}: a code cell — the overview runs nothing")
            continue
        for name, _, _ in FIGURE.findall("".join(cell["source"])):
            if not (images / name).is_file():
                out.append(f"{path.name} cell {i}: images/{name} does not exist")
        source, attachments = _figures_wanted(cell, images)
        if source != "".join(cell["source"]) or attachments != cell.get("attachments", {}):
            out.append(f"{path.name} cell {i}: its figures differ from images/ (attachments or widths): "
                       "run `make slides`")
    return out


def notebooks(root: Path = ROOT) -> list[Path]:
    """Every notebook presented as slides: the lessons in order, then the overview deck."""
    overview = root / "notebooks" / OVERVIEW
    lessons = sorted((root / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    return lessons + ([overview] if overview.exists() else [])


def main(argv: list[str]) -> int:
    images = ROOT / "images"
    if "--write" in argv:
        for path in notebooks():
            nb = json.loads(path.read_text())
            figures = path.name == OVERVIEW and apply_figures(nb, images)
            if apply(nb) or figures:
                path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
                print(f"updated {path.name}")
    found = [p for path in notebooks() for p in problems(path)]
    found += [p for path in notebooks() if path.name == OVERVIEW for p in figure_problems(path, images)]
    print("\n".join(found) or "every cell has its slide type and every slide fits")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
