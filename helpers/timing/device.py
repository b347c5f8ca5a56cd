"""Batches to the device and the device's clock: ``to_device``, ``tensors_in``, ``batch_nbytes``,
``synchronize``, ``wait_for_step`` (what :func:`helpers.record` and the diagnosis's replay use; the
copy experiments of notebook 06 are in :mod:`helpers.data.transfer`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch


def to_device(batch: Any, device: torch.device | str, *, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor moved to ``device`` (tuples, lists and dicts kept).

    ``non_blocking=True`` only makes a host-to-device copy asynchronous when the
    source is in pinned memory; from pageable memory the copy is synchronous anyway.
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device, non_blocking=non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device, non_blocking=non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking=non_blocking) for v in batch)
    return batch


def tensors_in(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``batch`` (nested tuples, lists and dicts)."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for value in batch.values():
            yield from tensors_in(value)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            yield from tensors_in(value)


def batch_nbytes(batch: Any) -> int:
    """Bytes held by the tensors in ``batch`` (nested tuples, lists and dicts)."""
    return sum(t.element_size() * t.nelement() for t in tensors_in(batch))


def synchronize(device: torch.device | str) -> None:
    """Wait for all work queued on ``device`` (a no-op on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def wait_for_step() -> None:
    """Wait for the GPU work a training step queued, before a clock is read: a CUDA step is
    asynchronous, and timed without this it costs only its kernel launches. Waits on this
    process's current CUDA stream (the step's), not on side streams a prefetcher copies on; a
    no-op in a process that has not initialised CUDA (every CPU-only run)."""
    if torch.cuda.is_initialized():
        torch.cuda.current_stream().synchronize()
