"""A copy of the learner's loader with some settings changed: what the diagnosis follows advice on, and
what it profiles (:mod:`.profile`)."""

from __future__ import annotations

import inspect
from typing import Any

from torch.utils.data import DataLoader, IterableDataset


def with_changes(loader: DataLoader, **changes: Any) -> DataLoader:
    """A new ``DataLoader`` like ``loader`` (the same dataset, sampler or batch sampler, collate_fn,
    worker_init_fn, generator, start method, …) with some arguments changed. Keeps what PyTorch
    requires consistent: ``prefetch_factor`` back to its default and ``persistent_workers`` off
    with 0 workers."""
    params = inspect.signature(DataLoader).parameters
    unknown = set(changes) - set(params)
    if unknown:
        raise TypeError(f"DataLoader has no argument {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers, "collate_fn": loader.collate_fn, "pin_memory": loader.pin_memory,
        "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor, "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
    }
    if "in_order" in params:
        kwargs["in_order"] = getattr(loader, "in_order", True)
    if isinstance(loader.dataset, IterableDataset):
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is None and loader.batch_sampler is not None:  # the user's batch_sampler
        kwargs["batch_sampler"] = loader.batch_sampler
    else:
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last, sampler=loader.sampler)
    kwargs.update(changes)
    if kwargs["num_workers"] == 0:
        kwargs.update(prefetch_factor=None, persistent_workers=False, multiprocessing_context=None)
    elif "num_workers" in changes and loader.num_workers == 0 and "prefetch_factor" not in changes:
        kwargs["prefetch_factor"] = None  # the default (2) for the new workers
    return DataLoader(loader.dataset, **kwargs)
