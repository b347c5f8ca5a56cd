"""Notebook 03 · prefetch_factor: how far each worker runs ahead, and what it buys with slow samples."""

from __future__ import annotations

import statistics

from ..classroom.checks import Check, exceeds, holds, timing_noise_s
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
) -> list[Check]:
    """``ahead``: fast workers and a slow step, per prefetch_factor; ``bursty``: slow samples,
    per prefetch_factor; ``predicted_wait``: the model's waiting for the bursty runs."""
    out = []
    for pf, tl in sorted(ahead.items()):
        most = max(tl.runahead().values())
        out.append(
            holds(
                f"prefetch_factor={pf} counts batches per worker: each fast worker ran exactly {pf} "
                "ahead of the loop",
                most == pf,
                f"most run ahead: {tl.runahead()} (per worker)",
            )
        )
    low, high = min(bursty), max(bursty)
    pace = average_pace(bursty[low], num_workers)
    out.append(
        holds(
            "slow samples, yet on average the workers are faster than the loop",
            pace["workers_s"] < pace["step_s"],
            f"workers {pace['workers_s'] * 1e3:.0f} ms per batch, step {pace['step_s'] * 1e3:.0f} ms "
            f"({pace['ratio']:.2f}×)",
        )
    )
    noise = timing_noise_s([b.step_s for tl in bursty.values() for b in tl.batches])
    out.append(
        exceeds(
            f"deeper prefetch absorbs slow samples: the loop waits less with {high} than with {low}",
            waiting_after_first_s(bursty[low]),
            waiting_after_first_s(bursty[high]),
            gap=predicted_wait[low] - predicted_wait[high],
            noise=noise * len(bursty[low].batches) ** 0.5,
            what="waiting after the first batch",
        )
    )
    out.append(
        holds(
            f"the price: prefetch_factor={high} held more finished batches at once than {low}",
            bursty[high].peak_buffered() > bursty[low].peak_buffered(),
            f"{bursty[high].peak_buffered()} vs {bursty[low].peak_buffered()} batches",
        )
    )
    return out
