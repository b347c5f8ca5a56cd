"""Runs of later notebooks: worker memory (12), image rates (14), a resumed run (15), ranks (17)."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..timing.timeline import Timeline
from .style import COLORS, TEXT_PT, categorical, fill, fit_text, legend_beside, patch, slide_height, wrap
from .timeline import _BAR_HEIGHT, _rows, plot_timeline


def plot_worker_memory(tl: Timeline, memory, data_bytes: int | None = None, *,
                       title: str | None = None) -> Figure:
    """The timeline of a recording (top) and, on the same time axis, each worker's memory
    sampled while it ran (:class:`helpers.WorkerMemory`): its USS (the pages only it holds)
    with the data's size as a dotted line; its PSS (its own pages plus its share of every
    shared one: what the processes' PSS add up to is the true total) and, dashed, its RSS
    (what `top` shows as RES: shared and copied pages alike)."""
    rows = len(_rows(tl))
    top_h = 0.9 + 0.42 * rows
    fig, (top, uss_ax, pss_ax) = plt.subplots(3, 1, figsize=(12.8, slide_height(top_h + 4.6)), sharex=True,
                                              height_ratios=[top_h - 0.5, 2.4, 1.8], layout="constrained")
    plot_timeline(tl, top, label_batches=False, title=title)
    top.set_xlabel("")
    worker_of = {b.pid: b.worker for b in tl.batches}
    for i, pid in enumerate(memory.pids()):
        series = memory.series(pid)
        t = [s.t for s in series]
        worker = worker_of.get(pid)
        name = f"worker {worker}" if worker is not None else f"process {pid}"
        if len(tl.epochs) > 1:
            name += f" (pid {pid})"
        colour = categorical(i + 2)  # not blue nor orange: the fetch and model colours above
        uss_ax.plot(t, [s.uss / 2**20 for s in series], color=colour, linewidth=2, label=name)
        pss_ax.plot(t, [s.pss / 2**20 for s in series], color=colour, linewidth=1.5, label=name)
        pss_ax.plot(t, [s.rss / 2**20 for s in series], color=colour, linewidth=1, linestyle="--")
    if data_bytes:
        uss_ax.axhline(data_bytes / 2**20, color=COLORS["rule"], linestyle=":", linewidth=1.5,
                       label=f"the dataset's data,\n{data_bytes / 2**20:.0f} MiB")
    for ax, what in ((uss_ax, "USS: pages only\nthis worker holds (MiB)"),
                     (pss_ax, "PSS (solid), RSS\n(dashed), MiB")):
        ax.set_ylim(bottom=0)
        ax.set_ylabel(what, fontsize=TEXT_PT)
        ax.grid(alpha=0.3)
    legend_beside(uss_ax)
    pss_ax.set_xlabel("seconds since the recording started")
    return fit_text(fig)


def plot_image_rates(groups: dict[str, dict[str, float]], *, cores_free: float | None = None,
                     title: str = "", ax: Axes | None = None) -> Axes:
    """Grouped bars of images/s relative to each group's first bar (e.g. "1 worker"), with a
    dashed line at the free cores measured: the most a CPU-bound pipeline can gain."""
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(12.8, 5.0), layout="constrained")
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
        ax.bar(xs, ys, width * 0.95, color=categorical(j), label=label)
        for x, y, t in zip(xs, ys, texts, strict=True):
            ax.text(x, y, t, ha="center", va="bottom", fontsize=TEXT_PT)
    if cores_free is not None:
        ax.axhline(cores_free, color=COLORS["rule"], linestyle="--", linewidth=1.5,
                   label=f"free cores\nmeasured: {cores_free:.2f}")
    ax.set_xticks(np.arange(len(groups)), list(groups))
    ax.set_ylabel("images/s, × the first bar")
    ax.set_ylim(0, max([*ax.get_ylim(), cores_free or 0]) * 1.12)  # room for the values above the bars
    ax.set_title(wrap(title, ax.figure, margin_in=ax.figure.get_figwidth() * 0.45), fontsize=TEXT_PT)
    ax.grid(alpha=0.3, axis="y")
    legend_beside(ax)
    fit_text(ax.figure)
    return ax


def show_image(image, *, title: str = "") -> Axes:
    """Draw a ``3 × H × W`` uint8 image tensor (e.g. a ``make_grid`` of samples)."""
    height, width = image.shape[-2:]
    _, ax = plt.subplots(figsize=(12.8, 12.8 * height / width + 0.4), layout="constrained")
    ax.imshow(image.permute(1, 2, 0).numpy())
    ax.set_axis_off()
    if title:
        ax.set_title(wrap(title, ax.figure), fontsize=TEXT_PT)
    return ax


def plot_resume(results: dict) -> Figure:
    """One row per resumed epoch (:class:`helpers.data.resume.ResumeResult`): how many times each
    sample id was trained on — bluish green once, orange twice or more, black never (a hole)."""
    import numpy as np

    fig, axes = plt.subplots(len(results), 1, figsize=(12.8, slide_height(1.3 + 0.8 * len(results))),
                             sharex=True, layout="constrained", squeeze=False)
    colours = matplotlib.colors.ListedColormap([COLORS["missing"], COLORS["once"], COLORS["repeated"]])
    for ax, (name, result) in zip(axes[:, 0], results.items(), strict=True):
        counts = np.array([result.counts.get(i, 0) for i in range(result.n)])
        ax.imshow(np.minimum(counts, 2)[None, :], aspect="auto", cmap=colours, vmin=0, vmax=2,
                  interpolation="nearest")
        ax.set_yticks([0], [name], fontsize=TEXT_PT)
        ax.text(1.005, 0.5, f"{result.repeated} repeats,\n{len(result.missing)} missing",
                transform=ax.transAxes, va="center", fontsize=TEXT_PT)
    axes[-1, 0].set_xlabel("sample id")
    fig.legend(handles=[patch("once", "trained on once"), patch("repeated", "twice or more"),
                        patch("missing", "never")], loc="outside lower center", ncols=3, frameon=False,
               fontsize=TEXT_PT)
    return fit_text(fig)


def plot_ranks(run, *, title: str | None = None) -> Figure:
    """One figure for a torchrun launch (:class:`helpers.data.distributed.DistRun`): per rank, the
    training loop's row — waiting for data (red), computing (green), waiting in all_reduce for
    the other ranks (orange) — and one row per DataLoader worker (fetches, blue); all ranks on
    the machine's clock."""
    rows = []
    for r in run.ranks:
        rows.append((r, "loop", None))
        rows += [(r, "worker", w) for w in sorted({b.worker for b in r.timeline.batches})]
    fig, ax = plt.subplots(figsize=(12.8, slide_height(1.6 + 0.4 * len(rows))), layout="constrained")
    start = min(r.origin for r in run.ranks)
    for y, (r, kind, worker) in enumerate(reversed(rows)):
        shift = r.origin - start
        if kind == "loop":
            spans = [(b.wait_start, b.ready, "wait") for b in r.timeline.batches]
            ordered = sorted(r.timeline.batches, key=lambda b: b.ready)
            for b, (s0, s1) in zip(ordered, r.sync_spans, strict=False):
                spans += [(b.step_start, s0, "step"), (s0, s1, "sync")]
        else:
            spans = [(b.fetch_start, b.fetch_end, "fetch") for b in r.timeline.batches if b.worker == worker]
        for role in dict.fromkeys(role for _, _, role in spans):
            mine = [(s0 + shift, max(s1 - s0, 1e-4)) for s0, s1, rr in spans if rr == role]
            ax.broken_barh(mine, (y - _BAR_HEIGHT / 2, _BAR_HEIGHT), **fill(role))
    labels = [f"rank {r.rank} loop" if kind == "loop" else f"rank {r.rank} worker {worker}"
              for r, kind, worker in rows]
    ax.set_yticks(range(len(rows)), list(reversed(labels)), fontsize=TEXT_PT)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("seconds (all ranks on one clock)")
    legend_beside(ax, [patch("wait", "waits for data"), patch("step", "computes\n(modelled)"),
                       patch("sync", "waits in\nall_reduce for\nthe other ranks"),
                       patch("fetch", "worker fetches")])
    if title:
        ax.set_title(wrap(title, fig, margin_in=3.5), fontsize=TEXT_PT, loc="left")
    ax.grid(alpha=0.3, axis="x")
    return fit_text(fig)
