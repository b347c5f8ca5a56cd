"""The step-time model, drawn next to every measurement.

Notation (per batch, in seconds), after the blog post in SOURCES.md section 2:

* ``load_s`` (n): the cost of building one batch in a worker (dataset access + collate);
* ``main_s`` (m): loading work the main process still does per batch;
* ``step_s`` (y): the training step;
* ``transfer_s`` (c): what the loop pays to take a finished batch in hand
  (receiving it from shared memory, pinning);
* ``num_workers`` (x).

Synchronous loop (x = 0): every batch costs ``m + n + y``: nothing overlaps.
With x workers, the workers together deliver a batch every ``m + n/x`` seconds
while the loop needs ``y + c`` per batch, so in steady state the time per batch is
``max(m + n/x, y + c)`` - the slower side sets the pace. The workers keep up once
``x >= n / (y - m)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import config


def _check(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def step_time(
    load_s: float,
    step_s: float,
    num_workers: int,
    *,
    main_s: float = 0.0,
    transfer_s: float = 0.0,
) -> float:
    """Predicted steady-state time per batch (seconds); see the module docstring."""
    _check(load_s=load_s, step_s=step_s, num_workers=num_workers, main_s=main_s,
           transfer_s=transfer_s)
    if num_workers == 0:
        return main_s + load_s + step_s
    return max(main_s + load_s / num_workers, step_s + transfer_s)


def first_batch_time(
    load_s: float,
    num_workers: int,
    *,
    startup_s: float = 0.0,
    main_s: float = 0.0,
) -> float:
    """Predicted time from ``iter(loader)`` to the first batch in hand (seconds).

    With workers, the first batch waits for a worker to start (``startup_s``) and
    then for ONE worker to build the whole batch: more workers do not make the
    first batch faster.
    """
    _check(load_s=load_s, num_workers=num_workers, startup_s=startup_s, main_s=main_s)
    if num_workers == 0:
        return main_s + load_s
    return startup_s + main_s + load_s


def recommend_num_workers(
    load_s: float,
    step_s: float,
    *,
    main_s: float = 0.0,
    cores: int | None = None,
) -> int:
    """The blog's rule: ``x = ceil(n / (y - m))`` when ``y > m``, else the core count.

    Past ``x`` the workers already keep up and more only cost memory and start-up.
    For CPU-bound loading the useful count is also capped by the cores (not applied
    here: the rule is about latency; notebook 02 measures the cap).
    """
    _check(load_s=load_s, step_s=step_s, main_s=main_s)
    if load_s == 0:
        return 0
    if step_s <= main_s:
        return cores if cores is not None else config.available_cores()
    # A tiny tolerance so that 0.2 / 0.05 = 4.000000000000001 gives 4, not 5.
    return max(1, math.ceil(load_s / (step_s - main_s) - 1e-9))


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
    load_s: float,
    step_s: float,
    num_workers: int,
    *,
    prefetch_factor: int | None = 2,
    startup_s: float = 0.0,
    transfer_s: float = 0.0,
) -> list[PlannedBatch]:
    """The schedule an in-order DataLoader follows under the model, batch by batch.

    Batch ``i`` goes to worker ``i % x`` (round robin). At ``iter()`` the loader
    hands out ``prefetch_factor * x`` batches; afterwards one more each time the loop
    takes a batch. A worker builds its batches one after another, each in
    ``load_s``; the loop takes batch ``i`` when it is built and the previous step
    has ended, pays ``transfer_s``, then steps for ``step_s``.

    This reproduces the blog's measured patterns exactly, e.g. 2 workers, 1 s load,
    0.25 s step: intervals 1.25, then 0.25 and 0.75 alternating.
    """
    _check(num_batches=num_batches, load_s=load_s, step_s=step_s, num_workers=num_workers,
           startup_s=startup_s, transfer_s=transfer_s)
    plan: list[PlannedBatch] = []
    previous_end = 0.0
    if num_workers == 0:
        for i in range(num_batches):
            start = previous_end
            fetched = start + load_s
            previous_end = fetched + step_s
            plan.append(PlannedBatch(i, -1, start, fetched, fetched, previous_end))
        return plan
    depth = (prefetch_factor if prefetch_factor is not None else 2) * num_workers
    worker_free = [startup_s] * num_workers
    for i in range(num_batches):
        worker = i % num_workers
        issued = startup_s if i < depth else plan[i - depth].ready
        start = max(issued, worker_free[worker])
        fetched = start + load_s
        worker_free[worker] = fetched
        ready = max(fetched, previous_end) + transfer_s
        previous_end = ready + step_s
        plan.append(PlannedBatch(i, worker, start, fetched, ready, previous_end))
    return plan


def simulated_intervals(plan: list[PlannedBatch]) -> list[float]:
    """Time between consecutive loop iterations in a :func:`simulate` schedule."""
    out, previous = [], 0.0
    for batch in plan:
        out.append(batch.step_end - previous)
        previous = batch.step_end
    return out
