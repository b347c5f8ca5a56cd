"""Memory that grows in workers: copy-on-read (notebook 12).

A worker started by ``fork`` begins with every page of the main process shared
(copy-on-write): nothing is copied until one of the two processes writes to a page.
CPython keeps a reference count in the header of every object, and merely *reading* an
object (``path = self.paths[i]``) increments and later decrements it: a write. The kernel
then copies the 4 KiB page holding that object into the worker. A dataset that holds
millions of small Python objects (a list of file names, a list of dicts) is copied, page
by page, into every worker as the worker reads it — PyTorch issue #13246.

A NumPy array, an Arrow array or a tensor is *one* object whose items are raw bytes:
reading item ``i`` reads the buffer and writes nothing in the shared pages. An
object-dtype NumPy array is an array of pointers to Python objects: reading an item
increments that object's count, as with a list.

Everything a worker runs lives here (datasets), with the sampler of worker memory that
the notebook draws beside the timeline.
"""

from __future__ import annotations

from .memory import (
    EpochWorkers,
    MemoryRun,
    MemorySample,
    WorkerMemory,
    epoch_workers,
    extra_private,
    extra_uss,
    measure_memory,
    memory_table,
    noise_margin_bytes,
    private_dirty,
    still_mapped,
    summarise,
)
from .paths import STORAGES, MiB, PathDataset, encoded_bytes, make_paths, sent_bytes

__all__ = [
    "MiB", "PathDataset", "STORAGES", "encoded_bytes", "make_paths", "sent_bytes", "EpochWorkers",
    "MemoryRun", "MemorySample", "WorkerMemory", "epoch_workers", "extra_private", "extra_uss",
    "measure_memory", "memory_table", "noise_margin_bytes", "private_dirty", "still_mapped", "summarise",
]
