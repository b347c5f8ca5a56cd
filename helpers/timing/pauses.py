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
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter as clock
from typing import Any

from . import torch_internals


def full_collection_s() -> float:
    """Run one full collection now and return how long it paused this process (s)."""
    start = clock()
    gc.collect()
    return clock() - start


@dataclass(frozen=True)
class CollectionTimes:
    """Full-collection pauses of this process, each in seconds."""

    objects: int  #: objects the collector tracks
    alone_s: list[float]  #: repeated collections with no workers alive
    after_start_s: float  #: the first collection after starting the workers
    again_s: float  #: the next one (the pages it copied are private by then)
    frozen_s: list[float]  #: repeated collections after ``gc.freeze()``
    start_method: str

    @property
    def alone_median_s(self) -> float:
        return statistics.median(self.alone_s)

    @property
    def frozen_median_s(self) -> float:
        return statistics.median(self.frozen_s)


def measure_collections(start_workers: Callable[[], Any], start_method: str,
                        repeats: int = 5) -> CollectionTimes:
    """Time full collections alone (``repeats`` times), right after ``start_workers()`` returned an
    iterator with live workers, again, and after ``gc.freeze()`` (undone at the end). Automatic
    collections are off from the start of the workers to the measured one. The workers are shut
    down before returning."""
    objects = len(gc.get_objects())
    alone = [full_collection_s() for _ in range(repeats)]
    # No automatic collection between the fork and the measured one: it would copy the shared
    # pages first, and the measured collection would find them private already.
    was_enabled = gc.isenabled()
    gc.disable()
    iterator = None
    try:
        iterator = start_workers()
        after_start = full_collection_s()
        again = full_collection_s()
    finally:
        if was_enabled:
            gc.enable()
        if iterator is not None:
            torch_internals.shutdown_workers(iterator)
        del iterator
    gc.freeze()
    try:
        frozen = [full_collection_s() for _ in range(repeats)]
    finally:
        gc.unfreeze()
    return CollectionTimes(objects, alone, after_start, again, frozen, start_method)
