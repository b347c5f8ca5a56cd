"""Notebook 18's pictures: who drew which random value, which worker delivered which id, the sizes
of the last batches, and each step's time under ``torch.compile``."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from .. import palette
from ..data.bugs.compiled import CompiledRun
from ..data.bugs.randomness import DrawRun, repeat_flags
from ..data.bugs.streams import StreamRun
from .style import COLORS, TEXT_PT

#: One colour per worker, told apart with any colour vision (the palette's categorical Okabe–Ito).
_WORKERS = tuple(palette.CATEGORICAL)


def _worker_colour(worker: int) -> str:
    return _WORKERS[max(worker, 0) % len(_WORKERS)]


def _worker_name(worker: int) -> str:
    return "main process" if worker < 0 else f"worker {worker}"


def plot_draws(runs: dict[str, DrawRun]) -> Figure:
    """One panel per run: a row per (epoch, worker), a cell per draw in that worker's order, coloured
    by the value drawn. A cell marked × repeats a value drawn earlier in the same epoch (in the bug:
    by another worker); ○ repeats a value of an earlier epoch."""
    heights = [max(2, len({(d.epoch, d.worker) for d in run.draws})) for run in runs.values()]
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 1.1 * len(runs) + 0.33 * sum(heights)), squeeze=False,
                             height_ratios=heights, layout="constrained")
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        rows = sorted({(d.epoch, d.worker) for d in run.draws})
        width = max(d.k for d in run.draws) + 1
        grid = np.full((len(rows), width), np.nan)
        for d in run.draws:
            grid[rows.index((d.epoch, d.worker)), d.k] = d.value
        ax.imshow(grid, aspect="auto", cmap=palette.SEQUENTIAL, vmin=0, vmax=1, interpolation="nearest")
        for d, flag in zip(run.draws, repeat_flags(run.draws), strict=True):
            if flag:
                ax.text(d.k, rows.index((d.epoch, d.worker)), "×" if flag == "epoch" else "○", ha="center",
                        va="center", fontsize=TEXT_PT, color=palette.PAPER if d.value < 0.6 else palette.INK)
        ax.set_yticks(range(len(rows)), [f"epoch {e} · {_worker_name(w)}" for e, w in rows], fontsize=TEXT_PT)
        for boundary in range(1, len(rows)):
            if rows[boundary][0] != rows[boundary - 1][0]:
                ax.axhline(boundary - 0.5, color=palette.PAPER, linewidth=2)
        ax.set_title(f"{name}: {run.describe()}", fontsize=TEXT_PT, loc="left")
    axes[-1, 0].set_xlabel("the worker's k-th draw in the epoch (colour: the value drawn; × repeats a value "
                           "of this epoch, ○ one of an earlier epoch)")
    return fig


def plot_stream_ids(runs: dict[str, StreamRun]) -> Figure:
    """One panel per run: a row per worker, a column per sample id, filled in the worker's colour
    where that worker delivered that id (darker: more than once)."""
    heights = [max(2, len({b.worker for b in run.batches})) for run in runs.values()]
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 1.0 * len(runs) + 0.35 * sum(heights)), squeeze=False,
                             height_ratios=heights, layout="constrained", sharex=True)
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        workers = sorted({b.worker for b in run.batches})
        for row, worker in enumerate(workers):
            counts = np.zeros(run.length)
            for b in run.batches:
                if b.worker == worker:
                    counts[list(b.ids)] += 1
            for i in np.flatnonzero(counts):
                ax.barh(row, 1, left=i - 0.5, height=0.75, color=_worker_colour(worker),
                        alpha=min(1.0, 0.55 + 0.45 * (counts[i] - 1)), linewidth=0)
        ax.set_yticks(range(len(workers)), [_worker_name(w) for w in workers], fontsize=TEXT_PT)
        ax.set_ylim(len(workers) - 0.5, -0.5)
        ax.set_title(f"{name}: {run.describe()}", fontsize=TEXT_PT, loc="left")
        ax.grid(alpha=0.3, axis="x")
    axes[-1, 0].set_xlabel("sample id (a bar: this worker delivered it)")
    return fig


def plot_batch_sizes(runs: dict[str, StreamRun]) -> Figure:
    """One panel per run: every batch's size in arrival order, coloured by the worker that built it,
    with the batch size as a dashed line; short batches are labelled."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 0.9 + 1.7 * len(runs)), squeeze=False,
                             layout="constrained", sharey=True)
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        for i, b in enumerate(run.batches):
            ax.bar(i, len(b.ids), width=0.8, color=_worker_colour(b.worker))
            if len(b.ids) < run.batch_size:
                ax.text(i, len(b.ids), str(len(b.ids)), ha="center", va="bottom", fontsize=TEXT_PT)
        ax.axhline(run.batch_size, color=palette.ROLES["rule"], linestyle="--", linewidth=1)
        ax.set_title(f"{name}: {len(run.batches)} batches, {len(run.short)} short, "
                     f"{run.lost_per_epoch} samples lost per epoch", fontsize=TEXT_PT, loc="left")
        ax.set_ylabel("samples")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(-0.6, max(len(r.batches) for r in runs.values()) - 0.4)
        workers = sorted({b.worker for b in run.batches})
        ax.legend(handles=[Line2D([], [], color=_worker_colour(w), linewidth=6, label=_worker_name(w))
                           for w in workers], fontsize=TEXT_PT, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[-1, 0].set_xlabel("batch, in the order the loop received it (dashed: batch_size)")
    return fig


def plot_step_times(runs: dict[str, CompiledRun]) -> Figure:
    """One panel per run: each step's time (log scale) in order, epochs separated by dotted lines;
    the steps that compiled are labelled with their time."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(12, 0.9 + 1.6 * len(runs)), squeeze=False,
                             layout="constrained", sharey=True)
    for ax, (name, run) in zip(axes[:, 0], runs.items(), strict=True):
        steps_ms = np.array(run.steps_s) * 1e3
        ax.bar(range(len(steps_ms)), steps_ms, width=0.8, color=COLORS["step"])
        ragged = run.ragged()
        long_ones = {0} | ({ragged} if ragged is not None and run.recompiles else set())
        for i in sorted(long_ones):
            ax.text(i, steps_ms[i], f" {steps_ms[i]:.0f} ms", ha="left", va="bottom", fontsize=TEXT_PT)
        for i in range(1, len(run.epochs_of)):
            if run.epochs_of[i] != run.epochs_of[i - 1]:
                ax.axvline(i - 0.5, color=palette.ROLES["rule"], linestyle=":", linewidth=1)
        ax.set_yscale("log")
        ax.set_ylabel("step (ms)")
        ax.set_title(f"{name}: {len(run.compiles)} compile(s), {len(run.recompiles)} recompile(s); "
                     f"{run.trained_per_epoch():.0f} of {run.length} samples trained per epoch",
                     fontsize=TEXT_PT, loc="left")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3, axis="y")
    top = max(max(r.steps_s) for r in runs.values()) * 1e3
    axes[0, 0].set_ylim(top=top * 4)
    axes[-1, 0].set_xlabel("batch (dotted: a new epoch; the first step compiles)")
    return fig
