"""Remote storage (notebook 13): object timings, requests in flight, concurrency."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..timing.timeline import Timeline
from .timeline import COLORS, _rows, plot_timeline


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
    configuration's mean request into its parts (:data:`helpers.data.remote.PART_FIELDS`): where
    the time went as the requests in flight grew."""
    import numpy as np

    from ..data.remote.requests import PART_FIELDS

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
