"""Pictures of timelines: one row per worker, one row for the training loop."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .theory import PlannedBatch, simulated_intervals
from .timeline import MAIN_PROCESS, Timeline

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


def plot_intervals(
    timelines: Sequence[Timeline],
    labels: Sequence[str],
    *,
    predictions: Sequence[Sequence[PlannedBatch]] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Time between consecutive loop iterations, batch by batch (the blog's figure).

    ``predictions``: a :func:`helpers.simulate` schedule per timeline, drawn dashed.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    cmap = matplotlib.colormaps["viridis"]
    for i, (tl, label) in enumerate(zip(timelines, labels, strict=True)):
        color = cmap(i / max(len(timelines) - 1, 1) * 0.9)
        measured = tl.intervals()
        ax.plot(range(len(measured)), measured, marker="o", markersize=3, color=color,
                label=f"{label} (measured)")
        if predictions is not None:
            predicted = simulated_intervals(list(predictions[i]))
            ax.plot(range(len(predicted)), predicted, linestyle="--", color=color,
                    alpha=0.7, label=f"{label} (model)")
    ax.set_xlabel("batch (arrival order)")
    ax.set_ylabel("time since previous iteration (s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncols=2)
    return ax


def plot_step_time_model(
    worker_counts: Sequence[int],
    measured_s: Sequence[float],
    predicted_s: Sequence[float],
    *,
    step_s: float | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Measured mean step interval against the model's prediction, per worker count."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    ax.plot(worker_counts, predicted_s, linestyle="--", marker="s", color=COLORS["model"],
            label="model: max(n/x, y + m), or n + m + y at 0 workers")
    ax.plot(worker_counts, measured_s, marker="o", color=COLORS["fetch"], label="measured")
    if step_s is not None:
        ax.axhline(step_s, color=COLORS["step"], linewidth=0.8, label="step time y (the floor)")
    ax.set_xlabel("num_workers")
    ax.set_ylabel("mean time per batch (s)")
    ax.set_xticks(list(worker_counts))
    ax.set_ylim(bottom=0, top=max(max(measured_s), max(predicted_s)) * 1.15 or math.inf)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_bandwidth(timings: Sequence, ax: Axes | None = None) -> Axes:
    """Host-to-device bandwidth per copy size (:func:`helpers.copy_bandwidth`): pageable,
    pinned, and pinning inside the copy."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    sizes = [t.nbytes / 2**20 for t in timings]
    ax.plot(sizes, [t.pageable_gbps for t in timings], marker="o", label="pageable: t.to(dev)")
    ax.plot(sizes, [t.pinned_gbps for t in timings], marker="s", color=COLORS["pin"],
            label="pinned: t.to(dev)")
    ax.plot(sizes, [t.pin_then_copy_gbps for t in timings], marker="^", linestyle="--",
            label="t.pin_memory().to(dev, non_blocking=True) (into a cached pinned block)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("copy size (MiB)")
    ax.set_ylabel("host → device (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_ratios(ratios: dict[str, float], *, xlabel: str = "speedup (×)",
                reference: dict[str, float] | None = None, ax: Axes | None = None) -> Axes:
    """Horizontal bars of measured ratios (e.g. speedups), one per label, with an optional
    reference value per label (e.g. a model's prediction or a published figure) as a tick."""
    labels = list(ratios)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * len(labels)), layout="constrained")
    y = range(len(labels))
    ax.barh(y, [ratios[k] for k in labels], color=COLORS["fetch"], label="measured")
    for i, k in enumerate(labels):
        ax.text(ratios[k], i, f" {ratios[k]:.2f}×", va="center", fontsize=8)
    if reference:
        marks = [(i, reference[k]) for i, k in enumerate(labels) if k in reference]
        ax.scatter([v for _, v in marks], [i for i, _ in marks], marker="|", s=400,
                   color=COLORS["model"], label="reference", zorder=3)
    ax.axvline(1.0, color="0.3", linewidth=0.8)
    largest = max([*ratios.values(), *((reference or {}).get(k, 1.0) for k in labels)])
    ax.set_xlim(0, largest * 1.15)      # room for the value written after the longest bar
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return ax


def show_reference_figure(filename: str, what: str) -> bool:
    """In a cell that skipped its GPU work: show ``images/<filename>``, measured on a GPU by
    ``scripts/make_gpu_figures.py``, captioned with ``what`` it shows — or say plainly that
    no GPU has measured it yet. Returns whether a figure was shown."""
    from IPython.display import Image, Markdown, display

    from .config import repo_root

    path = repo_root() / "images" / filename
    if not path.exists():
        display(Markdown(f"No reference figure for this yet ({what}): no GPU has been available to this "
                         "project's measurements, so there is no measured picture to show instead of a "
                         "guessed one."))
        return False
    display(Markdown(f"Reference figure, measured on a GPU by `scripts/make_gpu_figures.py` "
                     f"(`images/{filename}`; the GPU and torch version are in its title): {what}."))
    display(Image(filename=str(path)))
    return True


def plot_speedup_curves(ratios: Sequence[float], curves: dict[str, Sequence[float]], *,
                        measured: dict[str, float] | None = None, at_ratio: float | None = None,
                        xlabel: str = "step ÷ load per batch", ax: Axes | None = None) -> Axes:
    """Modelled speedup (vs the first curve's stage) over a range of ratios, one line per stage;
    ``measured`` speedups drawn as points at ``at_ratio`` (this run)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    cmap = matplotlib.colormaps["viridis"]
    for i, (name, values) in enumerate(curves.items()):
        color = cmap(i / max(len(curves) - 1, 1) * 0.9)
        ax.plot(ratios, values, color=color, label=f"{name} (model)")
        if measured is not None and at_ratio is not None and name in measured:
            ax.plot([at_ratio], [measured[name]], marker="o", color=color, linestyle="none")
    if at_ratio is not None:
        ax.axvline(at_ratio, color="0.3", linestyle="--", linewidth=0.8)
        ax.text(at_ratio, 0.02 * ax.get_ylim()[1], " this run (points: measured)", fontsize=7, va="bottom")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("speedup vs baseline (×)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return ax


def plot_worker_memory(tl: Timeline, memory, data_bytes: int | None = None, *,
                       title: str | None = None) -> Figure:
    """The timeline of a recording (top) and, on the same time axis, each worker's memory
    sampled while it ran (:class:`helpers.WorkerMemory`): its USS (the pages only it holds)
    with the data's size as a dotted line; its PSS (its own pages plus its share of every
    shared one: what the processes' PSS add up to is the true total) and, dashed, its RSS
    (what `top` shows as RES: shared and copied pages alike)."""
    rows = len(_rows(tl))
    top_h = 0.6 + 0.42 * rows
    fig, (top, uss_ax, pss_ax) = plt.subplots(3, 1, figsize=(12, top_h + 5.4), sharex=True,
                                              height_ratios=[top_h, 2.7, 1.9], layout="constrained")
    plot_timeline(tl, top, label_batches=False, title=title)
    top.set_xlabel("")
    worker_of = {b.pid: b.worker for b in tl.batches}
    cmap = matplotlib.colormaps["tab10"]
    for i, pid in enumerate(memory.pids()):
        series = memory.series(pid)
        t = [s.t for s in series]
        worker = worker_of.get(pid)
        name = f"worker {worker}" if worker is not None else f"process {pid}"
        if len(tl.epochs) > 1:
            name += f" (pid {pid})"
        colour = cmap((i + 6) % 10)
        uss_ax.plot(t, [s.uss / 2**20 for s in series], color=colour, linewidth=2, label=name)
        pss_ax.plot(t, [s.pss / 2**20 for s in series], color=colour, linewidth=1.5, label=name)
        pss_ax.plot(t, [s.rss / 2**20 for s in series], color=colour, linewidth=1, linestyle="--")
    if data_bytes:
        uss_ax.axhline(data_bytes / 2**20, color="0.3", linestyle=":", linewidth=1.2,
                       label=f"the dataset's data, {data_bytes / 2**20:.0f} MiB")
    for ax, what in ((uss_ax, "USS: pages only this worker holds (MiB)"),
                     (pss_ax, "PSS (solid) and RSS,\ntop's RES (dashed), MiB")):
        ax.set_ylim(bottom=0)
        ax.set_ylabel(what, fontsize=8)
        ax.grid(alpha=0.3)
    uss_ax.legend(fontsize=8, loc="lower right", ncols=2)
    pss_ax.set_xlabel("seconds since the recording started")
    return fig


def plot_object_timings(timings: Sequence, *, latency_s: float, bandwidth: float | None,
                        server_s: float = 0.0) -> Figure:
    """Notebook 13's picture of a single read: left, the median time to the first byte from
    a local file, from the object store itself and through the latency proxy (log scale);
    right, each read's throughput (whole object, first byte included) against the object's
    size, with the model ``size / (round trip + server + size / bandwidth)`` for the proxy."""
    import numpy as np

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained", width_ratios=[1, 1.6])
    cmap = matplotlib.colormaps["tab10"]
    sources = list(dict.fromkeys(t.source for t in timings))
    medians = [float(np.median([t.first_byte_s for t in timings if t.source == s])) * 1e3 for s in sources]
    left.bar(sources, medians, color=[cmap(i) for i in range(len(sources))])
    for i, m in enumerate(medians):
        left.text(i, m, f"{m:.3g} ms", ha="center", va="bottom", fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("time to first byte, median (ms, log)")
    left.set_title("one GET: how long until the first byte", fontsize=10)
    left.grid(alpha=0.3, axis="y")
    for i, source in enumerate(sources):
        ts = [t for t in timings if t.source == source]
        right.plot([t.size for t in ts], [t.throughput / 1e6 for t in ts], "o", color=cmap(i), alpha=0.6,
                   label=source)
    sizes = np.geomspace(min(t.size for t in timings), max(t.size for t in timings), 50)
    seconds = latency_s + server_s + (sizes / bandwidth if bandwidth else 0)
    colour = cmap(sources.index("remote")) if "remote" in sources else "k"
    right.plot(sizes, sizes / seconds / 1e6, color=colour,
               linestyle="--", label="model: size / (round trip + server + size / bandwidth)")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("object size (bytes, log)")
    right.set_ylabel("throughput of one GET (MB/s, log)")
    right.set_title("small objects are latency-bound, large ones bandwidth-bound", fontsize=10)
    right.grid(alpha=0.3, which="both")
    right.legend(fontsize=8)
    return fig


def plot_requests(tl: Timeline, requests, *, title: str | None = None,
                  concurrency: int | None = None) -> Figure:
    """The timeline of a recording over :class:`helpers.S3Dataset` (top), every request on the
    same time axis — one lane per worker thread, light while waiting for the first byte, dark
    while the body arrives — and the number of requests in flight (bottom)."""
    rows = len(_rows(tl))
    top_h = 0.6 + 0.42 * rows
    lanes = sorted({(int(r[0]), int(r[1])) for r in requests.remote})
    lane_h = max(1.2, 0.12 * len(lanes))
    fig, (top, mid, bottom) = plt.subplots(3, 1, figsize=(12, top_h + lane_h + 2.2), sharex=True,
                                           height_ratios=[top_h, lane_h, 1.6], layout="constrained")
    plot_timeline(tl, top, label_batches=False, title=title)
    top.set_xlabel("")
    y_of = {lane: i for i, lane in enumerate(lanes)}
    cmap = matplotlib.colormaps["tab10"]
    for r in requests.remote:
        worker, thread, start, first, end = int(r[0]), int(r[1]), r[2], r[3], r[4]
        y, colour = y_of[worker, thread], cmap(0 if worker < 0 else worker % 10)
        mid.plot([start, first], [y, y], color=colour, alpha=0.35, linewidth=3, solid_capstyle="butt")
        mid.plot([first, end], [y, y], color=colour, linewidth=3, solid_capstyle="butt")
    workers = sorted({w for w, _ in lanes})
    mid.set_yticks([y_of[(w, min(t for ww, t in lanes if ww == w))] for w in workers],
                   [("main" if w < 0 else f"worker {w}") for w in workers], fontsize=8)
    mid.set_ylim(-1, max(len(lanes), 1))
    mid.set_ylabel("requests\n(a lane per thread)", fontsize=8)
    mid.grid(alpha=0.3, axis="x")
    t, n = requests.in_flight()
    bottom.step(t, n, where="post", color="0.2", linewidth=1.2)
    if concurrency:
        bottom.axhline(concurrency, color=COLORS["model"], linestyle="--", linewidth=1,
                       label=f"workers × threads = {concurrency}")
        bottom.legend(fontsize=8, loc="upper right")
    bottom.set_ylim(bottom=0)
    bottom.set_ylabel("in flight", fontsize=8)
    bottom.set_xlabel("seconds since the recording started")
    bottom.grid(alpha=0.3)
    return fig


def plot_concurrency(results: dict[tuple[int, int], Any], *, latency_s: float, request_s: float) -> Figure:
    """Samples/s of each (workers, threads) run against workers × threads, with the latency
    bound: concurrency / (time of one request alone). When the values are
    :class:`helpers.Requests` measured with the store, a second panel splits each
    configuration's mean request into its parts (:data:`helpers.remote.PART_FIELDS`): where
    the time went as the requests in flight grew."""
    import numpy as np

    from .remote import PART_FIELDS

    rates = {k: (v.samples_per_s() if hasattr(v, "samples_per_s") else float(v)) for k, v in results.items()}
    parts = {k: v.mean_parts() for k, v in results.items() if hasattr(v, "mean_parts") and v.mean_parts()}
    if parts:
        fig, (ax, split) = plt.subplots(1, 2, figsize=(13, 4.4), layout="constrained", width_ratios=[1, 1.1])
    else:
        fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    cmap = matplotlib.colormaps["viridis"]
    workers = sorted({w for w, _ in rates})
    for i, w in enumerate(workers):
        points = sorted((w * t, rate) for (ww, t), rate in rates.items() if ww == w)
        ax.plot(*zip(*points, strict=True), "o-", color=cmap(i / max(len(workers) - 1, 1) * 0.9),
                label=f"{w} worker{'s' if w > 1 else ''}")
    top = max(w * t for w, t in rates)
    xs = np.arange(1, top + 1)
    ax.plot(xs, xs / request_s, color=COLORS["model"], linestyle="--",
            label=f"concurrency / {request_s * 1e3:.0f} ms (a request's time alone)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("requests in flight at most: workers × threads (log)")
    ax.set_ylabel("samples / s")
    ax.set_ylim(0, 1.15 * max(rates.values()))
    ax.set_title(f"{latency_s * 1e3:.0f} ms round trip: concurrency pays while a request keeps its time",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    if not parts:
        return fig
    order = sorted(parts, key=lambda k: (k[0] * k[1], k[0]))
    style = {"round_trip": ("0.8", ""), "server": (COLORS["wait"], "//"), "proxy": (COLORS["model"], ".."),
             "client": (COLORS["fetch"], ""), "body": (COLORS["step"], "")}
    bottom = np.zeros(len(order))
    for name in PART_FIELDS:
        values = np.array([parts[k][name] * 1e3 for k in order])
        colour, hatch = style[name]
        split.bar(range(len(order)), values, bottom=bottom, color=colour, hatch=hatch, edgecolor="white",
                  linewidth=0.5, label=name.replace("_", " "))
        bottom += values
    split.set_xticks(range(len(order)), [f"{w}×{t}" for w, t in order], fontsize=9)
    split.set_xlabel("workers × threads (by requests in flight)")
    split.set_ylabel("mean request (ms)")
    split.set_title("where a request's time went", fontsize=10)
    split.grid(alpha=0.3, axis="y")
    split.legend(fontsize=8, loc="upper left", ncols=2)
    split.set_ylim(0, 1.3 * bottom.max())
    return fig


def plot_image_rates(groups: dict[str, dict[str, float]], *, cores_free: float | None = None,
                     title: str = "", ax: Axes | None = None) -> Axes:
    """Grouped bars of images/s relative to each group's first bar (e.g. "1 worker"), with a
    dashed line at the free cores measured: the most a CPU-bound pipeline can gain."""
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
    cmap = matplotlib.colormaps["tab10"]
    labels = list(dict.fromkeys(k for g in groups.values() for k in g))
    width = 0.8 / len(labels)
    for j, label in enumerate(labels):
        xs, ys, texts = [], [], []
        for i, g in enumerate(groups.values()):
            if label in g:
                base = next(iter(g.values()))
                xs.append(i + (j - (len(labels) - 1) / 2) * width)
                ys.append(g[label] / base)
                texts.append(f"{g[label]:.0f}/s")
        ax.bar(xs, ys, width * 0.95, color=cmap(j), label=label)
        for x, y, t in zip(xs, ys, texts, strict=True):
            ax.text(x, y, t, ha="center", va="bottom", fontsize=7)
    if cores_free is not None:
        ax.axhline(cores_free, color="0.3", linestyle="--", linewidth=1,
                   label=f"free cores measured: {cores_free:.2f}")
    ax.set_xticks(np.arange(len(groups)), list(groups))
    ax.set_ylabel("images/s, × the first bar")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="upper left")
    return ax


def show_image(image, *, title: str = "") -> Axes:
    """Draw a ``3 × H × W`` uint8 image tensor (e.g. a ``make_grid`` of samples)."""
    height, width = image.shape[-2:]
    _, ax = plt.subplots(figsize=(12, 12 * height / width + 0.3), layout="constrained")
    ax.imshow(image.permute(1, 2, 0).numpy())
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def plot_resume(results: dict) -> Figure:
    """One row per resumed epoch (:class:`helpers.resume.ResumeResult`): how many times each
    sample id was trained on — green once, orange twice or more, red never."""
    import numpy as np

    fig, axes = plt.subplots(len(results), 1, figsize=(12, 0.9 + 0.75 * len(results)), sharex=True,
                             layout="constrained", squeeze=False)
    colours = matplotlib.colors.ListedColormap(["#cf222e", "#1a7f37", "#d4a72c", "#9a6700"])
    for ax, (name, result) in zip(axes[:, 0], results.items(), strict=True):
        counts = np.array([result.counts.get(i, 0) for i in range(result.n)])
        ax.imshow(np.minimum(counts, 3)[None, :], aspect="auto", cmap=colours, vmin=0, vmax=3,
                  interpolation="nearest")
        ax.set_yticks([0], [name], fontsize=9)
        ax.text(1.005, 0.5, f"{result.repeated} repeats, {len(result.missing)} missing",
                transform=ax.transAxes, va="center", fontsize=8)
    axes[-1, 0].set_xlabel("sample id (green: trained on once · orange: twice or more · red: never)")
    return fig


def plot_ranks(run, *, title: str | None = None) -> Figure:
    """One figure for a torchrun launch (:class:`helpers.distributed.DistRun`): per rank, the
    training loop's row — waiting for data (red), computing (green), waiting in all_reduce for
    the other ranks (orange) — and one row per DataLoader worker (fetches, blue); all ranks on
    the machine's clock."""
    rows = []
    for r in run.ranks:
        rows.append((r, "loop", None))
        rows += [(r, "worker", w) for w in sorted({b.worker for b in r.timeline.batches})]
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.38 * len(rows)), layout="constrained")
    start = min(r.origin for r in run.ranks)
    orange = matplotlib.colormaps["tab10"](1)
    for y, (r, kind, worker) in enumerate(reversed(rows)):
        shift = r.origin - start
        if kind == "loop":
            spans = [(b.wait_start, b.ready, COLORS["wait"]) for b in r.timeline.batches]
            ordered = sorted(r.timeline.batches, key=lambda b: b.ready)
            for b, (s0, s1) in zip(ordered, r.sync_spans, strict=False):
                spans += [(b.step_start, s0, COLORS["step"]), (s0, s1, orange)]
        else:
            spans = [(b.fetch_start, b.fetch_end, COLORS["fetch"])
                     for b in r.timeline.batches if b.worker == worker]
        for s0, s1, colour in spans:
            ax.barh(y, max(s1 - s0, 1e-4), left=s0 + shift, height=_BAR_HEIGHT, color=colour, linewidth=0)
    labels = [f"rank {r.rank} loop" if kind == "loop" else f"rank {r.rank} worker {worker}"
              for r, kind, worker in rows]
    ax.set_yticks(range(len(rows)), list(reversed(labels)), fontsize=8)
    ax.set_xlabel("seconds (all ranks on one clock)")
    ax.legend(handles=[Patch(color=COLORS["wait"], label="waits for data"),
                       Patch(color=COLORS["step"], label="computes (modelled)"),
                       Patch(color=orange, label="waits in all_reduce for the other ranks"),
                       Patch(color=COLORS["fetch"], label="worker fetches")],
              fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return fig
