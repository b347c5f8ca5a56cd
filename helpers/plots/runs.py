"""Runs of later notebooks: worker memory (12), image rates (14), a resumed run (15), ranks (17)."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..timing.timeline import Timeline
from .timeline import _BAR_HEIGHT, COLORS, _rows, plot_timeline


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
    """One row per resumed epoch (:class:`helpers.data.resume.ResumeResult`): how many times each
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
    """One figure for a torchrun launch (:class:`helpers.data.distributed.DistRun`): per rank, the
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
