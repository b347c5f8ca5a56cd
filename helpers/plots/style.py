"""What every figure shares: the palette's roles as matplotlib draws them (:mod:`helpers.palette`),
text a projected slide can read, titles wrapped before they are cut, legends beside the data."""

from __future__ import annotations

from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.textpath import TextToPath

from .. import palette

#: role -> colour (``helpers.palette.ROLES``), the name the plots have always exported.
COLORS = dict(palette.ROLES)
TEXT_PT = palette.TEXT_PT
GREYS = palette.GREYS
_TEXT_PATH = TextToPath()


def fill(role: str) -> dict[str, Any]:
    """Keyword arguments that draw a bar (``bar``, ``barh``, ``broken_barh``) in ``role``'s
    colour and, for the roles that have one, its hatching (the cue that needs no colour)."""
    if role in palette.HATCHES:
        return {"facecolor": COLORS[role], "hatch": palette.HATCHES[role],
                "edgecolor": palette.HATCH_COLOURS[role], "linewidth": 0}
    return {"facecolor": COLORS[role], "edgecolor": "none"}


def patch(role: str, label: str) -> Patch:
    """A legend entry drawn as ``role``'s bars are."""
    return Patch(label=label, **fill(role))


def sequential(i: int, count: int):
    """The ``i``-th of ``count`` ordered items (worker counts, stages) on the sequential colormap."""
    return matplotlib.colormaps[palette.SEQUENTIAL](palette.series(count)[i])


def categorical(i: int) -> str:
    """The ``i``-th colour for categories without a role (sources, workers, configurations)."""
    return palette.CATEGORICAL[i % len(palette.CATEGORICAL)]


def text_pt(figure: Figure) -> float:
    """The smallest font size (pt) this figure may use: :data:`TEXT_PT`, more for a figure wider
    than the 13.33-inch slide it is measured against."""
    return max(float(TEXT_PT), palette.min_text_pt(figure.get_figwidth()))


def text_width_in(text: str, pt: float = TEXT_PT) -> float:
    """How wide ``text`` (one line) is drawn at ``pt`` points, in inches."""
    width, _, _ = _TEXT_PATH.get_text_width_height_descent(text, FontProperties(size=pt), ismath=False)
    return width / 72


def wrap(text: str, figure: Figure, *, margin_in: float = 1.4, pt: float | None = None) -> str:
    """``text`` with each line wrapped (at spaces) to the figure's width less ``margin_in`` (row
    labels, a legend's column), measured as drawn: a long title (a diagnosis's recommendations)
    takes two lines instead of being cut or running under a legend."""
    size = pt or text_pt(figure)
    room = figure.get_figwidth() - margin_in
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if line and text_width_in(candidate, size) > room:
                lines.append(line)
                line = word
            else:
                line = candidate
        lines.append(line)
    return "\n".join(lines)


def legend_beside(ax: Axes, handles: list | None = None, **kwargs: Any):
    """The legend to the right of the axes, outside the data (``layout="constrained"`` makes
    room for it)."""
    options = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0,
               "frameon": False, "fontsize": TEXT_PT}
    options.update(kwargs)
    if handles is not None:
        options["handles"] = handles
    return ax.legend(**options)


def fit_text(figure: Figure) -> Figure:
    """Raise every text in ``figure`` (ticks, labels, titles, legends, notes) to at least
    :func:`text_pt`; the figure is returned."""
    floor = text_pt(figure)
    for ax in figure.axes:
        ax.tick_params(which="both", labelsize=floor)
    for text in figure.findobj(Text):
        if text.get_fontsize() < floor:
            text.set_fontsize(floor)
    return figure


def slide_height(natural_in: float, limit_in: float = palette.SLIDE_FIGURE_IN[1]) -> float:
    """A figure's height: what its rows ask for, at most a 16:9 slide's (7.2 in at 12.8 wide)."""
    return min(natural_in, limit_in)
