"""Notebook 01 · the baseline loop: what it measures, read and checked."""

from __future__ import annotations

import statistics

from ..classroom.checks import Check, Expected, margin_s, timing_noise_s
from ..timing.analysis import cycle, per_batch_s, settled_intervals
from ..timing.theory import step_time
from ..timing.timeline import Timeline


def noise_s(runs: dict[int, Timeline]) -> float:
    """Timing noise of this run: the spread of the modelled step's durations (a fixed sleep)."""
    return timing_noise_s([b.step_s for tl in runs.values() for b in tl.batches])


def time_per_batch(runs: dict[int, Timeline], batch_load_s: float) -> dict[int, float | None]:
    """Per worker count, the steady time per batch (None: too few batches after start-up)."""
    return {x: per_batch_s(tl, max(x, 1), settle_s=batch_load_s) for x, tl in runs.items()}


def two_worker_reading(tl: Timeline) -> dict[str, float]:
    """The blog's figure, read off a 2-worker run: while the loop steps on batch k, a worker
    builds batch k + 2 (the most overlapping pair is reported); and the steady cycle."""
    by_index = {b.index: b for b in tl.batches}
    def overlap(stepping, building):
        return min(stepping.step_end, building.fetch_end) - max(stepping.ready, building.fetch_start)

    stepping, building = max(((b, by_index[b.index + 2]) for b in tl.batches if b.index + 2 in by_index),
                             key=lambda pair: overlap(*pair))
    short, long_ = cycle(settled_intervals(tl), 2)
    return {"stepping": stepping.index, "stepping_from": stepping.ready, "stepping_to": stepping.step_end,
            "building": building.index, "building_worker": building.worker,
            "building_from": building.fetch_start, "building_to": building.fetch_end,
            "overlap_s": overlap(stepping, building),
            "short_s": short, "long_s": long_}


def checks(runs: dict[int, Timeline], item_wait_s: float, step_s: float) -> list[Check | Expected]:
    """The lesson's claims against runs of 0..4 workers (batch size 1, so n = item_wait_s). Under a
    CPU quota each run also holds the quota's stops (:attr:`EpochRecord.stopped_to_first_s`).

    No check: the step-time model's numbers for this workload — max(n/x, y), the 2-worker pattern y
    and n − y — are sleep arithmetic here, and the first batch with the most workers beside 1
    worker's is start-up (:func:`first_batch_row`): :class:`Expected` rows beside the measurement."""
    n, y = item_wait_s, step_s
    noise = noise_s(runs)
    measured = time_per_batch(runs, n)
    out: list[Check | Expected] = [row for row in [first_batch_row(runs)] if row is not None]
    for x in sorted(runs):
        rule = "n + y" if x == 0 else "max(n/x, y)"
        value = measured[x]
        out.append(Expected(f"{x} worker{'' if x == 1 else 's'}: the time per batch, {rule}",
                            float("nan") if value is None else value, step_time(n, y, x),
                            note="" if value is not None else "too few batches after the workers were up"))
    if 2 in runs and len(settled_intervals(runs[2])) >= 4:
        reading = two_worker_reading(runs[2])
        lag = pair_lag_s(runs[2], back_to_back_s=y / 2)
        # Worker 1 can build its batches `lag` after worker 0's for the whole run (each fetches back to
        # back, so a late start or a late first fetch keeps its lag): the pair's phase, not the step,
        # then sets the short interval (forkserver workers coming up apart on 2 busy cores).
        note = (f"the two workers built their batches {lag:.3f} s apart (median over the pairs): that lag, "
                "not the step, separates each pair" if lag is not None and lag > y + margin_s(y, 0.3, noise)
                else "")
        out.append(Expected("2 workers: the short interval, the step alone", reading["short_s"], y,
                            note=note))
        out.append(Expected("2 workers: the long interval, n − y (waiting for the next pair)",
                            reading["long_s"], n - y, note=note))
    return out


def first_batch_row(runs: dict[int, Timeline]) -> Expected | None:
    """The first batch after ``iter()`` with the most workers, beside 1 worker's: a row, not a check.
    A batch here is one item, which one worker builds whole however many there are, so only the
    workers' start-up can set the two apart (under fork tens of milliseconds, under spawn seconds)."""
    counts = [x for x, tl in runs.items() if x and tl.batches and tl.epochs[0].first_batch_s is not None]
    most = max(counts, default=0)
    if 1 not in counts or most < 2:
        return None
    one, many = runs[1].epochs[0], runs[most].epochs[0]
    return Expected(f"{most} workers: the first batch after iter(), beside 1 worker's (one item, built "
                    "whole by one worker)", many.first_batch_s, one.first_batch_s, unit="s",
                    note="the workers' start-up sets them apart")


def _could_start_s(tl: Timeline) -> float:
    """From ``iter()`` to the moment the first batch could start: ``iter()`` has returned and the
    batch's worker is up (s)."""
    first, epoch = tl.batches[0], tl.epochs[0]
    return max(epoch.iter_end, epoch.worker_ready.get(first.worker, epoch.iter_start)) - epoch.iter_start


def pair_lag_s(tl: Timeline, back_to_back_s: float) -> float | None:
    """In a 2-worker run, how far apart the two workers build their batches (s): the median lag from
    worker 0's batch to worker 1's next, or from worker 1's to worker 0's next, whichever is shorter
    (worker 1 a whole fetch behind still builds its batch beside worker 0's next: in phase). Only
    batches fetched back to back (begun within ``back_to_back_s`` of the worker's previous fetch's
    end) count: workers that wait for their next index are paced by the loop, and their lag is its
    step, not a phase. None: no such pair."""
    previous_end: dict[tuple[int, int], float] = {}
    back_to_back: set[tuple[int, int]] = set()
    for b in tl.batches:
        end = previous_end.get((b.epoch, b.worker))
        if end is not None and b.fetch_start - end <= back_to_back_s:
            back_to_back.add((b.epoch, b.index))
        previous_end[(b.epoch, b.worker)] = b.fetch_end
    by_index = {(b.epoch, b.index): b for b in tl.batches}
    lags: dict[int, list[float]] = {0: [], 1: []}  # by the worker of the earlier batch
    for b in tl.batches:
        before = by_index.get((b.epoch, b.index - 1))
        if (before is not None and {before.worker, b.worker} == {0, 1}
                and (b.epoch, b.index) in back_to_back):
            lags[before.worker].append(b.fetch_end - before.fetch_end)
    medians = [statistics.median(v) for v in lags.values() if v]
    return min(medians) if medians else None


def first_batch_after_start_s(tl: Timeline) -> float:
    """From the moment the first batch could start — ``iter()`` has started every worker and
    sent the first indices, and the batch's worker is up — to the batch in the loop's hands (s)."""
    return tl.epochs[0].first_batch_s - _could_start_s(tl)
