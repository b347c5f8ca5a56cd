"""The step-time model, drawn next to every measurement.

Notation (per batch, in seconds), after a 2020 blog post on choosing ``num_workers``, with one
definition of each quantity used everywhere in the lab:

* ``batch_load_s`` (n): building one batch in a worker (dataset access + ``collate_fn``);
* ``step_s`` (y): the training step;
* ``main_s`` (m): what the main process does per batch **on the loop's path**, besides
  the step and the wait: the part of ``next()`` the loop's own thread spends on a batch once
  the batch is its to take — unpickling it from shared memory when the loop's thread receives
  it, the DataLoader's bookkeeping, taking it from a thread's queue — plus any per-batch
  work the loop adds (a transform, a copy). It cannot overlap the step. Where another thread
  receives the batches, the unpickling is that thread's, not the loop's: the pin thread
  (``pin_memory=True`` where there is an accelerator — ``_pin_memory_loop`` calls
  ``in_queue.get()``, which unpickles) or a prefetch thread that iterates the loader.
  :func:`measured_main_s` measures m this one way for every notebook;
* ``num_workers`` (x).

Synchronous loop (x = 0): every batch costs ``n + m + y``: nothing overlaps. With x
workers, the workers together deliver a batch every ``n/x`` seconds while the loop needs
``y + m`` per batch, so in steady state the time per batch is ``max(n/x, y + m)``: the
slower side sets the pace. The workers keep up once ``x >= n / (y + m)``.

The blog writes ``t = max(m + n/x, y)`` and ``x = n / (y - m)``, putting m on the
workers' side. Measured here (notebook 02), the main process's per-batch work happens in
the loop's thread, after the workers are done with the batch: it lengthens the loop's
cycle, it does not slow the workers, so the lab puts it on the loop's side.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .. import config


def _check(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def step_time(batch_load_s: float, step_s: float, num_workers: int, *, main_s: float = 0.0) -> float:
    """Predicted steady-state time per batch (seconds); see the module docstring."""
    _check(batch_load_s=batch_load_s, step_s=step_s, num_workers=num_workers, main_s=main_s)
    if num_workers == 0:
        return batch_load_s + main_s + step_s
    return max(batch_load_s / num_workers, step_s + main_s)


def first_batch_time(batch_load_s: float, num_workers: int, *, startup_s: float = 0.0,
                     main_s: float = 0.0) -> float:
    """Predicted time from ``iter(loader)`` to the first batch in hand (seconds).

    With workers, the first batch waits for a worker to start (``startup_s``) and then
    for ONE worker to build the whole batch: more workers do not make the first batch
    faster.
    """
    _check(batch_load_s=batch_load_s, num_workers=num_workers, startup_s=startup_s, main_s=main_s)
    if num_workers == 0:
        return batch_load_s + main_s
    return startup_s + batch_load_s + main_s


def recommend_num_workers(batch_load_s: float, step_s: float, *, main_s: float = 0.0,
                          cores: int | None = None) -> int:
    """The sizing rule ``x = ceil(n / (y + m))``: the fewest workers that keep up with the loop.

    Past ``x`` the workers already keep up and more only cost memory and start-up. For
    CPU-bound loading the useful count is also capped by the cores (not applied here:
    the rule is about keeping up; notebook 04 measures the cap). With neither a step nor
    main-process work there is nothing to keep up with: every core is the answer.
    """
    _check(batch_load_s=batch_load_s, step_s=step_s, main_s=main_s)
    if batch_load_s == 0:
        return 0
    if step_s + main_s == 0:
        return cores if cores is not None else config.available_cores()
    # A tiny tolerance so that 0.2 / 0.05 = 4.000000000000001 gives 4, not 5.
    return max(1, math.ceil(batch_load_s / (step_s + main_s) - 1e-9))


@dataclass(frozen=True)
class PlannedBatch:
    """One batch in a predicted schedule (seconds since ``iter(loader)``)."""

    index: int
    worker: int  #: -1 = main process
    fetch_start: float
    fetch_end: float
    ready: float
    step_end: float


def simulate(
    num_batches: int,
    batch_load_s: float | Sequence[float],
    step_s: float,
    num_workers: int,
    *,
    prefetch_factor: int | None = 2,
    startup_s: float = 0.0,
    main_s: float = 0.0,
    serial_s: float = 0.0,
) -> list[PlannedBatch]:
    """The schedule an in-order DataLoader follows under the model, batch by batch.

    Batch ``i`` goes to worker ``i % x`` (round robin). At ``iter()`` the loader hands out
    ``prefetch_factor * x`` batches; afterwards one more each time the loop takes a batch.
    A worker builds its batches one after another, batch ``i`` in ``batch_load_s`` (or
    ``batch_load_s[i]`` when a sequence is given: uneven batches); the loop takes batch
    ``i`` when it is built and the previous step has ended, pays ``main_s``, then steps
    for ``step_s``.

    This reproduces the blog's measured patterns exactly, e.g. 2 workers, 1 s load,
    0.25 s step: intervals 1.25, then 0.25 and 0.75 alternating.

    ``serial_s``: with workers, one thread of the main process handles every batch between the
    workers and the loop, one batch at a time, in order — the pin thread (``pin_memory=True`` on
    an accelerator: it receives each batch from shared memory and copies it into page-locked
    memory) or a prefetch thread that receives the batches (:func:`measured_serial_s`). A batch
    is the loop's to take ``serial_s`` after both it is built and that thread is done with the
    batch before. However many workers there are, batches come no faster than one per
    ``serial_s`` (notebook 11 on a GPU: the pin thread sets the pace of the last stage).
    """
    loads = list(batch_load_s) if isinstance(batch_load_s, Sequence) else [batch_load_s] * num_batches
    if len(loads) != num_batches:
        raise ValueError(f"got {len(loads)} batch loads for {num_batches} batches")
    _check(num_batches=num_batches, step_s=step_s, num_workers=num_workers, startup_s=startup_s,
           main_s=main_s, serial_s=serial_s, **{f"batch_load_s[{i}]": v for i, v in enumerate(loads)})
    plan: list[PlannedBatch] = []
    previous_end = 0.0
    if num_workers == 0:
        for i in range(num_batches):
            start = previous_end
            fetched = start + loads[i]
            previous_end = fetched + main_s + step_s
            plan.append(PlannedBatch(i, -1, start, fetched, fetched + main_s, previous_end))
        return plan
    depth = (prefetch_factor if prefetch_factor is not None else 2) * num_workers
    worker_free = [startup_s] * num_workers
    handed = 0.0  # when the serial thread is done with the batch before
    for i in range(num_batches):
        worker = i % num_workers
        issued = startup_s if i < depth else plan[i - depth].ready
        start = max(issued, worker_free[worker])
        fetched = start + loads[i]
        worker_free[worker] = fetched
        handed = max(fetched, handed) + serial_s
        ready = max(handed, previous_end) + main_s
        previous_end = ready + step_s
        plan.append(PlannedBatch(i, worker, start, fetched, ready, previous_end))
    return plan


def simulate_out_of_order(
    num_batches: int,
    batch_load_s: float | Sequence[float],
    step_s: float,
    num_workers: int,
    *,
    prefetch_factor: int | None = 2,
    startup_s: float = 0.0,
    main_s: float = 0.0,
) -> list[PlannedBatch]:
    """The schedule of ``DataLoader(..., in_order=False)`` under the same model as
    :func:`simulate`, in the order the loop takes the batches (``index``: the sampler's batch).

    As in ``_try_put_index``: a new task goes to the next worker in rotation that holds fewer
    than ``prefetch_factor`` tasks not yet taken by the loop (in order, the rotation ignores
    that count); a worker builds its tasks one after another; the loop takes whichever batch
    is done first, and only then is the next task sent. So a worker stuck on a slow batch is
    skipped while its slots are full, and the others get its share.
    """
    loads = list(batch_load_s) if isinstance(batch_load_s, Sequence) else [batch_load_s] * num_batches
    if len(loads) != num_batches:
        raise ValueError(f"got {len(loads)} batch loads for {num_batches} batches")
    if num_workers < 1:
        raise ValueError(f"in_order=False needs workers, got num_workers={num_workers}")
    _check(num_batches=num_batches, step_s=step_s, startup_s=startup_s, main_s=main_s,
           **{f"batch_load_s[{i}]": v for i, v in enumerate(loads)})
    slots = prefetch_factor if prefetch_factor is not None else 2
    held = [0] * num_workers  # tasks a worker holds that the loop has not taken
    busy_until = [startup_s] * num_workers
    rotation = itertools.cycle(range(num_workers))
    pending: dict[int, tuple[int, float, float]] = {}  # batch -> (worker, start, end)
    sent = 0

    def send(now: float) -> None:
        nonlocal sent
        if sent == num_batches:
            return
        for _ in range(num_workers):
            worker = next(rotation)
            if held[worker] < slots:
                start = max(now, busy_until[worker])
                busy_until[worker] = start + loads[sent]
                held[worker] += 1
                pending[sent] = (worker, start, busy_until[worker])
                sent += 1
                return

    for _ in range(slots * num_workers):
        send(startup_s)
    plan: list[PlannedBatch] = []
    previous_end = 0.0
    while pending:
        index = min(pending, key=lambda i: (pending[i][2], i))  # the first one done
        worker, start, fetched = pending.pop(index)
        ready = max(fetched, previous_end) + main_s
        held[worker] -= 1
        send(ready)
        previous_end = ready + step_s
        plan.append(PlannedBatch(index, worker, start, fetched, ready, previous_end))
    return plan


def simulated_intervals(plan: list[PlannedBatch]) -> list[float]:
    """Time between consecutive loop iterations in a :func:`simulate` schedule."""
    out, previous = [], 0.0
    for batch in plan:
        out.append(batch.step_end - previous)
        previous = batch.step_end
    return out


def as_timeline(plan: list[PlannedBatch], *, num_workers: int | None = None):
    """A :class:`helpers.Timeline` of a simulated schedule: the model drawn and analysed with
    the same tools as a measurement (and the unit tests' stand-in for one). The plan's order is
    the loop's: each batch's ``index`` is its place in it, its ``indices`` the sampler's batch."""
    from .timeline import BatchRecord, EpochRecord, Timeline

    if not plan:
        raise ValueError("an empty schedule has no timeline")
    workers = sorted({b.worker for b in plan})
    previous = 0.0
    batches = []
    seq: dict[int, int] = {}
    for position, b in enumerate(plan):
        batches.append(BatchRecord(epoch=0, index=position, worker=b.worker, fetch_start=b.fetch_start,
                                   fetch_end=b.fetch_end, wait_start=previous, ready=b.ready,
                                   step_end=b.step_end, worker_seq=seq.get(b.worker, 0),
                                   indices=(b.index,), pid=0))
        seq[b.worker] = seq.get(b.worker, 0) + 1
        previous = b.step_end
    x = num_workers if num_workers is not None else (0 if workers == [-1] else len(workers))
    first_fetch = {w: min(b.fetch_start for b in plan if b.worker == w) for w in workers if w >= 0}
    epoch = EpochRecord(epoch=0, iter_start=0.0, iter_end=0.0, first_ready=plan[0].ready,
                        end=plan[-1].step_end, worker_ready=first_fetch)
    return Timeline(batches=batches, epochs=[epoch],
                    config={"num_workers": x, "describe": f"model: num_workers={x}"})


def measured_main_s(tl) -> float:
    """m as the lab measures it (see :func:`main_shares`): the median over the batches."""
    shares = main_shares(tl)
    if not shares:
        raise ValueError("a recording with no batches has no m")
    return statistics.median(main for _, main in shares)


def measured_serial_s(tl) -> float:
    """The work per batch of the one thread between the workers and the loop (``serial_s`` of
    :func:`simulate`; seconds, the median over the batches): with ``pin_memory=True`` on an
    accelerator, the pin thread's receiving (rebuilding the batch from shared memory) and
    pinning; behind a prefetch thread that receives the batches (``record(wrap=...)`` on a CPU),
    its receiving. 0 when the loop's own thread receives them (that is m) or there are no workers."""
    from .hooks import MAIN_PROCESS

    # a prefetch thread's spans (host work, its copies); not the loop's own, nor the device's steps
    threaded = {(s.epoch, s.batch) for s in tl.spans
                if "loop thread" not in s.row and not s.row.startswith("device")}
    per_batch = []
    for b in tl.batches:
        received = (b.received_end - b.received_start
                    if b.received_start is not None and b.received_end is not None else 0.0)
        if b.worker == MAIN_PROCESS:
            per_batch.append(0.0)
        elif b.pin_start is not None and b.pin_end is not None:
            per_batch.append(received + b.pin_end - b.pin_start)
        elif (b.epoch, b.index) in threaded:
            per_batch.append(received)
        else:
            per_batch.append(0.0)
    if not per_batch:
        raise ValueError("a recording with no batches has no serial stage")
    return statistics.median(per_batch)


def main_shares(tl) -> list[tuple[float, float]]:
    """Per batch of a recording, the loop's wait split in two (seconds): how long it waited for the
    batch to become its to take (``that moment − wait_start``, 0 if it was there already: the
    wait for data), and the time its thread then spent in ``next()`` on it — ``ready`` minus the
    later of ``wait_start`` and that moment: m, the main process's own share, as the lab
    measures it in every notebook.

    The moment is: ``fetch_end`` when the main process fetched the batch itself (0 workers);
    ``received_start`` when the loop's thread unpickles it (workers, no pin thread); ``pin_end``
    when the pin thread unpickled and pinned it (``pin_memory=True`` with an accelerator); and
    behind a prefetch thread (``record(wrap=...)``), the end of that thread's timed work on it,
    or when the prefetch thread had received it where its work is timed on the GPU. A transform
    the loop's own thread runs (``BatchTransform``) stays in m. A batch received while the
    loop waited for an earlier one (in order) costs the loop only its bookkeeping here: its
    unpickling happened during that wait.
    """
    from .hooks import MAIN_PROCESS

    host_spans = {(s.epoch, s.batch): s.end for s in tl.spans
                  if "loop thread" not in s.row and s.row != "copy stream"}
    threaded = {(s.epoch, s.batch) for s in tl.spans if "loop thread" not in s.row}
    shares: list[tuple[float, float]] = []
    for b in tl.batches:
        key = (b.epoch, b.index)
        if b.worker == MAIN_PROCESS:
            available = b.fetch_end
        elif b.pin_end is not None:
            available = b.pin_end
        elif key in host_spans:
            available = host_spans[key]
        elif key in threaded and b.received_end is not None:
            available = b.received_end
        elif b.received_start is not None:
            available = b.received_start
        else:
            available = b.wait_start
        shares.append((max(available - b.wait_start, 0.0), max(b.ready - max(b.wait_start, available), 0.0)))
    return shares
