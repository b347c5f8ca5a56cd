"""Host-to-device copies: moving batches, pinned vs pageable bandwidth, the non_blocking trap.

Everything here runs on any machine: with no accelerator the functions either
work on the CPU (``to_device``) or say what they need (``copy_bandwidth`` and
``nonblocking_readback_trap`` raise naming the fix, so a notebook cell that
calls them only where ``torch.cuda.is_available()`` is honest about skipping).
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter as clock
from typing import Any

import torch

from ..timing.device import tensors_in


def _require_cuda(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            f"this measurement needs a CUDA device, got {device}: run it on a machine with an "
            "NVIDIA GPU (torch.cuda.is_available() is False here)"
        )
    return device


def pin_memory_warning() -> str | None:
    """What PyTorch says when a DataLoader asks for ``pin_memory=True`` on this machine.

    Iterates a tiny loader with ``pin_memory=True`` and returns the warning text it
    raised (None when it raised none, as on a machine with an accelerator).
    """
    from torch.utils.data import DataLoader

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in DataLoader(torch.zeros(2, 1), batch_size=1, pin_memory=True):
            pass
    messages = [str(w.message) for w in caught if "pin_memory" in str(w.message)]
    return messages[0] if messages else None


@dataclass(frozen=True)
class CopyTiming:
    """Host-to-device copy of one size, median over repeats (GB/s = 1e9 bytes/s)."""

    nbytes: int
    pageable_gbps: float  #: ``t.to(dev)`` from ordinary (pageable) memory
    pinned_gbps: float  #: ``t.to(dev)`` from pinned memory
    #: ``t.pin_memory().to(dev, non_blocking=True)`` after a warm-up: the caching host allocator
    #: hands back the pinned block the previous call freed, so this is a memcpy into already
    #: page-locked memory plus the device copy — not the cost of page-locking fresh memory
    pin_then_copy_gbps: float
    pageable_nonblocking_call_s: float  #: host time inside ``.to(dev, non_blocking=True)``, pageable
    pinned_nonblocking_call_s: float  #: same from pinned memory: returns before the copy ends


def copy_bandwidth(
    sizes_bytes: Sequence[int], device: torch.device | str = "cuda", *, repeats: int = 5
) -> list[CopyTiming]:
    """Measure host-to-device copies for each size: pageable vs pinned, blocking vs not.

    Each figure is the median of ``repeats`` timed copies after one warm-up copy;
    the device is synchronised before every clock read. Needs CUDA (raises otherwise).
    ``pin_then_copy_gbps`` copies into a pinned block the allocator already holds (see
    :class:`CopyTiming`): it prices pinning a batch the way the DataLoader's pin thread does
    in steady state, not page-locking new memory.
    """
    device = _require_cuda(device)
    return [_time_copies(int(nbytes), device, repeats) for nbytes in sizes_bytes]


def _time_copies(nbytes: int, device: torch.device, repeats: int) -> CopyTiming:
    pageable = torch.empty(max(nbytes // 4, 1), dtype=torch.float32).fill_(1.0)
    pinned = pageable.pin_memory()

    def timed(fn) -> float:
        fn()  # warm-up (allocations, first touch)
        torch.cuda.synchronize(device)
        times = []
        for _ in range(repeats):
            start = clock()
            fn()
            torch.cuda.synchronize(device)
            times.append(clock() - start)
        return statistics.median(times)

    def call_time(source: torch.Tensor) -> float:
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize(device)
            start = clock()
            source.to(device, non_blocking=True)
            times.append(clock() - start)
        torch.cuda.synchronize(device)
        return statistics.median(times)

    size = pageable.element_size() * pageable.nelement()
    return CopyTiming(
        nbytes=size,
        pageable_gbps=size / timed(lambda: pageable.to(device)) / 1e9,
        pinned_gbps=size / timed(lambda: pinned.to(device)) / 1e9,
        pin_then_copy_gbps=size / timed(lambda: pageable.pin_memory().to(device, non_blocking=True)) / 1e9,
        pageable_nonblocking_call_s=call_time(pageable),
        pinned_nonblocking_call_s=call_time(pinned),
    )


def nonblocking_readback_trap(
    device: torch.device | str = "cuda", *, numel: int = 1 << 24
) -> dict[str, Any]:
    """Copy device -> host with ``non_blocking=True`` and read the result before and
    after ``torch.cuda.synchronize()``.

    The device is kept busy first (a chain of in-place ops on the source), so the
    copy is still queued when the host reads. Returns whether the early read was
    wrong, and the values seen: a real check, not a staged one — if the copy
    happened to finish first, ``early_read_wrong`` is False. Needs CUDA.
    """
    device = _require_cuda(device)
    source = torch.zeros(numel, device=device)
    torch.cuda.synchronize(device)
    for _ in range(50):  # queue work so the copy below waits behind it
        source.add_(1.0)
    expected = 50.0
    host = source.to("cpu", non_blocking=True)  # returns at once; lands in pinned memory
    early = host[-1000:].clone()  # read before synchronising: may see memory not yet written
    torch.cuda.synchronize(device)
    late = host[-1000:].clone()
    return {
        "numel": numel,
        "expected": expected,
        "host_is_pinned": bool(host.is_pinned()),
        "early_read_wrong": not bool(torch.all(early == expected)),
        "early_values": sorted({float(v) for v in early.unique()[:5]}),
        "after_sync_correct": bool(torch.all(late == expected)),
    }


def pinned_block_bytes(nbytes: int) -> int:
    """The size of the pinned block PyTorch's caching host allocator takes for ``nbytes``:
    the next power of two (``torch.cuda.host_memory_stats`` documents the rounding)."""
    return 1 << max(int(nbytes) - 1, 0).bit_length() if nbytes > 0 else 0


def pinned_budget_bytes(batch: Any, num_workers: int, prefetch_factor: int) -> int:
    """Pinned memory a ``pin_memory=True`` loader can hold at once (bytes): up to
    ``num_workers × prefetch_factor`` batches in flight (``next()`` sends a new task before it
    returns), plus the batch ``next()`` returns, plus the previous one the loop still holds,
    each tensor in a power-of-two block. The caching host allocator
    keeps freed blocks for reuse, so the process keeps this much pinned after the peak."""
    per_batch = sum(pinned_block_bytes(t.element_size() * t.nelement()) for t in tensors_in(batch))
    return (num_workers * prefetch_factor + 2) * per_batch


class _CudaHostAllocator:
    """PyTorch's caching host (pinned) allocator, through its public functions."""

    def stats(self) -> dict[str, Any]:
        return dict(torch.cuda.host_memory_stats())

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_host_memory_stats()

    def empty_cache(self) -> None:
        from ..timing.torch_internals import empty_host_cache

        empty_host_cache()


class PinnedMemoryTaken:
    """The pinned memory PyTorch's caching host allocator takes for a block of code, in bytes::

        with PinnedMemoryTaken() as taken:
            helpers.record(DataLoader(..., pin_memory=True), step, device="cuda")
        taken.peak_bytes, taken.blocks

    Why not just reset the peak and read it: ``torch.cuda.host_memory_stats()``'s
    ``allocated_bytes`` counts every pinned block the allocator owns — handed out *and*
    cached for reuse — and ``reset_peak_host_memory_stats()`` sets the peak to the current
    value (``Stat::reset_peak``: ``peak = current``). Blocks cached by earlier work (a bandwidth
    sweep leaves hundreds of MiB) would sit in the "peak" of the run. So entering first empties
    the cache (``torch.accelerator.empty_host_cache()``: cached blocks go back to CUDA, blocks
    in use stay), notes what the allocator still owns, and resets the peak; ``peak_bytes`` is the
    peak's growth over that: the blocks the code held at once (a freed block stays cached and
    counted, and a later request of its size reuses it). ``blocks`` counts the blocks it created
    (``num_host_alloc``). A block in use before entering and freed inside could be reused
    unseen: enter with no pinned tensor of the code's sizes alive.

    ``allocator``: anything with ``stats()``, ``reset_peak()`` and ``empty_cache()`` working
    like PyTorch's (the unit tests pass a model of it); default: the CUDA one (needs CUDA).
    """

    def __init__(self, allocator: Any = None):
        self.allocator = allocator if allocator is not None else _CudaHostAllocator()
        self.peak_bytes: int | None = None
        self.blocks: int | None = None
        self._before_bytes = 0
        self._before_blocks = 0

    def __enter__(self) -> PinnedMemoryTaken:
        self.allocator.empty_cache()
        stats = self.allocator.stats()
        self._before_bytes = int(stats.get("allocated_bytes.current", 0))
        self._before_blocks = int(stats.get("num_host_alloc", 0))
        self.allocator.reset_peak()
        return self

    def __exit__(self, *exc: Any) -> None:
        stats = self.allocator.stats()
        self.peak_bytes = int(stats.get("allocated_bytes.peak", 0)) - self._before_bytes
        self.blocks = int(stats.get("num_host_alloc", 0)) - self._before_blocks
