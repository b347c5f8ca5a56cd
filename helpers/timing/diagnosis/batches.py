"""What a diagnosis reads from a batch: its leaves (:func:`tree_map`), the tensor storages a worker hands
over one by one, how many of its tensors are stacked across the samples, and private copies to keep
it by (:func:`private_copy`) or to hand over (:func:`private_copy_all`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def tree_map(function: Callable[[Any], Any], batch: Any) -> Any:
    """``batch`` with ``function`` applied to each leaf: lists, tuples, named tuples and dicts are
    rebuilt around the results, anything else is a leaf."""
    if isinstance(batch, dict):
        mapped = {k: tree_map(function, v) for k, v in batch.items()}
        try:
            return mapped if type(batch) is dict else type(batch)(mapped)
        except TypeError:  # a mapping type built otherwise (defaultdict): a plain dict holds the same
            return mapped
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(tree_map(function, v) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(tree_map(function, v) for v in batch)
    return function(batch)


def leaves(batch: Any) -> list[Any]:
    """The leaves of ``batch`` (see :func:`tree_map`)."""
    found: list[Any] = []
    tree_map(found.append, batch)
    return found


def private_copy(batch: Any) -> Any:
    """``batch`` with every tensor that lives in shared memory copied into this process's own memory
    (lists, tuples, dicts and named tuples rebuilt around the copies; anything else kept as it is), so
    that keeping it holds no shared-memory segment or file descriptor of the loader's."""
    import torch

    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) and x.is_shared() else x, batch)


def storages_in(batch: Any) -> int:
    """How many distinct tensor storages ``batch`` holds: what a worker hands over one by one (one
    shared-memory segment, and under ``file_descriptor`` one descriptor, each)."""
    import torch

    return len({x.untyped_storage().data_ptr() for x in leaves(batch)
                if isinstance(x, torch.Tensor) and x.layout == torch.strided})


def stacked_share(batch: Any, batch_size: int | None) -> float | None:
    """The share of ``batch``'s tensors that hold the whole batch (their first dimension is the batch
    size: a field stacked across the samples, as ``default_collate`` makes it), against tensors of one
    sample each (a ``collate_fn`` that returns the samples as they are). None without tensors."""
    import torch

    tensors = [x for x in leaves(batch) if isinstance(x, torch.Tensor)]
    if not tensors or not batch_size:
        return None
    return sum(1 for x in tensors if x.dim() > 0 and x.shape[0] == batch_size) / len(tensors)


def spare_descriptors() -> int | None:
    """File descriptors this process may still open (its soft limit less those open); None where
    unknown."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return None if soft == resource.RLIM_INFINITY else soft - len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError, ValueError):
        return None


def private_copy_all(batch: Any) -> Any:
    """``batch`` with every tensor cloned (pickling for a worker's hand-over moves a tensor's storage
    into shared memory in place: the clone moves, the kept batch does not)."""
    import torch

    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, batch)
