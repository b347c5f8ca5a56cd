"""Remote storage (notebook 13): object timings, requests in flight, concurrency."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .. import palette
from ..timing.timeline import Timeline
from .style import COLORS, TEXT_PT, categorical, fit_text, legend_beside, sequential, slide_height, wrap
from .timeline import _rows, plot_timeline


def plot_object_timings(timings: Sequence, *, latency_s: float, bandwidth: float | None,
                        server_s: float = 0.0) -> Figure:
    """Notebook 13's picture of a single read: left, the median time to the first byte from
    a local file, from the object store itself and through the latency proxy (log scale);
    right, each read's throughput (whole object, first byte included) against the object's
    size, with the model ``size / (round trip + server + size / bandwidth)`` for the proxy."""
    import numpy as np

    fig, (left, right) = plt.subplots(1, 2, figsize=(12.8, 5.6), layout="constrained", width_ratios=[1, 1.5])
    sources = list(dict.fromkeys(t.source for t in timings))
    medians = [float(np.median([t.first_byte_s for t in timings if t.source == s])) * 1e3 for s in sources]
    left.bar(sources, medians, color=[categorical(i) for i in range(len(sources))])
    for i, m in enumerate(medians):
        left.text(i, m, f"{m:.3g} ms", ha="center", va="bottom", fontsize=TEXT_PT)
    left.set_yscale("log")
    left.set_ylabel("time to first byte, median (ms, log)")
    left.set_title("one GET: time to the first byte", fontsize=TEXT_PT)
    left.grid(alpha=0.3, axis="y")
    for i, source in enumerate(sources):
        ts = [t for t in timings if t.source == source]
        right.plot([t.size for t in ts], [t.throughput / 1e6 for t in ts], "o", color=categorical(i),
                   alpha=0.7, label=source)
    sizes = np.geomspace(min(t.size for t in timings), max(t.size for t in timings), 50)
    seconds = latency_s + server_s + (sizes / bandwidth if bandwidth else 0)
    colour = categorical(sources.index("remote")) if "remote" in sources else palette.INK
    right.plot(sizes, sizes / seconds / 1e6, color=colour,
               linestyle="--", label="model: size / (round trip\n+ server + size / bandwidth)")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("object size (bytes, log)")
    right.set_ylabel("throughput of one GET (MB/s, log)")
    right.set_title("small objects: latency-bound; large: bandwidth-bound", fontsize=TEXT_PT)
    right.grid(alpha=0.3, which="both")
    legend_beside(right)
    return fit_text(fig)


def plot_requests(tl: Timeline, requests, *, title: str | None = None,
                  concurrency: int | None = None) -> Figure:
    """The timeline of a recording over :class:`helpers.S3Dataset` (top), every request on the
    same time axis — one lane per worker thread, light while waiting for the first byte, dark
    while the body arrives — and the number of requests in flight (bottom)."""
    rows = len(_rows(tl))
    top_h = 0.9 + 0.42 * rows
    lanes = sorted({(int(r[0]), int(r[1])) for r in requests.remote})
    lane_h = max(1.2, 0.1 * len(lanes))
    fig, (top, mid, bottom) = plt.subplots(3, 1, figsize=(12.8, slide_height(top_h + lane_h + 2.4)),
                                           sharex=True, height_ratios=[top_h - 0.5, lane_h, 1.4],
                                           layout="constrained")
    plot_timeline(tl, top, label_batches=False, title=title)
    top.set_xlabel("")
    y_of = {lane: i for i, lane in enumerate(lanes)}
    for r in requests.remote:
        worker, thread, start, first, end = int(r[0]), int(r[1]), r[2], r[3], r[4]
        y, colour = y_of[worker, thread], categorical(max(worker, 0))
        mid.plot([start, first], [y, y], color=colour, alpha=0.35, linewidth=3, solid_capstyle="butt")
        mid.plot([first, end], [y, y], color=colour, linewidth=3, solid_capstyle="butt")
    workers = sorted({w for w, _ in lanes})
    mid.set_yticks([y_of[(w, min(t for ww, t in lanes if ww == w))] for w in workers],
                   [("main" if w < 0 else f"worker {w}") for w in workers], fontsize=TEXT_PT)
    mid.set_ylim(-1, max(len(lanes), 1))
    mid.set_ylabel("requests\n(lane per thread)", fontsize=TEXT_PT)
    mid.grid(alpha=0.3, axis="x")
    t, n = requests.in_flight()
    bottom.step(t, n, where="post", color=COLORS["rule"], linewidth=1.2, label="requests in flight")
    if concurrency:
        bottom.axhline(concurrency, color=COLORS["model"], linestyle="--", linewidth=1.5,
                       label=f"workers × threads\n= {concurrency}")
        legend_beside(bottom)
    bottom.set_ylim(bottom=0)
    bottom.set_ylabel("in flight", fontsize=TEXT_PT)
    bottom.set_xlabel("seconds since the recording started")
    bottom.grid(alpha=0.3)
    return fit_text(fig)


def plot_concurrency(results: dict[tuple[int, int], Any], *, latency_s: float, request_s: float) -> Figure:
    """Samples/s of each (workers, threads) run against workers × threads, with the latency
    bound: concurrency / (time of one request alone). When the values are
    :class:`helpers.Requests` measured with the store, a second panel splits each
    configuration's mean request into its parts (:data:`helpers.data.remote.PART_FIELDS`): where
    the time went as the requests in flight grew."""
    import numpy as np

    from ..data.remote.requests import PART_FIELDS

    rates = {k: (v.samples_per_s() if hasattr(v, "samples_per_s") else float(v)) for k, v in results.items()}
    parts = {k: v.mean_parts() for k, v in results.items() if hasattr(v, "mean_parts") and v.mean_parts()}
    if parts:
        fig, (ax, split) = plt.subplots(1, 2, figsize=(12.8, 6.0), layout="constrained",
                                        width_ratios=[1, 1.1])
    else:
        fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    workers = sorted({w for w, _ in rates})
    for i, w in enumerate(workers):
        points = sorted((w * t, rate) for (ww, t), rate in rates.items() if ww == w)
        ax.plot(*zip(*points, strict=True), "o-", color=sequential(i, len(workers)),
                label=f"{w} worker{'s' if w > 1 else ''}")
    top = max(w * t for w, t in rates)
    xs = np.arange(1, top + 1)
    ax.plot(xs, xs / request_s, color=COLORS["model"], linestyle="--",
            label=f"concurrency / {request_s * 1e3:.0f} ms\n(a request's time alone)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("requests in flight at most: workers × threads (log)")
    ax.set_ylabel("samples / s")
    ax.set_ylim(0, 1.15 * max(rates.values()))
    ax.set_title(wrap(f"{latency_s * 1e3:.0f} ms round trip: concurrency pays while a request keeps its time",
                      fig, margin_in=fig.get_figwidth() / 2 + 1 if parts else 1.2), fontsize=TEXT_PT)
    ax.grid(alpha=0.3)
    legend_beside(ax)
    if not parts:
        return fit_text(fig)
    order = sorted(parts, key=lambda k: (k[0] * k[1], k[0]))
    # the round trip is no one's work (grey); waiting in the server hatched as the loop's waits are
    style = {"round_trip": ("neutral", ""), "server": ("wait", palette.HATCHES["wait"]),
             "proxy": ("model", ".."), "send": ("copy", ""), "client": ("fetch", ""), "body": ("step", "")}
    bottom = np.zeros(len(order))
    for name in PART_FIELDS:
        values = np.array([parts[k][name] * 1e3 for k in order])
        role, hatch = style[name]
        split.bar(range(len(order)), values, bottom=bottom, color=COLORS[role], hatch=hatch,
                  edgecolor=palette.PAPER, linewidth=0.5, label=name.replace("_", " "))
        bottom += values
    split.set_xticks(range(len(order)), [f"{w}×{t}" for w, t in order], fontsize=TEXT_PT)
    split.set_xlabel("workers × threads (by requests in flight)")
    split.set_ylabel("mean request (ms)")
    split.set_title("where a request's time went", fontsize=TEXT_PT)
    split.grid(alpha=0.3, axis="y")
    legend_beside(split, handles=split.get_legend_handles_labels()[0][::-1])
    return fit_text(fig)
