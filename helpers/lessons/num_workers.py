"""Notebook 02 · how many workers: measure n, y and m, size, verify; and the collector's pauses."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..classroom.checks import Check, at_least, holds, premise_failed
from ..timing.analysis import per_batch_s
from ..timing.pauses import CollectionTimes
from ..timing.theory import measured_main_s, recommend_num_workers
from ..timing.timeline import Timeline


@dataclass(frozen=True)
class Calibration:
    """What one calibration run measured, per batch, in seconds."""

    n: float  #: building a batch in a worker (median fetch)
    y: float  #: the step (median)
    #: the loop thread's own work per batch (here: unpickling it + the DataLoader's bookkeeping),
    #: measured as everywhere in the lab: :func:`helpers.theory.measured_main_s`
    m: float
    handover: float  #: worker done → batch in the loop's hands, while the loop waited (latency)
    in_worker: float  #: fetch done → the worker's queue thread sent it
    in_pipe: float  #: sent → the main process starts unpickling
    unpickle: float  #: rebuilding its tensors from shared memory (in the loop's thread)
    iterator: float  #: unpickled → in the loop's hands (the DataLoader's bookkeeping, loop's thread)

    @property
    def recommended(self) -> int:
        return recommend_num_workers(self.n, self.y, main_s=self.m)


def calibrate(tl: Timeline) -> Calibration:
    """n, y and m from a recording (1 worker is best: each fetch runs alone). m is the loop's own
    share of each batch (:func:`helpers.theory.measured_main_s`); the hand-over and its parts are
    read off batches the loop was already waiting for: the worker's send and the pipe are not m,
    they overlap the step once the workers are ahead."""
    waited = [b for b in tl.batches if b.wait_start <= b.fetch_end and b.sent is not None]
    if not waited:
        raise ValueError("no batch arrived while the loop waited: calibrate with fewer workers or a "
                         "longer load")

    def med(values):
        return statistics.median(values)

    return Calibration(
        n=med(b.fetch_s for b in tl.batches), y=med(b.step_s for b in tl.batches),
        m=measured_main_s(tl),
        handover=med(b.ready - b.fetch_end for b in waited),
        in_worker=med(b.sent - b.fetch_end for b in waited),
        in_pipe=med(b.received_start - b.sent for b in waited),
        unpickle=med(b.receive_s for b in waited),
        iterator=med(b.ready - b.received_end for b in waited))


def checks(calibration: Calibration, verify: dict[int, Timeline],
           collections: CollectionTimes) -> list[Check]:
    """The collector's pauses. (The sizing rule against runs with the recommended count and one fewer
    is the model's arithmetic on this workload's sleeps: the notebook's table shows it beside the
    measured times per batch, and ``calibration`` and ``verify`` are not judged here.)"""
    # CPU times of the collections (helpers/timing/pauses.py): on a busy machine the wall clock also
    # counts the time other processes held the core, which is not the collector's doing.
    before, after = collections.alone_cpu_median_s, collections.after_start_cpu_s
    out = [at_least("gc.freeze() makes a full collection at least 5× shorter",
                    before / max(collections.frozen_cpu_median_s, 1e-4), 5.0, unit="×",
                    what="CPU time without ÷ with (0.1 ms floor)", id="02.gc.freeze_shortens_collections")]
    claim = "the first full collection after forking workers takes more CPU time than those before the fork"
    if collections.start_method != "fork":
        out.append(premise_failed(claim, f"start method {collections.start_method}",
                                  "only forked workers share this process's pages",
                                  id="02.gc.slower_after_fork"))
    else:
        spread = max(collections.alone_cpu_s) - min(collections.alone_cpu_s)
        measured = (f"{after * 1e3:.0f} ms vs {before * 1e3:.0f} ms before, CPU time "
                    f"(spread {spread * 1e3:.0f} ms)")
        if after <= before or after >= before + max(2 * spread, 0.005):  # not slower, or clearly slower
            out.append(holds(claim, after > before, measured, id="02.gc.slower_after_fork",
                             inputs=(after, before)))
        else:
            out.append(premise_failed(claim, measured, "the difference is within the spread of the "
                                                       "collections before the fork",
                                      id="02.gc.slower_after_fork"))
    return out


def time_per_batch(runs: dict[int, Timeline], batch_load_s: float) -> dict[int, float | None]:
    """Per worker count, the steady time per batch: the mean of the repeating cycle of intervals
    (one position per worker) once the workers are up; None when too few batches remained."""
    return {x: per_batch_s(tl, max(x, 1), settle_s=batch_load_s) for x, tl in runs.items()}


def first_batch_taken(loader):
    """``iter(loader)`` with its first batch taken: its workers are up and have worked."""
    iterator = iter(loader)
    next(iterator)
    return iterator
