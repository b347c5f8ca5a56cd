"""Notebook 19 · when the main process is the limit: batches whose hand-over to the main process
costs what they are made of (how many tensors, how many bytes), and a source that builds batches in
threads of the main process (torchdata's nodes) instead of worker processes."""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

from .datasets import burn_cpu


def make_batch(tensors: int, elements: int, dtype: torch.dtype = torch.float32, *,
               stacked: bool = False) -> Any:
    """One batch of ``tensors`` samples of ``elements`` values each, with its labels: a list of the
    samples (``stacked=False``: one tensor each to hand over) or one stacked tensor of the same bytes."""
    labels = torch.zeros(tensors, dtype=torch.int64)
    if stacked:
        return torch.zeros((tensors, elements), dtype=dtype), labels
    return [torch.zeros(elements, dtype=dtype) for _ in range(tensors)], labels  # a storage each


class HandOverDataset(Dataset):
    """``length`` whole batches (use ``batch_size=None``), each built after ``wait_s`` of waiting in
    the worker (I/O-like: no CPU): ``tensors`` samples of ``elements`` values of ``dtype``, handed to
    the main process as ``tensors`` tensors or (``stacked=True``) as one."""

    def __init__(self, length: int, tensors: int, elements: int, *, dtype: torch.dtype = torch.float32,
                 stacked: bool = False, wait_s: float = 0.0):
        if length < 1 or tensors < 1 or elements < 1 or wait_s < 0:
            raise ValueError("length, tensors and elements must be >= 1, wait_s >= 0")
        self.length, self.tensors, self.elements = length, tensors, elements
        self.dtype, self.stacked, self.wait_s = dtype, stacked, wait_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self.length:
            raise IndexError(index)
        if self.wait_s > 0:
            time.sleep(self.wait_s)
        return make_batch(self.tensors, self.elements, self.dtype, stacked=self.stacked)


class _BuildBatch:
    """The work per batch in a thread: wait (releases the GIL) or spin (holds it), then build."""

    def __init__(self, tensors: int, elements: int, dtype: torch.dtype, wait_s: float, cpu_s: float):
        self.args = (tensors, elements, dtype)
        self.wait_s, self.cpu_s = wait_s, cpu_s

    def __call__(self, index: int) -> Any:
        if self.wait_s > 0:
            time.sleep(self.wait_s)
        burn_cpu(self.cpu_s)
        return make_batch(*self.args, stacked=True)


class ThreadedBatches(IterableDataset):
    """``length`` stacked batches built by ``threads`` threads of the process that iterates it (a
    ``torchdata.nodes.ParallelMapper`` with ``method="thread"``): no worker process, so no pickling
    and no shared-memory hand-over. Each batch costs ``wait_s`` of waiting (the GIL released) and
    ``cpu_s`` of Python work holding the GIL. Use it with ``DataLoader(..., batch_size=None,
    num_workers=0)``."""

    def __init__(self, length: int, tensors: int, elements: int, *, threads: int = 4,
                 dtype: torch.dtype = torch.float32, wait_s: float = 0.0, cpu_s: float = 0.0):
        if length < 1 or threads < 1:
            raise ValueError("length and threads must be >= 1")
        self.length, self.threads = length, threads
        self.build = _BuildBatch(tensors, elements, dtype, wait_s, cpu_s)

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        from torchdata.nodes import IterableWrapper, Loader, ParallelMapper

        node = ParallelMapper(IterableWrapper(range(self.length)), map_fn=self.build,
                              num_workers=self.threads, method="thread", in_order=True)
        try:
            yield from Loader(node)
        finally:
            stop_threads(node)  # now, not in a collection that may land in the loop


def stop_threads(node: Any) -> None:
    """Stop a torchdata ``ParallelMapper``'s threads now, from a thread of their own.

    torchdata (0.11, ``torchdata/nodes/map.py``): the iterator sets its stop events itself when it
    raises ``StopIteration``, and each thread exits within ``QUEUE_TIMEOUT`` (0.1 s); its
    ``__del__`` joins them. A ``Loader`` and its iterator refer to each other, so the cyclic garbage
    collector runs that ``__del__``: within the 0.1 s, the join stalls whatever thread it runs in
    (about 0.1 s); after an epoch left early, with no ``StopIteration``, about 0.2 s. Joined here,
    in a thread of its own, neither lands in the loop. With a torchdata that lacks the private
    ``_shutdown``, the collector does it."""
    shutdown = getattr(getattr(getattr(node, "_it", None), "_it", None), "_shutdown", None)
    if shutdown is not None:
        threading.Thread(target=shutdown, name="stop ParallelMapper threads", daemon=True).start()
