"""Garbage-collection pauses of the training process, measured.

Python's cyclic garbage collector occasionally runs a *full* collection (generation 2):
it walks every object it tracks, holding the GIL, so every thread of the process — the
training loop, the pin thread — stops. In a process that imported torch, matplotlib and
Jupyter that is hundreds of thousands of objects: tens to hundreds of milliseconds. The
collector also writes to each object's header; right after ``fork`` the process's pages
are shared with the new workers, so each page it writes must first be copied
(copy-on-write), and the first full collection after starting workers takes longer.
``gc.freeze()`` moves every object that exists now into a permanent generation that
collections skip.

Each collection is timed twice: the wall-clock pause (what the loop sees) and this thread's CPU
time (what the collection itself did). On a busy machine the wall clock also counts the time
other processes held the core, so the lesson checks compare CPU times; copy-on-write faults are
the kernel's work on this thread's behalf and count in its CPU time.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter as clock
from time import thread_time
from typing import Any

from . import torch_internals


def full_collection() -> tuple[float, float]:
    """Run one full collection now: (the pause in wall-clock seconds, this thread's CPU seconds)."""
    start, start_cpu = clock(), thread_time()
    gc.collect()
    return clock() - start, thread_time() - start_cpu


@dataclass(frozen=True)
class CollectionTimes:
    """Full-collection pauses of this process, each in seconds."""

    objects: int  #: objects the collector tracks
    alone_s: list[float]  #: repeated collections with no workers alive
    after_start_s: float  #: the first collection after starting the workers
    again_s: float  #: the next one (the pages it copied are private by then)
    frozen_s: list[float]  #: repeated collections after ``gc.freeze()``
    start_method: str
    #: the same collections' CPU time on this thread (what the lesson checks compare)
    alone_cpu_s: list[float]
    after_start_cpu_s: float
    frozen_cpu_s: list[float]

    @property
    def alone_median_s(self) -> float:
        return statistics.median(self.alone_s)

    @property
    def frozen_median_s(self) -> float:
        return statistics.median(self.frozen_s)

    @property
    def alone_cpu_median_s(self) -> float:
        return statistics.median(self.alone_cpu_s)

    @property
    def frozen_cpu_median_s(self) -> float:
        return statistics.median(self.frozen_cpu_s)


def measure_collections(start_workers: Callable[[], Any], start_method: str,
                        repeats: int = 5) -> CollectionTimes:
    """Time full collections alone (``repeats`` times), right after ``start_workers()`` returned an
    iterator with live workers, again, and after ``gc.freeze()`` (undone at the end). Automatic
    collections are off from the start of the workers to the measured one. The workers are shut
    down before returning."""
    objects = len(gc.get_objects())
    alone = [full_collection() for _ in range(repeats)]
    # No automatic collection between the fork and the measured one: it would copy the shared
    # pages first, and the measured collection would find them private already.
    was_enabled = gc.isenabled()
    gc.disable()
    iterator = None
    try:
        iterator = start_workers()
        after_start = full_collection()
        again = full_collection()[0]
    finally:
        if was_enabled:
            gc.enable()
        if iterator is not None:
            torch_internals.shutdown_workers(iterator)
        del iterator
    gc.freeze()
    try:
        frozen = [full_collection() for _ in range(repeats)]
    finally:
        gc.unfreeze()
    return CollectionTimes(objects, [w for w, _ in alone], after_start[0], again, [w for w, _ in frozen],
                           start_method, [c for _, c in alone], after_start[1], [c for _, c in frozen])
