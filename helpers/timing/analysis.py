"""Small analyses of recordings that several notebooks use (each unit-tested)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from .timeline import Timeline


def cycle(intervals: Sequence[float], period: int) -> list[float]:
    """The repeating pattern of ``intervals`` with ``period`` positions: the median of each
    position (robust to one late wake-up or pause), sorted. E.g. the blog's 2-worker
    pattern 0.25, 0.75, 0.25, 0.75, ... gives ``[0.25, 0.75]``."""
    if period < 1 or len(intervals) < period:
        raise ValueError(f"need at least {period} intervals for a cycle of {period}, got {len(intervals)}")
    return sorted(statistics.median(intervals[k::period]) for k in range(period))


def median_interval_s(tl: Timeline) -> float:
    """The median time between loop iterations, each epoch's first batch excluded (s).

    The median, not the mean: one garbage-collection pause or late wake-up does not move it."""
    steady = tl.steady_intervals()
    return statistics.median(steady) if steady else math.nan


def time_per_batch_after_startup(tl: Timeline) -> float:
    """Wall time per batch once the workers were up (worker start-up left out) (s)."""
    return (tl.wall_s - tl.worker_startup_s()) / len(tl.batches)


def epoch_first_batch_gaps(tl: Timeline) -> list[float]:
    """Per epoch after the first: from ``iter(loader)`` to the epoch's first batch in hand (s)."""
    return tl.summary()["first_batch_s_per_epoch"][1:]


def shutdown_gaps(tl: Timeline) -> list[float]:
    """Per epoch: the loop's last ``next()``, which finds the epoch over. Without persistent
    workers the DataLoader shuts its workers down inside it, before raising
    ``StopIteration`` (s)."""
    return [e.end - max(b.step_end for b in tl.epoch_batches(e.epoch)) for e in tl.epochs
            if tl.epoch_batches(e.epoch)]


def predicted_fetch_speedup(batch_size: int, request_wait_s: float, item_cpu_s: float,
                            local_per_sample_s: float, local_per_batch_s: float) -> float:
    """The speedup of one request per batch (``__getitems__``) over one per sample, from the
    stated costs plus the measured local cost of fetching a batch each way (s per batch)."""
    per_sample = batch_size * (request_wait_s + item_cpu_s) + local_per_sample_s
    per_batch = request_wait_s + batch_size * item_cpu_s + local_per_batch_s
    return per_sample / per_batch


def settled_intervals(tl: Timeline, settle_s: float = 0.0) -> list[float]:
    """Intervals between loop iterations once every worker of their epoch was up, and
    ``settle_s`` more (s). Under ``spawn`` and ``forkserver`` workers become ready one after
    another, seconds apart; the pattern a lesson reads is the one after that."""
    return [interval for interval, _ in settled_intervals_and_stops(tl, settle_s)]


def settled_intervals_and_stops(tl: Timeline, settle_s: float = 0.0) -> list[tuple[float, float | None]]:
    """:func:`settled_intervals`, each with how long a CPU quota stopped this process's group within
    it (s, summed over the cores; :attr:`BatchRecord.stopped`), or None without a quota."""
    out = []
    for epoch in tl.epochs:
        ready = max(epoch.worker_ready.values(), default=epoch.iter_start) + settle_s
        batches = tl.epoch_batches(epoch.epoch)
        for earlier, later in zip(batches, batches[1:], strict=False):
            if earlier.step_end >= ready:
                stops = (None if earlier.stopped is None or later.stopped is None
                         else later.stopped - earlier.stopped)
                out.append((later.step_end - earlier.step_end, stops))
    return out


def per_batch_s(tl: Timeline, period: int, settle_s: float = 0.0, cycles: int = 2) -> float | None:
    """The time per batch in steady state, robustly: the mean of the repeating cycle of
    ``period`` intervals (:func:`cycle`) once the workers are up (:func:`settled_intervals`).
    None when fewer than ``cycles`` whole cycles were measured."""
    intervals = settled_intervals(tl, settle_s)
    if len(intervals) < cycles * period:
        return None
    return statistics.fmean(cycle(intervals, period))


def stops_per_batch_s(tl: Timeline) -> float | None:
    """How long a CPU quota stopped this process's group per batch of a run once each epoch's first
    batch was in hand (s, summed over the cores: :class:`EpochRecord`'s ``stopped_s`` less its
    start-up's), or None without a quota. For steady-state times per batch: the workers' start-up,
    where a quota stops the group most, is left out of both."""
    stops, after_first = 0.0, 0
    for epoch in tl.epochs:
        if epoch.stopped_s is None or epoch.stopped_in_iter_s is None or epoch.stopped_to_first_s is None:
            return None
        stops += epoch.stopped_s - epoch.stopped_in_iter_s - epoch.stopped_to_first_s
        after_first += max(len(tl.epoch_batches(epoch.epoch)) - 1, 0)
    return stops / after_first if after_first else None


def main_cpu_per_batch_s(tl: Timeline) -> float | None:
    """The main process's CPU per batch (s): the loop's own work, and any thread beside it (a pin or
    prefetch thread, threads building batches); None where :attr:`Timeline.main_cpu_s` was not
    measured."""
    if tl.main_cpu_s is None or not tl.batches:
        return None
    return tl.main_cpu_s / len(tl.batches)
