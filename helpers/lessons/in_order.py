"""Notebook 09 · in_order and stragglers: head-of-line blocking, what in_order=False does to the
tail and to the order, and why a resume by batch count goes wrong out of order."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable

from ..classroom.checks import Check, holds, premise_failed
from ..timing.timeline import Timeline


def item_loads_s(dataset) -> list[float]:
    """Each sample's modelled cost in seconds (a :class:`helpers.WorkDataset`: wait + CPU, the
    stragglers' factor included)."""
    base = dataset.item_wait_s + dataset.item_cpu_s
    return [base * (dataset.slow_factor if dataset.is_slow(i) else 1.0) for i in range(len(dataset))]


def round_robin_load_s(dataset, num_workers: int) -> list[float]:
    """Each worker's own load in seconds when batches of one sample go to the workers in strict
    rotation, as an in-order loader sends them (sample ``i`` to worker ``i % num_workers``)."""
    loads = item_loads_s(dataset)
    return [sum(loads[w::num_workers]) for w in range(num_workers)]


def model_waiting_s(dataset, num_workers: int, step_s: float, prefetch_factor: int) -> float:
    """The model's waiting after the first batch (seconds) for ``dataset`` in batches of one, in
    order (:func:`helpers.simulate`)."""
    from ..timing.theory import as_timeline, simulate

    loads = item_loads_s(dataset)
    plan = simulate(len(loads), loads, step_s, num_workers, prefetch_factor=prefetch_factor)
    return waiting_after_first_s(as_timeline(plan, num_workers=num_workers))


def waiting_after_first_s(tl: Timeline) -> float:
    return sum(b.wait_s for b in tl.batches if b.index > 0)


def after_startup(tl: Timeline) -> list:
    """The batches the loop asked for once every worker had finished its first fetch of the epoch:
    the workers' start-up left out (notebook 05's subject). Until every worker is up the loop waits
    on whichever one is; inside a CPU quota the group is stopped most while its workers start (here,
    inside 1 CPU: 0.3–0.6 s before the first batch, and the loop then waited 54–58 ms for batches
    that one worker built alone): a tail of start-up, not of the stragglers."""
    out = []
    for epoch in tl.epochs:
        mine = tl.epoch_batches(epoch.epoch)
        first_done: dict[int, float] = {}
        for b in mine:
            first_done[b.worker] = min(first_done.get(b.worker, math.inf), b.fetch_end)
        up = max(first_done.values(), default=-math.inf)
        out.extend(b for b in mine if b.wait_start >= up)
    return out


def unpaused_s(tl: Timeline, start: float, end: float) -> float:
    """``end - start`` less the main process's garbage-collection pauses within it (s): time the
    loop's own process stopped is not the data's. Under spawn, in the notebook's kernel, a full
    collection of 103–124 ms fell inside one wait of the out-of-order run, 3 runs in 3, and that wait
    read as long as the in-order straggler's (0.84× and 0.90× against at most 0.5×)."""
    return (end - start) - tl.gc_pause_s(start, end)


def data_wait_s(tl: Timeline, batch) -> float:
    """How long the loop waited for ``batch``, less its own garbage-collection pauses (:func:`unpaused_s`)."""
    return unpaused_s(tl, batch.wait_start, batch.ready)


def _percentiles(values: list[float], percents: tuple[int, ...]) -> list[float]:
    """As :meth:`Timeline.interval_percentiles` reads them (inclusive quantiles; nan: none)."""
    ordered = sorted(values)
    if not ordered:
        return [math.nan] * len(percents)
    if len(ordered) == 1:
        return [ordered[0]] * len(percents)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return [cuts[p - 1] for p in percents]


def longest_wait(tl: Timeline):
    """The batch the loop waited longest for once every worker was up (:func:`after_startup`), its
    own garbage-collection pauses left out (:func:`data_wait_s`)."""
    settled = after_startup(tl) or tl.batches[1:]
    return max(settled, key=lambda b: data_wait_s(tl, b))


def tail(tl: Timeline) -> dict[str, float]:
    """Once every worker was up (:func:`after_startup`): the median, p95 and p99 of the loop's
    intervals and its waiting, each less the main process's garbage-collection pauses within it
    (:func:`unpaused_s`); the wall (the whole run); how many intervals the percentiles read."""
    settled = after_startup(tl)
    intervals = []
    for epoch in tl.epochs:
        ends = [b.step_end for b in settled if b.epoch == epoch.epoch]
        intervals.extend(unpaused_s(tl, a, b) for a, b in zip(ends, ends[1:], strict=False))
    p = dict(zip((50, 95, 99), _percentiles(intervals, (50, 95, 99)), strict=True))
    return {"p50": p[50], "p95": p[95], "p99": p[99], "waiting": sum(data_wait_s(tl, b) for b in settled),
            "wall": tl.wall_s, "intervals": len(intervals)}


def p99_ratio(runs: dict[bool, Timeline]) -> float:
    """In order's p99 interval over out of order's (:func:`tail`): how many times lower the tail is."""
    return tail(runs[True])["p99"] / tail(runs[False])["p99"]


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


def stragglers(tl: Timeline, factor: float = 3.0, slow: Callable[[int], bool] | None = None) -> list:
    """The batches whose fetch took more than ``factor`` × the median fetch; with ``slow`` (the
    dataset's ``is_slow``), only those that hold an item the dataset slows. Starting workers inside a
    CPU quota stretches the first ordinary fetches too (63–79 ms against ~20 inside 0.5 CPU), with
    little started beside them."""
    typical = statistics.median(b.fetch_s for b in tl.batches)
    long_ = [b for b in tl.batches if b.fetch_s > factor * typical]
    return long_ if slow is None else [b for b in long_ if any(slow(i) for i in b.indices or ())]


def started_beside_stragglers(tl: Timeline, slow: Callable[[int], bool] | None = None) -> list[int]:
    """For each straggler (:func:`stragglers`), how many batches the other workers started while it
    was being built."""
    return [sum(1 for b in tl.batches
                if b.worker != late.worker and late.fetch_start <= b.fetch_start < late.fetch_end)
            for late in stragglers(tl, slow=slow)]


def takeover_check(fifo: Timeline, free: Timeline, slow: Callable[[int], bool] | None = None) -> Check:
    """Out of order, a worker stuck on a straggler is skipped (its prefetch slots are full) and the
    others get its tasks, so more batches start beside a straggler than in order, where the loop
    stops sending tasks once it waits for the straggler's batch. ``slow``: the dataset's
    ``is_slow``, to count only the stragglers it planted (:func:`stragglers`)."""
    claim = ("out of order, the other workers take over a stuck worker's tasks: more batches start "
             "beside a straggler than in order")
    beside = {io: started_beside_stragglers(tl, slow) for io, tl in ((True, fifo), (False, free))}
    measured = f"beside each straggler: {beside[False]} out of order, {beside[True]} in order"
    if slow is not None:
        # Inside half a CPU (make quota QUOTA=0.5) the stragglers can read [0, 0, 1, 1, 18, 16]: the
        # first fetches of ordinary items, stretched past 3× the median while the workers started
        # inside the quota
        left_out = sum(len(stragglers(tl)) - len(stragglers(tl, slow=slow)) for tl in (fifo, free))
        if left_out:
            plural = "es" if left_out > 1 else ""
            measured += f" ({left_out} slow fetch{plural} of items the dataset does not slow left out)"
    if not beside[True] or not beside[False]:
        return premise_failed(claim, measured, "a run without a straggler (no fetch over 3× the median)",
                              id="09.out_of_order.others_take_over")
    # Counts move by one batch per other worker at the window's edges: that is the margin.
    margin = max(len(free.workers) - 1, 1)
    return holds(claim, statistics.median(beside[False]) > statistics.median(beside[True]) + margin,
                 f"{measured} (median: more by over {margin})", id="09.out_of_order.others_take_over")


def checks(runs: dict[bool, Timeline], step_s: float,
           slow: Callable[[int], bool] | None = None) -> list[Check]:
    """``runs``: in_order -> a recording of the straggler workload; ``slow``: the dataset's ``is_slow``
    (:func:`takeover_check`).

    One check: out of order, other workers take over a stuck worker's tasks, which is how PyTorch's
    dispatch happens to be written (``_try_put_index``), not a documented promise. The rest cannot come
    out otherwise and is shown by the notebook, not judged: in order the loop waits on a straggler
    while later batches are built (in-order delivery is documented), and out of order the waiting, the
    longest wait, the p99 and the median interval follow from the lab's planted stragglers and its
    sleeping step (``step_s``) once the order is free, as does a straggler being overtaken."""
    return [takeover_check(runs[True], runs[False], slow)]
