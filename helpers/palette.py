"""The lab's one palette: every colour a figure or a widget draws, and the sizes that make a
figure readable when it is projected.

Colours are Okabe and Ito's eight ("Color Universal Design", 2008), chosen so that readers with
any common colour-vision deficiency can tell them apart, plus three greys. Each role a figure
draws has one colour (:data:`ROLES`); roles drawn side by side (:data:`SIDE_BY_SIDE`) are tested
to stay apart under simulated deuteranopia and protanopia (``tests/test_figures.py``). Waiting and
working also differ in a second cue that needs no colour at all: the loop's waits are hatched
(:data:`HATCHES`), its steps solid.

Text: at least :data:`TEXT_PT` points on a slide 1280 px wide (a 13.33-inch 16:9 slide at 96 px
per inch), so a figure ``w`` inches wide sets its text at :func:`min_text_pt` ``(w)`` or more; a
reference figure is at most 16:9 tall (:data:`SLIDE_ASPECT`).

Stdlib only and no side effects: the plots, the explorers and the classroom's HTML import it.
"""

from __future__ import annotations

#: Okabe & Ito's colour-blind-safe set, by its published names.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
}
#: Greys for what is neither data nor alarm: start-up, reference lines, rules, borders.
GREYS = {"light": "#DDDDDD", "mid": "#BBBBBB", "dark": "#4D4D4D"}
#: The page and the ink: bar separators, hatch lines, text on a coloured bar.
PAPER, INK = "#FFFFFF", "#000000"

#: What each colour means, in every figure.
ROLES = {
    "fetch": OKABE_ITO["blue"],             # a worker (or the main process) fetching a batch
    "wait": OKABE_ITO["vermillion"],        # the loop waiting for data ("red" in the notebooks' prose)
    "step": OKABE_ITO["bluish green"],      # the loop stepping ("green")
    "pin": OKABE_ITO["reddish purple"],     # the pin thread ("purple")
    "copy": OKABE_ITO["sky blue"],          # a copy to the device ("cyan")
    "transform": OKABE_ITO["orange"],       # a per-batch transform in the main process
    "sync": OKABE_ITO["orange"],            # a rank waiting in all_reduce for the others
    "model": OKABE_ITO["orange"],           # a model's prediction, a published reference
    "startup": GREYS["mid"],                # processes starting (hatched)
    "gc": OKABE_ITO["black"],               # a garbage-collection pause
    "rule": GREYS["dark"],                  # reference lines: epochs, 1×, free cores
    "neutral": GREYS["mid"],                # a part with no alarm in it (a request's round trip)
    "once": OKABE_ITO["bluish green"],      # a sample trained on exactly once
    "repeated": OKABE_ITO["orange"],        # ... twice or more
    "missing": OKABE_ITO["black"],          # ... never
}
#: The second cue, for roles a reader must tell apart without colour: hatch patterns (drawn in
#: :data:`HATCH_COLOURS`); a role not named here is solid.
HATCHES = {"wait": "///", "sync": "\\\\\\", "startup": "//"}
HATCH_COLOURS = {"wait": PAPER, "sync": PAPER, "startup": GREYS["dark"]}

#: Roles drawn next to each other in one figure: each pair must stay apart for colour-blind
#: readers (the test simulates deuteranopia and protanopia).
SIDE_BY_SIDE = [
    ("wait", "step"), ("wait", "fetch"), ("step", "fetch"), ("wait", "sync"), ("step", "sync"),
    ("wait", "copy"), ("step", "copy"), ("pin", "copy"), ("pin", "fetch"), ("transform", "fetch"),
    ("transform", "step"), ("startup", "wait"), ("startup", "fetch"), ("model", "fetch"),
    ("once", "repeated"), ("once", "missing"), ("repeated", "missing"),
]

#: Colours for categories without a role (sources, workers, configurations), in order: all
#: Okabe–Ito but yellow, which is too light for lines and small marks on white.
CATEGORICAL = [OKABE_ITO[name] for name in ("blue", "orange", "bluish green", "vermillion",
                                            "reddish purple", "sky blue", "black")]
#: Ordered series (0, 1, 2, … workers): a colormap whose lightness rises monotonically, so the
#: order reads without hue.
SEQUENTIAL = "viridis"
#: How far along :data:`SEQUENTIAL` the last of a series goes (its top is too light on white).
SEQUENTIAL_END = 0.9

#: Text colours in widgets and HTML tables: the palette's hues darkened until they reach 4.5:1
#: contrast on white (WCAG AA), beside a symbol that says the same (✓, ✗).
TEXT = {
    "ok": "#00785A",        # bluish green, darker
    "fail": "#B34E00",      # vermillion, darker
    "premise": GREYS["dark"],
    "border": GREYS["light"],
}

#: The smallest text on a slide 1280 px wide, in points (at 96 px per inch).
TEXT_PT = 12
SLIDE_WIDTH_PX = 1280
SLIDE_PX_PER_INCH = 96
#: A reference figure is at least this wide for its height (a 16:9 slide).
SLIDE_ASPECT = 16 / 9
#: Reference figures: 12.8 in at 100 dpi, 1280 px wide; at most 7.2 in (720 px) tall.
SLIDE_FIGURE_IN = (12.8, 7.2)
SLIDE_DPI = 100


def min_text_pt(figure_width_in: float) -> float:
    """The smallest font size (pt) in a figure ``figure_width_in`` inches wide whose text still
    reads as :data:`TEXT_PT` when the figure fills a slide :data:`SLIDE_WIDTH_PX` wide."""
    slide_in = SLIDE_WIDTH_PX / SLIDE_PX_PER_INCH
    return TEXT_PT * figure_width_in / slide_in


def _luminance(colour: str) -> float:
    """WCAG relative luminance of ``#RRGGBB``."""
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two ``#RRGGBB`` colours (1 to 21; text wants 4.5 or more)."""
    light, dark = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def ink_on(colour: str) -> str:
    """:data:`INK` or :data:`PAPER`, whichever reads better as text on ``colour``."""
    return INK if contrast(INK, colour) >= contrast(PAPER, colour) else PAPER


def series(count: int) -> list[float]:
    """Positions along :data:`SEQUENTIAL` for ``count`` ordered items (0 … :data:`SEQUENTIAL_END`)."""
    return [i / max(count - 1, 1) * SEQUENTIAL_END for i in range(count)]


def fingerprint() -> str:
    """Every colour, hatch and size above, as one stable string: a figure made with another
    palette is out of date (``scripts/make_figures.py --check``)."""
    parts = [OKABE_ITO, GREYS, PAPER, INK, ROLES, HATCHES, HATCH_COLOURS, CATEGORICAL, SEQUENTIAL,
             SEQUENTIAL_END, TEXT_PT, SLIDE_WIDTH_PX, SLIDE_PX_PER_INCH, SLIDE_FIGURE_IN, SLIDE_DPI]
    return repr([sorted(p.items()) if isinstance(p, dict) else p for p in parts])
