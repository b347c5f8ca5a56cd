"""The models beside the measurements: intervals, the step-time model, bandwidth, ratios,
speed-up curves and the reference figures."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from ..timing.theory import PlannedBatch, simulated_intervals
from ..timing.timeline import Timeline
from .style import COLORS, TEXT_PT, categorical, fit_text, legend_beside, sequential


def plot_intervals(
    timelines: Sequence[Timeline],
    labels: Sequence[str],
    *,
    predictions: Sequence[Sequence[PlannedBatch]] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Time between consecutive loop iterations, batch by batch (the blog's figure).

    ``predictions``: a :func:`helpers.simulate` schedule per timeline, drawn dashed. One colour
    per timeline (ordered, lightness rising), the line style tells measured from model; the
    legend sits beside the data.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(12.8, 5.6), layout="constrained")
    handles = []
    for i, (tl, label) in enumerate(zip(timelines, labels, strict=True)):
        color = sequential(i, len(timelines))
        measured = tl.intervals()
        ax.plot(range(len(measured)), measured, marker="o", markersize=4, color=color)
        if predictions is not None:
            predicted = simulated_intervals(list(predictions[i]))
            ax.plot(range(len(predicted)), predicted, linestyle="--", color=color, alpha=0.8)
        handles.append(Line2D([], [], color=color, linewidth=4, label=label))
    handles.append(Line2D([], [], color=COLORS["rule"], marker="o", markersize=4, label="measured"))
    if predictions is not None:
        handles.append(Line2D([], [], color=COLORS["rule"], linestyle="--", label="model"))
    ax.set_xlabel("batch (arrival order)")
    ax.set_ylabel("time since previous iteration (s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_beside(ax, handles)
    fit_text(ax.figure)
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
        _, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    ax.plot(worker_counts, predicted_s, linestyle="--", marker="s", color=COLORS["model"],
            label="model: max(n/x, y + m), or n + m + y at 0 workers")
    ax.plot(worker_counts, measured_s, marker="o", color=COLORS["fetch"], label="measured")
    if step_s is not None:
        ax.axhline(step_s, color=COLORS["step"], linewidth=1.5, label="step time y (the floor)")
    ax.set_xlabel("num_workers")
    ax.set_ylabel("mean time per batch (s)")
    ax.set_xticks(list(worker_counts))
    ax.set_ylim(bottom=0, top=max(max(measured_s), max(predicted_s)) * 1.15 or math.inf)
    ax.grid(alpha=0.3)
    legend_beside(ax)
    fit_text(ax.figure)
    return ax


def plot_bandwidth(timings: Sequence, ax: Axes | None = None) -> Axes:
    """Host-to-device bandwidth per copy size (:func:`helpers.copy_bandwidth`): pageable,
    pinned, and pinning inside the copy."""
    if ax is None:
        _, ax = plt.subplots(figsize=(12.8, 5.2), layout="constrained")
    sizes = [t.nbytes / 2**20 for t in timings]
    ax.plot(sizes, [t.pageable_gbps for t in timings], marker="o", color=COLORS["fetch"],
            label="pageable: t.to(dev)")
    ax.plot(sizes, [t.pinned_gbps for t in timings], marker="s", color=COLORS["pin"],
            label="pinned: t.to(dev)")
    ax.plot(sizes, [t.pin_then_copy_gbps for t in timings], marker="^", linestyle="--", color=COLORS["model"],
            label="t.pin_memory()\n.to(dev, non_blocking=True)\n(into a cached pinned block)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("copy size (MiB)")
    ax.set_ylabel("host → device (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_beside(ax)
    fit_text(ax.figure)
    return ax


def plot_ratios(ratios: dict[str, float], *, xlabel: str = "speedup (×)",
                reference: dict[str, float] | None = None, ax: Axes | None = None) -> Axes:
    """Horizontal bars of measured ratios (e.g. speedups), one per label, with an optional
    reference value per label (e.g. a model's prediction or a published figure) as a tick."""
    labels = list(ratios)
    if ax is None:
        _, ax = plt.subplots(figsize=(12.8, min(1.4 + 0.5 * len(labels), 7.2)), layout="constrained")
    y = range(len(labels))
    ax.barh(y, [ratios[k] for k in labels], color=COLORS["fetch"], label="measured")
    for i, k in enumerate(labels):
        ax.text(ratios[k], i, f" {ratios[k]:.2f}×", va="center", fontsize=TEXT_PT)
    if reference:
        marks = [(i, reference[k]) for i, k in enumerate(labels) if k in reference]
        ax.scatter([v for _, v in marks], [i for i, _ in marks], marker="|", s=400,
                   color=COLORS["model"], label="reference", zorder=3)
    ax.axvline(1.0, color=COLORS["rule"], linewidth=0.8)
    largest = max([*ratios.values(), *((reference or {}).get(k, 1.0) for k in labels)])
    ax.set_xlim(0, largest * 1.2)       # room for the value written after the longest bar
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    legend_beside(ax)
    fit_text(ax.figure)
    return ax


def show_reference_figure(filename: str, what: str) -> bool:
    """In a cell that skipped its GPU work: show ``images/<filename>``, measured on a GPU by
    ``scripts/make_gpu_figures.py``, captioned with ``what`` it shows — or say plainly that
    no GPU has measured it yet. Returns whether a figure was shown."""
    from IPython.display import Image, Markdown, display

    from ..config import repo_root

    path = repo_root() / "images" / filename
    if not path.exists():
        display(Markdown(f"No reference figure for this yet ({what}): no GPU has been available to this "
                         "project's measurements, so there is no measured picture to show instead of a "
                         "guessed one."))
        return False
    display(Markdown(f"Reference figure, measured on a GPU (`images/{filename}`; the GPU and torch version "
                     f"are in its title, and [docs/figures.md](../docs/figures.md) says what it shows): "
                     f"{what}."))
    display(Image(filename=str(path)))
    return True


def plot_speedup_curves(ratios: Sequence[float], curves: dict[str, Sequence[float]], *,
                        measured: dict[str, float] | None = None, at_ratio: float | None = None,
                        xlabel: str = "step ÷ load per batch", ax: Axes | None = None) -> Axes:
    """Modelled speedup (vs the first curve's stage) over a range of ratios, one line per stage;
    ``measured`` speedups drawn as points at ``at_ratio`` (this run)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(12.8, 6.0), layout="constrained")
    for i, (name, values) in enumerate(curves.items()):
        color = categorical(i)
        ax.plot(ratios, values, color=color, label=f"{name} (model)")
        if measured is not None and at_ratio is not None and name in measured:
            ax.plot([at_ratio], [measured[name]], marker="o", color=color, linestyle="none")
    if at_ratio is not None:
        ax.axvline(at_ratio, color=COLORS["rule"], linestyle="--", linewidth=0.8)
        ax.text(at_ratio, 0.02 * ax.get_ylim()[1], " this run\n (points: measured)", fontsize=TEXT_PT,
                va="bottom")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("speedup vs baseline (×)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_beside(ax)
    fit_text(ax.figure)
    return ax
