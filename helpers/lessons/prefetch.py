"""Notebook 03 · prefetch_factor: how far each worker runs ahead, and what it buys with slow samples."""

from __future__ import annotations

import statistics

from ..classroom.checks import Expected
from ..data.datasets import WorkDataset
from ..timing.theory import simulate
from ..timing.timeline import Timeline


def waiting_after_first_s(tl: Timeline) -> float:
    """Seconds the loop waited for data after its first batch (start-up left out)."""
    return sum(b.wait_s for b in tl.batches if b.index > 0)


def predicted_waiting_s(
    dataset: WorkDataset, step_s: float, num_workers: int, prefetch_factor: int, startup_s: float = 0.0
) -> float:
    """The model's waiting after the first batch for a batch-size-1 loader over ``dataset``
    (each batch costs its item's load, stragglers included): :func:`helpers.simulate`."""
    loads = [(dataset.item_wait_s + dataset.item_cpu_s) * dataset._factor(i) for i in range(len(dataset))]
    plan = simulate(
        len(loads), loads, step_s, num_workers, prefetch_factor=prefetch_factor, startup_s=startup_s
    )
    return sum(max(b.ready - a.step_end, 0.0) for a, b in zip(plan, plan[1:], strict=False))


def average_pace(tl: Timeline, num_workers: int) -> dict[str, float]:
    """The workers' average time per batch (mean fetch / workers) beside the loop's step (median)."""
    workers_s = statistics.fmean(b.fetch_s for b in tl.batches) / num_workers
    step_s = statistics.median(b.step_s for b in tl.batches)
    return {"workers_s": workers_s, "step_s": step_s, "ratio": step_s / workers_s}


def checks(
    ahead: dict[int, Timeline],
    bursty: dict[int, Timeline],
    predicted_wait: dict[int, float],
    num_workers: int,
) -> list[Expected]:
    """``ahead``: fast workers and a slow step, per prefetch_factor; ``bursty``: slow samples,
    per prefetch_factor; ``predicted_wait``: the model's waiting for the bursty runs.

    Nothing here is a check. That ``prefetch_factor`` counts batches per worker is PyTorch's
    documented meaning (the notebook's table and vote show each worker's run-ahead); how much
    waiting a deeper queue absorbs, and how many finished batches it holds, follow from the lab's
    sleeps under the documented round-robin dispatch (:func:`helpers.simulate`). The one row
    compares what the deeper queue saved with what the model predicts for this dataset.
    (``ahead`` and ``num_workers`` are the notebook's to show.)"""
    low, high = min(bursty), max(bursty)
    saved = waiting_after_first_s(bursty[low]) - waiting_after_first_s(bursty[high])
    return [Expected(
        f"slow samples: the waiting after the first batch that prefetch_factor={high} saves against {low}",
        saved, predicted_wait[low] - predicted_wait[high],
        note=f"the loop waited {waiting_after_first_s(bursty[low]):.2f} s with {low}, "
             f"{waiting_after_first_s(bursty[high]):.2f} s with {high}")]
