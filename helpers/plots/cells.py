"""Notebook 20: what happens to a loader whose parts a notebook cell defines, per start method."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .. import palette
from .style import fit_text

#: Each outcome's colour: the roles of "once", "repeated" and "missing" (tested apart for colour-blind
#: readers), and grey for a cell stopped by its timeout.
OUTCOMES = {
    "works": palette.ROLES["once"],
    "fails in the kernel": palette.ROLES["repeated"],
    "workers die": palette.ROLES["missing"],
    "hangs": palette.GREYS["mid"],
}


def plot_cell_outcomes(rows: Sequence[str], methods: Sequence[str],
                       cells: Mapping[tuple[str, str], tuple[str, str]]) -> Figure:
    """A grid: what a cell defines (rows) × start method (columns); each box coloured by its outcome
    (:data:`OUTCOMES`) and labelled with what the cell ended with and when. ``cells[row, method]`` is
    ``(outcome, label)``."""
    width = 3.2 + 3.6 * len(methods)
    figure, ax = plt.subplots(figsize=(width, 1.1 + 1.25 * len(rows)))
    for r, row in enumerate(rows):
        for c, method in enumerate(methods):
            outcome, label = cells[row, method]
            colour = OUTCOMES[outcome]
            ax.add_patch(plt.Rectangle((c + 0.03, r + 0.05), 0.94, 0.9, facecolor=colour,
                                       edgecolor=palette.PAPER))
            lines = [line for part in label.split(" · ") for line in textwrap.wrap(part, 36)]
            ax.text(c + 0.5, r + 0.5, "\n".join(lines), ha="center", va="center",
                    fontsize=12, color=palette.ink_on(colour))
    ax.set_xlim(0, len(methods))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([c + 0.5 for c in range(len(methods))], [f"start method: {m}" for m in methods])
    ax.xaxis.tick_top()
    ax.set_yticks([r + 0.5 for r in range(len(rows))], ["\n".join(textwrap.wrap(row, 18)) for row in rows])
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.legend(handles=[Patch(facecolor=colour, label=name) for name, colour in OUTCOMES.items()
                       if any(cells[key][0] == name for key in cells)],
              loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=4, frameon=False)
    ax.set_title("A loader whose parts a notebook cell defines, num_workers=2: what the first batch meets",
                 loc="left", pad=28)
    figure.tight_layout()
    return fit_text(figure)
