"""Slow batches the queue does not hide (notebooks 03, 09): ``in_order=False`` when they land on one
worker, a second worker for one that gets them all, a deeper ``prefetch_factor`` when they are spread
or come in a burst."""

from __future__ import annotations

import math
import statistics

from ...settings import HAS_IN_ORDER
from ...timeline import BatchRecord, Timeline
from ..advice import Recommendation, ms
from ..thresholds import CONCENTRATED, SPREAD
from .context import Context
from .workers import shard_caveat


def slow_fetches(tl: Timeline) -> tuple[float, float, dict[int, int]]:
    """(median, 90th percentile of the fetch times, slow fetches per worker): a fetch is slow
    when it took at least ``SPREAD`` times the median."""
    fetches = sorted(b.fetch_s for b in tl.batches)
    median = statistics.median(fetches)
    p90 = fetches[int(0.9 * (len(fetches) - 1))]
    per_worker: dict[int, int] = {}
    for b in tl.batches:
        if median > 0 and b.fetch_s >= SPREAD * median:
            per_worker[b.worker] = per_worker.get(b.worker, 0) + 1
    return median, p90, per_worker


def slowest_worker_mean(tl: Timeline) -> float:
    """The longest mean fetch time of one process's batches."""
    per: dict[int, list[float]] = {}
    for b in tl.batches:
        per.setdefault(b.worker, []).append(b.fetch_s)
    return max((statistics.fmean(v) for v in per.values()), default=0.0)


def longest_burst(tl: Timeline, turn_s: float) -> tuple[float, int]:
    """How far one worker fell behind its turn at most, over a run of consecutive fetches (s), and
    which worker: each fetch adds what it took beyond ``turn_s`` (the time between the loop's visits
    to that worker) and a fast fetch pays it back, never below zero. Fetches each within the queue's
    lead, and a mean within the turn, can still add up, in a burst, past the lead."""
    worst, who = 0.0, -1
    per: dict[tuple[int, int], list[BatchRecord]] = {}
    for b in tl.batches:
        per.setdefault((b.epoch, b.worker), []).append(b)
    for (_, worker), batches in per.items():
        behind = 0.0
        for b in sorted(batches, key=lambda x: x.fetch_start):
            behind = max(0.0, behind + b.fetch_s - turn_s)
            if behind > worst:
                worst, who = behind, worker
    return worst, who


def slow_batches(c: Context) -> Recommendation | None:
    """The loop waits although the workers keep up on average: slow fetches outlast the lead the queue
    gives them (a batch's index is sent workers × prefetch_factor places before the loop asks for it:
    ``_process_data`` → ``_try_put_index``), or a worker falls behind its turn, or one worker's fetches
    come in a burst."""
    tl, loader, workers = c.d.timeline, c.loader, c.workers
    if not (c.input_bound and workers > 0 and len(tl.batches) >= 10 and not c.main_bound):
        return None
    loop_s, n = c.loop_s, c.n
    median, p90, slow = slow_fetches(tl)
    depth = loader.prefetch_factor or 2
    outlasts = p90 > workers * depth * loop_s
    behind = slowest_worker_mean(tl) > workers * loop_s
    if median > 0 and p90 / median >= SPREAD and slow and (outlasts or behind):
        worker, count = max(slow.items(), key=lambda kv: kv[1])
        total = sum(slow.values())
        spread = f"fetch times vary: 90th percentile {ms(p90)}, median {ms(median)}"
        in_order = HAS_IN_ORDER and getattr(loader, "in_order", True)
        if workers >= 2 and count >= CONCENTRATED * total and in_order:
            return Recommendation(
                "in_order", "in_order=False: let the other workers' batches overtake the slow ones "
                "(costs a fixed order: notebooks 09, 15)",
                f"{spread}; {count} of the {total} slow batches came from worker {worker}: in order the "
                "loop waits behind each, and a deeper prefetch cannot help a worker that gets every "
                "slow batch", {"in_order": False}, max(n / workers, loop_s))
        if workers == 1:
            return Recommendation(
                "num_workers", "num_workers=2 (now 1): a second worker builds the next batch while the "
                "first is on a slow one" + shard_caveat(loader, 2),
                f"{spread}; one worker gets every slow batch", {"num_workers": 2}, max(n / 2, loop_s))
        if outlasts:
            # deep enough that the lead covers the 90th percentile (a worker behind on average is not
            # helped by a deeper queue: it is capacity, not order)
            deeper = math.ceil(p90 / (workers * loop_s))
            return Recommendation(
                "prefetch_factor", f"prefetch_factor={deeper} (now {loader.prefetch_factor}): start the "
                "slow fetches earlier", f"{spread}, spread over {len(slow)} workers; on average the "
                f"workers keep up ({workers} ≥ the rule's {c.needed})",
                {"prefetch_factor": deeper}, max(n / workers, loop_s))
        return None
    if behind:
        return None
    # A burst: one worker's fetches, each within the lead and on average within its turn, fall behind
    # together past the lead (a run of slow files, a cache that cools). A worker's own batches queued
    # ahead of the one it fetches give prefetch_factor − 1 turns of slack (2 workers, a 20 ms turn,
    # four 38 ms fetches 72 ms behind: the loop waits 52 ms with 2, 12 with 4, none with 1 + ⌈72/20⌉).
    turn = workers * loop_s
    burst, worker = longest_burst(tl, turn)
    lead = (depth - 1) * turn
    if burst <= lead:
        return None
    deeper = 1 + math.ceil(burst / turn)
    return Recommendation(
        "prefetch_factor", f"prefetch_factor={deeper} (now {loader.prefetch_factor}): a lead that covers "
        "the burst (notebook 03)",
        f"worker {worker}'s fetches came in a burst: each within the queue's lead of {ms(lead)} and on "
        f"average within its turn of {ms(turn)}, yet together {ms(burst)} behind it",
        {"prefetch_factor": deeper}, max(n / workers, loop_s))
