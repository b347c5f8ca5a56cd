"""Worker state across epochs, and the memory that worker processes hold.

The stale-state pitfall (PyTorch issue #97326): with ``persistent_workers=True``
each worker keeps the dataset object it received when it started. Setting an
attribute on the main process's dataset between epochs (``dataset.epoch = 3``)
changes the main process's copy only. Two fixes that work, both here:

* :class:`EpochSampler`: epoch logic on the sampler side. The sampler runs in the
  main process at every epoch, and what it yields reaches the workers as indices;
  it yields ``(epoch, index)`` pairs.
* :class:`SharedEpoch`: a value in shared memory, created before the workers start
  and inherited by them; the main process writes it, the workers read it.

:class:`EpochEchoDataset` reports which epoch each sample was built for, so a
notebook can check which approach reaches the workers.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil
from torch.utils.data import Dataset, Sampler, get_worker_info

from ..timing import torch_internals


def freeze_gc(worker_id: int) -> None:
    """A ``worker_init_fn``: keep the objects a worker starts with (inherited under fork, imported
    under spawn and forkserver) out of its garbage collector's full passes. Without it, the
    worker's first full collection walks them all, inside one of its first fetches."""
    import gc

    gc.freeze()


class SharedEpoch:
    """An integer in shared memory that the main process sets and workers read.

    Create it before the loader's workers start (it is inherited, not sent later);
    ``start_method`` must match the loader's, since the value's lock comes from
    that context.
    """

    def __init__(self, start_method: str | None = None, value: int = 0):
        context = mp.get_context(start_method)
        self._value = context.Value("i", value)

    @property
    def value(self) -> int:
        return int(self._value.value)

    def set(self, epoch: int) -> None:
        self._value.value = int(epoch)


class EpochEchoDataset(Dataset):
    """``length`` samples; each returns ``{"index", "epoch", "worker"}`` where ``epoch``
    is the epoch the worker believes it is in.

    Where that belief comes from:

    * the index is an ``(epoch, i)`` pair (from :class:`EpochSampler`): the epoch in it;
    * else ``shared`` (a :class:`SharedEpoch`) is set: its current value;
    * else the ``epoch`` attribute of the worker's own copy of the dataset.
    """

    def __init__(self, length: int, shared: SharedEpoch | None = None):
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        self.length = length
        self.shared = shared
        self.epoch = 0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: Any) -> dict[str, int]:
        if isinstance(index, (tuple, list)):
            epoch, index = index
        elif self.shared is not None:
            epoch = self.shared.value
        else:
            epoch = self.epoch
        info = get_worker_info()
        return {"index": int(index), "epoch": int(epoch), "worker": -1 if info is None else info.id}


class EpochSampler(Sampler):
    """Yields ``(epoch, i)`` for ``i`` in ``range(length)``; call :meth:`set_epoch` before
    each epoch (as with ``DistributedSampler``). It runs in the main process, so the
    epoch reaches persistent workers with every index."""

    def __init__(self, length: int):
        self.length = length
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for i in range(self.length):
            yield (self.epoch, i)


@dataclass(frozen=True)
class ProcessMemory:
    """Memory of one process, in bytes (psutil)."""

    pid: int
    rss: int  #: resident set: pages in RAM, shared ones (e.g. copy-on-write from fork) included
    uss: int  #: unique set: pages only this process holds, what ending it would free


def process_memory(pid: int) -> ProcessMemory:
    """RSS and USS of process ``pid`` (USS falls back to RSS where psutil cannot tell)."""
    process = psutil.Process(pid)
    try:
        info = process.memory_full_info()
        uss = int(getattr(info, "uss", info.rss))
    except (psutil.AccessDenied, AttributeError):
        info = process.memory_info()
        uss = int(info.rss)
    return ProcessMemory(pid=pid, rss=int(info.rss), uss=uss)


def worker_memory(iterator: Any) -> list[ProcessMemory]:
    """Memory of each live worker process of a DataLoader iterator (``iter(loader)``).

    Raises naming the fix when the iterator has no workers (``num_workers=0``).
    """
    workers = torch_internals.worker_processes(iterator)
    if not workers:
        raise ValueError("this iterator has no worker processes: build the loader with num_workers >= 1 "
                         "and pass iter(loader) after it has produced a batch")
    return [process_memory(w.pid) for w in workers if w.is_alive()]


def epochs_seen(loader: Any, before_epoch: Any, epochs: int = 3) -> list[list[int]]:
    """Iterate ``loader`` for ``epochs`` epochs, calling ``before_epoch(e)`` first each time, and
    return per epoch the sorted epochs its samples (from :class:`EpochEchoDataset`) reported."""
    seen = []
    for epoch in range(epochs):
        before_epoch(epoch)
        seen.append(sorted({int(e) for batch in loader for e in batch["epoch"]}))
    return seen
