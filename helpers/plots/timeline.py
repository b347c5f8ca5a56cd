"""Pictures of timelines: one row per worker, one row for the training loop."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..timing.timeline import MAIN_PROCESS, Timeline

COLORS = {
    "fetch": matplotlib.colormaps["tab10"](0),  # blue
    "wait": matplotlib.colormaps["tab10"](3),  # red
    "step": matplotlib.colormaps["tab10"](2),  # green
    "pin": matplotlib.colormaps["tab10"](4),  # purple
    "copy": matplotlib.colormaps["tab10"](9),  # cyan
    "transform": matplotlib.colormaps["tab10"](5),  # brown
    "startup": "0.75",
    "gc": "black",
    "model": matplotlib.colormaps["tab10"](1),  # orange
}
_BAR_HEIGHT = 0.7
_MIN_WIDTH = 0.002   # of the time axis: the narrowest span drawn
_CHAR_FRACTION = 0.0075  # width of one label character as a fraction of the time axis


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
                color: str = "white") -> None:
    for start, width, text in spans:
        if width > (len(text) + 1) * _CHAR_FRACTION * span_s:
            ax.text(start + width / 2, y, text, ha="center", va="center", fontsize=7,
                    color=color, clip_on=True)


def summary_line(tl: Timeline) -> str:
    """The headline numbers of a timeline in one line."""
    s = tl.summary()
    return (
        f"{s['batches']} batches in {s['wall_s']:.2f} s · median step interval "
        f"{s['median_step_interval_s']:.3f} s · loop waiting {s['wait_fraction']:.0%} · "
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

    Rows: the training loop (waiting in red, copying to the device in cyan when
    ``record(device=...)``, stepping in green, iterator start-up in grey, garbage-collection
    pauses of 5 ms or more as black bars across the middle), a row per
    prefetcher span row (``record(wrap=...)``: transforms in brown, copies in cyan),
    the pinning thread when ``pin_memory`` was on (purple), and one row per worker
    (fetches in blue, labelled with the batch's arrival index; worker start-up in
    grey). Dashed lines mark epoch starts. The title carries the loader's settings
    and the summary numbers.
    """
    rows = _rows(tl)
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 1.2 + 0.42 * len(rows)), layout="constrained")
    y_of = {(kind, worker): len(rows) - 1 - i for i, (_, kind, worker) in enumerate(rows)}
    span_s = max(tl.wall_s, 1e-9) if xlim is None else xlim[1] - xlim[0]
    half = _BAR_HEIGHT / 2
    multi_epoch = len(tl.epochs) > 1

    def name(b) -> str:
        return f"{b.epoch}.{b.index}" if multi_epoch else str(b.index)

    loop_y = y_of[("loop", None)]
    startup = [(e.iter_start, e.startup_s) for e in tl.epochs]
    ax.broken_barh(startup, (loop_y - half, _BAR_HEIGHT), color=COLORS["startup"])
    waits = [(b.wait_start, b.wait_s) for b in tl.batches]
    steps = [(b.step_start, b.step_s) for b in tl.batches]
    copies = [(b.ready, b.copy_s) for b in tl.batches if b.copy_end is not None]
    ax.broken_barh(waits, (loop_y - half, _BAR_HEIGHT), color=COLORS["wait"])
    ax.broken_barh(copies, (loop_y - half, _BAR_HEIGHT), color=COLORS["copy"])
    ax.broken_barh(steps, (loop_y - half, _BAR_HEIGHT), color=COLORS["step"])
    # garbage-collection pauses of the main process, over whatever the loop was doing
    pauses = [(p.start, max(p.duration_s, _MIN_WIDTH * span_s)) for p in tl.pauses if p.duration_s >= 0.005]
    ax.broken_barh(pauses, (loop_y - half * 0.5, _BAR_HEIGHT * 0.5), facecolor=COLORS["gc"], edgecolor="none")
    if label_batches:
        _label_bars(ax, [(b.step_start, b.step_s, name(b)) for b in tl.batches], loop_y, span_s)
    span_kinds = set()
    for row in dict.fromkeys(sp.row for sp in tl.spans):
        y = y_of[(row, None)]
        mine = [sp for sp in tl.spans if sp.row == row]
        for kind in dict.fromkeys(sp.kind for sp in mine):
            span_kinds.add(kind)
            bars = [(sp.start, sp.end - sp.start) for sp in mine if sp.kind == kind]
            # A GPU copy can last a thousandth of the run: drawn at its width with a white edge
            # it would vanish, so spans narrower than _MIN_WIDTH of the axis get that width.
            narrow = [(start, max(width, _MIN_WIDTH * span_s)) for start, width in bars
                      if width < 2 * _MIN_WIDTH * span_s]
            wide = [bar for bar in bars if bar[1] >= 2 * _MIN_WIDTH * span_s]
            color = COLORS.get(kind, COLORS["transform"])
            ax.broken_barh(wide, (y - half, _BAR_HEIGHT), facecolor=color, edgecolor="white", linewidth=0.5)
            ax.broken_barh(narrow, (y - half, _BAR_HEIGHT), facecolor=color, edgecolor="none")
        if label_batches:
            _label_bars(ax, [(sp.start, sp.end - sp.start,
                              f"{sp.epoch}.{sp.batch}" if multi_epoch else str(sp.batch))
                             for sp in mine], y, span_s)

    if ("pin", None) in y_of:
        pin_y = y_of[("pin", None)]
        pins = [(b.pin_start, b.pin_end - b.pin_start) for b in tl.batches
                if b.pin_start is not None and b.pin_end is not None]
        ax.broken_barh(pins, (pin_y - half, _BAR_HEIGHT), color=COLORS["pin"])

    for (kind, worker), y in y_of.items():
        if kind != "worker":
            continue
        mine = [b for b in tl.batches if b.worker == worker]
        ups = [(e.iter_start, e.worker_ready[worker] - e.iter_start)
               for e in tl.epochs if worker in e.worker_ready]
        ax.broken_barh(ups, (y - half, _BAR_HEIGHT), facecolor=COLORS["startup"],
                       edgecolor="0.5", hatch="//", linewidth=0.5)
        ax.broken_barh([(b.fetch_start, b.fetch_s) for b in mine], (y - half, _BAR_HEIGHT),
                       facecolor=COLORS["fetch"], edgecolor="white", linewidth=0.5)
        if label_batches:
            _label_bars(ax, [(b.fetch_start, b.fetch_s, name(b)) for b in mine], y, span_s)

    last_label = -math.inf
    for e in tl.epochs[1:]:
        ax.axvline(e.iter_start, color="0.3", linestyle="--", linewidth=0.8)
        if e.iter_start - last_label > 0.06 * span_s:  # labels that would overlap are left out
            ax.text(e.iter_start, len(rows) - 0.45, f" epoch {e.epoch}", fontsize=7, va="bottom")
            last_label = e.iter_start

    ax.set_yticks(range(len(rows)), [label for label, _, _ in reversed(rows)])
    ax.set_ylim(-0.6, len(rows) - 0.2)
    ax.set_xlim(*(xlim if xlim is not None else (0, tl.wall_s * 1.01)))
    ax.set_xlabel("time since the recording started (s)")
    ax.grid(axis="x", alpha=0.3)
    heading = title if title is not None else tl.describe()
    ax.set_title(f"{heading}\n{summary_line(tl)}", fontsize=9, loc="left")
    if legend:
        handles = [Patch(color=COLORS["fetch"], label="fetch (dataset + collate)"),
                   Patch(color=COLORS["wait"], label="loop waits for data"),
                   Patch(color=COLORS["step"], label="loop steps"),
                   Patch(facecolor=COLORS["startup"], edgecolor="0.5", hatch="//",
                         label="start-up")]
        if pauses:
            handles.append(Patch(color=COLORS["gc"], label="garbage collection (main process)"))
        if ("pin", None) in y_of:
            handles.append(Patch(color=COLORS["pin"], label="pin_memory"))
        if any(b.copy_end is not None for b in tl.batches) or "copy" in span_kinds:
            handles.append(Patch(color=COLORS["copy"], label="copy to device"))
        if "transform" in span_kinds:
            handles.append(Patch(color=COLORS["transform"], label="per-batch transform"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7,
                  frameon=False)
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
    heights = [0.9 + 0.42 * len(_rows(tl)) for tl in timelines]
    fig, axes = plt.subplots(len(timelines), 1, figsize=(12, sum(heights)), sharex=True,
                             height_ratios=heights, layout="constrained", squeeze=False)
    end = max(tl.wall_s for tl in timelines) * 1.01
    previous_kinds = None
    for i, (tl, ax) in enumerate(zip(timelines, axes[:, 0], strict=True)):
        # a legend on the first panel, and on any panel that adds a kind of row
        kinds = ({kind for _, kind, _ in _rows(tl)} | {s.kind for s in tl.spans}
                 | {"copy" for b in tl.batches if b.copy_end is not None}
                 | {"gc" for p in tl.pauses if p.duration_s >= 0.005})
        plot_timeline(tl, ax, title=None if titles is None else titles[i],
                      label_batches=label_batches, xlim=(0, end),
                      legend=previous_kinds is None or not kinds <= previous_kinds)
        previous_kinds = kinds if previous_kinds is None else previous_kinds | kinds
        if i < len(timelines) - 1:
            ax.set_xlabel("")
    return fig
