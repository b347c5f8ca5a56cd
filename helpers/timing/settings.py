"""One type for a DataLoader's settings: :class:`LoaderSettings`.

The explorer's knobs, the capstone's stages, and what a recording says about its
loader are all a ``LoaderSettings``: built from knobs (checked, with errors that name
the fix), turned into a ``DataLoader``, or read back from one.
"""

from __future__ import annotations

import dataclasses
import inspect
import multiprocessing as mp
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, Dataset

from .. import config

#: Whether this torch's DataLoader takes ``in_order`` (added in torch 2.6, PR #141833).
HAS_IN_ORDER = "in_order" in inspect.signature(DataLoader).parameters


@dataclass(frozen=True)
class LoaderSettings:
    """The knobs of a ``DataLoader`` that shape its timeline.

    ``start_method``: the workers' start method (``fork``, ``spawn``, ``forkserver``);
    None uses the lab's setting (:func:`helpers.config.start_method`). With
    ``num_workers=0`` there are no workers: ``prefetch_factor`` must be None and
    ``persistent_workers`` False (PyTorch raises otherwise); ``in_order`` and
    ``start_method`` are accepted and have no effect, as in PyTorch.
    """

    batch_size: int | None = 1
    num_workers: int = 0
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    pin_memory: bool = False
    in_order: bool = True
    start_method: str | None = None
    shuffle: bool = False
    drop_last: bool = False

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ``ValueError`` naming the fix for a combination PyTorch rejects."""
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ValueError(f"num_workers must be an integer >= 0, got {self.num_workers!r}")
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer or None, got {self.batch_size!r}")
        if self.num_workers == 0:
            if self.prefetch_factor is not None:
                raise ValueError(
                    f"prefetch_factor={self.prefetch_factor} only applies with workers: it counts "
                    "batches each worker prepares ahead. Set prefetch_factor=None, or set "
                    "num_workers > 0.")
            if self.persistent_workers:
                raise ValueError(
                    "persistent_workers=True keeps worker processes alive between epochs, so it "
                    "needs num_workers > 0. Set persistent_workers=False, or set num_workers > 0.")
        if self.prefetch_factor is not None and (
                not isinstance(self.prefetch_factor, int) or self.prefetch_factor < 1):
            raise ValueError("prefetch_factor must be a positive integer (batches per worker) or None, "
                             f"got {self.prefetch_factor!r}")
        if not self.in_order and not HAS_IN_ORDER:
            raise ValueError("this torch has no DataLoader(in_order=...): upgrade torch to 2.6+")
        available = mp.get_all_start_methods()
        if self.start_method is not None and self.start_method not in available:
            raise ValueError(f"start method {self.start_method!r} is not available on this platform; "
                             f"choose one of {', '.join(available)}")

    def replace(self, **changes: Any) -> LoaderSettings:
        """A copy with some knobs changed (checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def effective_prefetch_factor(self) -> int | None:
        """What the DataLoader uses: 2 by default with workers, None without."""
        if self.num_workers == 0:
            return None
        return 2 if self.prefetch_factor is None else self.prefetch_factor

    def loader(self, dataset: Dataset, *, sampler: Any = None,
               collate_fn: Callable[[list[Any]], Any] | None = None,
               worker_init_fn: Callable[[int], Any] | None = None) -> DataLoader:
        """The ``DataLoader`` with these settings (and the lab's start method)."""
        kwargs: dict[str, Any] = {}
        if HAS_IN_ORDER:
            kwargs["in_order"] = self.in_order
        if self.num_workers > 0:
            kwargs["multiprocessing_context"] = self.start_method or config.start_method()
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=self.shuffle, sampler=sampler,
                          num_workers=self.num_workers, prefetch_factor=self.prefetch_factor,
                          persistent_workers=self.persistent_workers, pin_memory=self.pin_memory,
                          drop_last=self.drop_last, collate_fn=collate_fn, worker_init_fn=worker_init_fn,
                          **kwargs)

    @classmethod
    def from_loader(cls, loader: DataLoader) -> LoaderSettings:
        """The settings of an existing ``DataLoader`` (any, e.g. one built in a notebook)."""
        context = loader.multiprocessing_context
        method = None
        if loader.num_workers > 0:
            method = context.get_start_method() if context is not None else config.default_start_method()
        return cls(batch_size=loader.batch_size, num_workers=loader.num_workers,
                   prefetch_factor=loader.prefetch_factor, persistent_workers=loader.persistent_workers,
                   pin_memory=loader.pin_memory, in_order=getattr(loader, "in_order", True),
                   start_method=method, drop_last=loader.drop_last)

    def describe(self) -> str:
        """One line, e.g. ``num_workers=2, prefetch_factor=2, batch_size=8, fork``."""
        parts = [f"num_workers={self.num_workers}"]
        if self.num_workers:
            parts.append(f"prefetch_factor={self.effective_prefetch_factor}")
        parts.append(f"batch_size={self.batch_size}")
        for flag in ("persistent_workers", "pin_memory"):
            if getattr(self, flag):
                parts.append(flag)
        if not self.in_order and self.num_workers:
            parts.append("in_order=False")
        if self.num_workers:
            parts.append(str(self.start_method or config.start_method()))
        return ", ".join(parts)


def loader_config(loader: DataLoader) -> dict[str, Any]:
    """What a recording keeps about its loader (JSON-friendly): its settings, and the dataset."""
    try:
        dataset_len: int | None = len(loader.dataset)  # type: ignore[arg-type]
    except TypeError:
        dataset_len = None
    settings = LoaderSettings.from_loader(loader)
    return {**dataclasses.asdict(settings), "prefetch_factor": settings.effective_prefetch_factor,
            "dataset": type(loader.dataset).__name__, "dataset_len": dataset_len,
            "describe": settings.describe()}
