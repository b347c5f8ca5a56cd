"""Pictures of timelines: one row per worker, one row for the training loop."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import palette
from ..timing.timeline import MAIN_PROCESS, Timeline
from .style import COLORS, TEXT_PT, fill, fit_text, legend_beside, patch, slide_height, text_width_in, wrap

_BAR_HEIGHT = 0.7
_MIN_WIDTH = 0.002   # of the time axis: the narrowest span drawn
_CHAR_IN = 0.6 * TEXT_PT / 72  # the width of one label character, in inches
_MARGINS_IN = 3.4  # a timeline figure's width outside its time axis: row labels and legend
_LEGEND_IN = 2.7  # the legend's column: its longest label, "fetch (dataset + collate)", and a patch


def _rows(tl: Timeline) -> list[tuple[str, str, int | None]]:
    """(label, kind, worker) per row, top to bottom."""
    rows: list[tuple[str, str, int | None]] = [("loop", "loop", None)]
    for row in dict.fromkeys(s.row for s in tl.spans):
        rows.append((row, row, None))
    if any(b.pin_start is not None for b in tl.batches):
        rows.append(("pin thread", "pin", None))
    workers = tl.workers or list(range(tl.config.get("num_workers") or 0)) or [MAIN_PROCESS]
    for w in workers:
        rows.append(("main fetch" if w == MAIN_PROCESS else f"worker {w}", "worker", w))
    return rows


def _label_bars(ax: Axes, spans: list[tuple[float, float, str]], y: float, span_s: float,
                role: str) -> None:
    """Write each bar's batch index inside it, where it fits (in the ink that reads on ``role``)."""
    char_fraction = _CHAR_IN / max(ax.figure.get_figwidth() - _MARGINS_IN, 1.0)
    for start, width, text in spans:
        if width > (len(text) + 1) * char_fraction * span_s:
            ax.text(start + width / 2, y, text, ha="center", va="center", fontsize=TEXT_PT,
                    color=palette.ink_on(COLORS[role]), clip_on=True)


def _separated_bars(ax: Axes, bars: list[tuple[float, float]], y: float, colour: str, span_s: float) -> None:
    """Bars with a thin paper-coloured edge between neighbours; a bar narrower than twice
    _MIN_WIDTH of the axis has no edge (it would eat the bar: a GPU copy can last a thousandth of
    the run, a worker's fetch a thousandth of a long recording) and at least that width."""
    least = _MIN_WIDTH * span_s
    narrow = [(start, max(width, least)) for start, width in bars if width < 2 * least]
    wide = [bar for bar in bars if bar[1] >= 2 * least]
    half = _BAR_HEIGHT / 2
    ax.broken_barh(wide, (y - half, _BAR_HEIGHT), facecolor=colour, edgecolor=palette.PAPER, linewidth=0.5)
    ax.broken_barh(narrow, (y - half, _BAR_HEIGHT), facecolor=colour, edgecolor="none")


#: The legend's entries, in order: kind -> label.
_LEGEND = {"fetch": "fetch (dataset + collate)", "wait": "loop waits for data", "step": "loop steps",
           "startup": "start-up", "gc": "garbage collection", "pin": "pin_memory", "copy": "copy to device",
           "transform": "per-batch transform"}


def _kinds(tl: Timeline) -> set[str]:
    """What a legend of this timeline names: the loop's and workers' kinds, and those it drew."""
    kinds = {"fetch", "wait", "step", "startup"}
    kinds |= {"gc" for p in tl.pauses if p.duration_s >= 0.005}
    kinds |= {"pin" for b in tl.batches if b.pin_start is not None}
    kinds |= {"copy" for b in tl.batches if b.copy_end is not None}
    kinds |= {s.kind if s.kind in COLORS else "transform" for s in tl.spans}  # as plot_timeline draws them
    return kinds


def _handles(kinds: set[str]) -> list:
    return [patch(kind, label) for kind, label in _LEGEND.items() if kind in kinds]


def summary_line(tl: Timeline) -> str:
    """The headline numbers of a timeline in one line. The mean interval, not the median: with 2
    workers the intervals alternate short and long, and a median picks one of the two."""
    s = tl.summary()
    return (
        f"{s['batches']} batches in {s['wall_s']:.2f} s · mean step interval "
        f"{s['mean_step_interval_s']:.3f} s · loop waiting {s['wait_fraction']:.0%} · "
        f"first batch {s['first_batch_s']:.2f} s"
    )


def plot_timeline(
    tl: Timeline,
    ax: Axes | None = None,
    *,
    title: str | None = None,
    label_batches: bool = True,
    xlim: tuple[float, float] | None = None,
    legend: bool = True,
) -> Axes:
    """Draw a Gantt chart of one recording.

    Rows: the training loop (waiting hatched in vermillion — the notebooks' "red" — copying to
    the device in sky blue ("cyan") when ``record(device=...)``, stepping in bluish green
    ("green"), iterator start-up in grey, garbage-collection pauses of 5 ms or more as black
    bars across the middle), a row per prefetcher span row (``record(wrap=...)``: transforms in
    orange, copies in sky blue), the pinning thread when ``pin_memory`` was on (reddish
    purple), and one row per worker (fetches in blue, labelled with the batch's arrival index;
    worker start-up hatched grey). Dashed lines mark epoch starts. The title carries the
    loader's settings and the summary numbers, wrapped to the figure's width. Colours and text
    sizes are :mod:`helpers.palette`'s.
    """
    rows = _rows(tl)
    if ax is None:
        _, ax = plt.subplots(figsize=(12.8, slide_height(1.4 + 0.42 * len(rows))), layout="constrained")
    y_of = {(kind, worker): len(rows) - 1 - i for i, (_, kind, worker) in enumerate(rows)}
    span_s = max(tl.wall_s, 1e-9) if xlim is None else xlim[1] - xlim[0]
    half = _BAR_HEIGHT / 2
    multi_epoch = len(tl.epochs) > 1

    def name(b) -> str:
        return f"{b.epoch}.{b.index}" if multi_epoch else str(b.index)

    loop_y = y_of[("loop", None)]
    startup = [(e.iter_start, e.startup_s) for e in tl.epochs]
    ax.broken_barh(startup, (loop_y - half, _BAR_HEIGHT), facecolor=COLORS["startup"], edgecolor="none")
    waits = [(b.wait_start, b.wait_s) for b in tl.batches]
    steps = [(b.step_start, b.step_s) for b in tl.batches]
    copies = [(b.ready, b.copy_s) for b in tl.batches if b.copy_end is not None]
    ax.broken_barh(waits, (loop_y - half, _BAR_HEIGHT), **fill("wait"))
    ax.broken_barh(copies, (loop_y - half, _BAR_HEIGHT), **fill("copy"))
    ax.broken_barh(steps, (loop_y - half, _BAR_HEIGHT), **fill("step"))
    # garbage-collection pauses of the main process, over whatever the loop was doing
    pauses = [(p.start, max(p.duration_s, _MIN_WIDTH * span_s)) for p in tl.pauses if p.duration_s >= 0.005]
    ax.broken_barh(pauses, (loop_y - half * 0.5, _BAR_HEIGHT * 0.5), facecolor=COLORS["gc"], edgecolor="none")
    if label_batches:
        _label_bars(ax, [(b.step_start, b.step_s, name(b)) for b in tl.batches], loop_y, span_s, "step")
    for row in dict.fromkeys(sp.row for sp in tl.spans):
        y = y_of[(row, None)]
        mine = [sp for sp in tl.spans if sp.row == row]
        for kind in dict.fromkeys(sp.kind for sp in mine):
            role = kind if kind in COLORS else "transform"
            _separated_bars(ax, [(sp.start, sp.end - sp.start) for sp in mine if sp.kind == kind], y,
                            COLORS[role], span_s)
        if label_batches:
            _label_bars(ax, [(sp.start, sp.end - sp.start,
                              f"{sp.epoch}.{sp.batch}" if multi_epoch else str(sp.batch))
                             for sp in mine], y, span_s, role)

    if ("pin", None) in y_of:
        pin_y = y_of[("pin", None)]
        pins = [(b.pin_start, b.pin_end - b.pin_start) for b in tl.batches
                if b.pin_start is not None and b.pin_end is not None]
        ax.broken_barh(pins, (pin_y - half, _BAR_HEIGHT), **fill("pin"))

    for (kind, worker), y in y_of.items():
        if kind != "worker":
            continue
        mine = [b for b in tl.batches if b.worker == worker]
        ups = [(e.iter_start, e.worker_ready[worker] - e.iter_start)
               for e in tl.epochs if worker in e.worker_ready]
        ax.broken_barh(ups, (y - half, _BAR_HEIGHT), **fill("startup"))
        _separated_bars(ax, [(b.fetch_start, b.fetch_s) for b in mine], y, COLORS["fetch"], span_s)
        if label_batches:
            _label_bars(ax, [(b.fetch_start, b.fetch_s, name(b)) for b in mine], y, span_s, "fetch")

    last_label, marks = -math.inf, {}
    for e in tl.epochs[1:]:
        ax.axvline(e.iter_start, color=COLORS["rule"], linestyle="--", linewidth=0.8)
        if e.iter_start - last_label > 0.09 * span_s:  # labels that would overlap are left out
            marks[e.iter_start] = f"epoch {e.epoch}"
            last_label = e.iter_start
    if marks:  # on a top axis of their own: the layout keeps them off the bars and the title
        top = ax.secondary_xaxis("top")
        top.set_xticks(list(marks), list(marks.values()))
        top.tick_params(length=0, pad=2, labelsize=TEXT_PT)

    ax.set_yticks(range(len(rows)), [label for label, _, _ in reversed(rows)])
    ax.set_ylim(-0.6, len(rows) - 0.2)
    ax.set_xlim(*(xlim if xlim is not None else (0, tl.wall_s * 1.01)))
    ax.set_xlabel("time since the recording started (s)")
    ax.grid(axis="x", alpha=0.3)
    heading = title if title is not None else tl.describe()
    # wrapped to the time axis's width: row labels on the left, a legend column on the right
    labels_in = 0.4 + max(text_width_in(label) for label, _, _ in rows)
    ax.set_title(wrap(f"{heading}\n{summary_line(tl)}", ax.figure, margin_in=labels_in + _LEGEND_IN),
                 fontsize=TEXT_PT, loc="left")
    if legend:
        legend_beside(ax, _handles(_kinds(tl)))
    fit_text(ax.figure)
    return ax


def plot_timelines(
    timelines: Sequence[Timeline],
    titles: Sequence[str] | None = None,
    *,
    label_batches: bool = True,
) -> Figure:
    """Stack several recordings on one shared time axis, to compare configurations."""
    if not timelines:
        raise ValueError("plot_timelines needs at least one Timeline")
    if titles is not None and len(titles) != len(timelines):
        raise ValueError(f"got {len(titles)} titles for {len(timelines)} timelines")
    rows = [len(_rows(tl)) for tl in timelines]
    # at most a 16:9 slide tall: many rows get thinner, each panel's rows as tall as the others'
    height = slide_height(0.5 + sum(0.9 + 0.42 * n for n in rows))
    fig, axes = plt.subplots(len(timelines), 1, figsize=(12.8, height), sharex=True,
                             height_ratios=[n + 0.4 for n in rows], layout="constrained", squeeze=False)
    end = max(tl.wall_s for tl in timelines) * 1.01
    for i, (tl, ax) in enumerate(zip(timelines, axes[:, 0], strict=True)):
        plot_timeline(tl, ax, title=None if titles is None else titles[i],
                      label_batches=label_batches, xlim=(0, end), legend=False)
        if i < len(timelines) - 1:
            ax.set_xlabel("")
    timeline_legend(fig, timelines)
    return fit_text(fig)


def timeline_legend(figure: Figure, timelines: Sequence[Timeline]):
    """One legend for every timeline panel of ``figure``, in a column of its own to the right (a
    legend beside one short panel would stretch it); it names what any of ``timelines`` drew."""
    kinds = set().union(*(_kinds(tl) for tl in timelines))
    return figure.legend(handles=_handles(kinds), loc="outside right upper", frameon=False, fontsize=TEXT_PT)
