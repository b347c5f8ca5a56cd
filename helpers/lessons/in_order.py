"""Notebook 09 · in_order and stragglers: head-of-line blocking, what in_order=False does to the
tail and to the order, and why a resume by batch count goes wrong out of order."""

from __future__ import annotations

from collections import Counter

from ..checks import Check, at_least, at_most, clearly_above, holds, near, timing_noise_s
from ..timeline import Timeline


def waiting_after_first_s(tl: Timeline) -> float:
    return sum(b.wait_s for b in tl.batches if b.index > 0)


def longest_wait(tl: Timeline):
    """The batch (after the first) the loop waited longest for."""
    return max(tl.batches[1:], key=lambda b: b.wait_s)


def tail(tl: Timeline) -> dict[str, float]:
    """Median, p95 and p99 of the steady intervals, the waiting after the first batch, the wall."""
    p = tl.interval_percentiles((50, 95, 99))
    return {"p50": p[50], "p95": p[95], "p99": p[99], "waiting": waiting_after_first_s(tl), "wall": tl.wall_s}


def arrival_order(tl: Timeline) -> list[int]:
    """The first sample index of each batch, in the order the loop got them."""
    return [b.indices[0] for b in tl.batches]


def batches_per_worker(tl: Timeline) -> dict[int, int]:
    return dict(sorted(Counter(b.worker for b in tl.batches).items()))


def resume_by_count(arrived: list[int], k: int) -> dict[str, int]:
    """A naive resume after ``k`` batches: skip the sampler's first ``k`` batches and go on.
    Returns how many samples it would train on twice, and how many it would never see."""
    seen = set(arrived[:k])
    resumed = set(range(k, len(arrived)))
    return {"repeated": len(seen & resumed), "skipped": len(set(range(len(arrived))) - seen - resumed)}


def worst_resume(arrived: list[int]) -> tuple[int, dict[str, int]]:
    """The point at which a naive resume by count would repeat the most samples."""
    k = max(range(1, len(arrived)), key=lambda k: resume_by_count(arrived, k)["repeated"])
    return k, resume_by_count(arrived, k)


def checks(runs: dict[bool, Timeline], step_s: float) -> list[Check]:
    """``runs``: in_order -> a recording of the straggler workload."""
    fifo, free = runs[True], runs[False]
    noise = timing_noise_s([b.step_s for tl in runs.values() for b in tl.batches])
    worst = longest_wait(fifo)
    stats = {io: tail(tl) for io, tl in runs.items()}
    out = [
        holds(
            "in order, the loop waits on a straggler while later batches are already built",
            worst.wait_s > 2 * step_s and fifo.blocked_behind(worst) >= 2,
            f"waited {worst.wait_s * 1e3:.0f} ms for batch {worst.index} with {fifo.blocked_behind(worst)} "
            "later batches ready",
        ),
        clearly_above(
            "out of order, the loop waits less in total",
            stats[True]["waiting"],
            stats[False]["waiting"],
            noise=noise * len(fifo.batches) ** 0.5,
            what="in order vs out of order",
        ),
        at_most(
            "out of order, the longest wait is under half the in-order one",
            longest_wait(free).wait_s / worst.wait_s,
            0.5,
            unit="×",
        ),
        at_most(
            "the p99 step interval is at least 2× shorter out of order",
            stats[False]["p99"] / stats[True]["p99"],
            0.5,
            unit="×",
        ),
        near(
            "the median interval is about the same (the tail moves, not the typical step)",
            stats[False]["p50"],
            stats[True]["p50"],
            rel=0.3,
            noise_s=noise,
        ),
    ]
    order = {io: arrival_order(tl) for io, tl in runs.items()}
    moved = sum(1 for position, index in enumerate(order[False]) if index != position)
    out.append(
        holds(
            "out of order, the same samples arrive, each once, in another order",
            sorted(order[False]) == sorted(order[True]) and moved > 0,
            f"{moved} of {len(order[False])} at another position",
        )
    )
    counts = {io: batches_per_worker(tl) for io, tl in runs.items()}
    out.append(
        at_least(
            "out of order, new tasks go to workers with free slots: the workers' shares become uneven",
            max(counts[False].values()) - min(counts[False].values()),
            1,
            unit="",
            what=f"batches per worker out of order {counts[False]}, in order {counts[True]}",
        )
    )
    k, resume = worst_resume(order[False])
    out.append(
        at_least(
            "out of order, a naive resume by batch count would repeat (and skip) samples",
            resume["repeated"],
            1,
            unit="",
            what=f"after {k} batches: {resume['repeated']} repeated, {resume['skipped']} skipped",
        )
    )
    return out
