"""Building DataLoaders with errors that name the fix."""

from __future__ import annotations

import inspect
import multiprocessing as mp
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader, Dataset

#: Whether this torch's DataLoader takes ``in_order`` (added in torch 2.6, PR #141833).
HAS_IN_ORDER = "in_order" in inspect.signature(DataLoader).parameters


def check_loader_args(
    *,
    batch_size: int | None,
    num_workers: int,
    prefetch_factor: int | None,
    persistent_workers: bool,
    in_order: bool,
    start_method: str | None,
) -> None:
    """Raise ``ValueError`` naming the fix for a combination the DataLoader rejects or ignores."""
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be an integer >= 0, got {num_workers!r}")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    if num_workers == 0:
        if prefetch_factor is not None:
            raise ValueError(
                f"prefetch_factor={prefetch_factor} only applies with workers: it counts "
                "batches each worker prepares ahead. Set prefetch_factor=None, or set "
                "num_workers > 0."
            )
        if persistent_workers:
            raise ValueError(
                "persistent_workers=True keeps worker processes alive between epochs, "
                "so it needs num_workers > 0. Set persistent_workers=False, or set "
                "num_workers > 0."
            )
        if not in_order:
            raise ValueError(
                "in_order=False lets workers deliver batches out of order, so it needs "
                "num_workers > 0. Set in_order=True, or set num_workers > 0."
            )
    if prefetch_factor is not None and (not isinstance(prefetch_factor, int) or prefetch_factor < 1):
        raise ValueError(
            f"prefetch_factor must be a positive integer (batches per worker) or None, "
            f"got {prefetch_factor!r}"
        )
    if not in_order and not HAS_IN_ORDER:
        raise ValueError("this torch has no DataLoader(in_order=...): upgrade torch to 2.6+")
    available = mp.get_all_start_methods()
    if start_method is not None and start_method not in available:
        raise ValueError(
            f"start method {start_method!r} is not available on this platform; "
            f"choose one of {', '.join(available)}"
        )


def make_loader(
    dataset: Dataset,
    *,
    batch_size: int | None = 1,
    num_workers: int = 0,
    prefetch_factor: int | None = None,
    persistent_workers: bool = False,
    pin_memory: bool = False,
    in_order: bool = True,
    start_method: str | None = None,
    shuffle: bool = False,
    drop_last: bool = False,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    worker_init_fn: Callable[[int], Any] | None = None,
    sampler: Any = None,
) -> DataLoader:
    """A ``DataLoader`` with the lab's knobs, checked first (:func:`check_loader_args`).

    ``start_method`` picks the workers' start method (fork, spawn, forkserver);
    None uses the platform's default. ``sampler``: any sampler; with a
    ``BatchSampler`` and ``batch_size=None`` each fetch gets a whole batch of indices.
    """
    check_loader_args(
        batch_size=batch_size,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
        in_order=in_order,
        start_method=start_method,
    )
    kwargs: dict[str, Any] = {}
    if HAS_IN_ORDER:
        kwargs["in_order"] = in_order
    if num_workers > 0 and start_method is not None:
        kwargs["multiprocessing_context"] = mp.get_context(start_method)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
        collate_fn=collate_fn,
        worker_init_fn=worker_init_fn,
        sampler=sampler,
        **kwargs,
    )
