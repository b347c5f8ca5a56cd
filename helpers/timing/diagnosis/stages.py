"""Where a sample's time goes: the stages of a dataset's ``__getitem__`` timed in a worker.

A dataset that computes (reads and decodes files, augments) usually exposes its stages: a
``loader`` that reads and decodes a file (torchvision's ``ImageFolder`` and ``DatasetFolder``, with
their ``samples``), and a ``transform`` (or ``transforms``) that is a ``Compose`` of steps, or one
callable. :func:`time_stages` times each of them on the learner's own dataset, in one worker
process, on a few samples: reading the file's bytes, decoding them (the ``loader`` less the read),
and each transform in turn, with what is left of ``__getitem__`` as "the rest". Nothing is timed
where no stage is exposed.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader, Dataset, IterableDataset

#: The attributes a dataset's transforms are found under, in torchvision and in user code.
TRANSFORM_ATTRIBUTES = ("transform", "transforms")


class _Timed:
    """A callable that adds its time to ``times[name]`` each call."""

    def __init__(self, name: str, function: Callable[..., Any], times: dict[str, float]):
        self.name, self.function, self.times = name, function, times

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.times[self.name] = self.times.get(self.name, 0.0) + time.perf_counter() - start


def _stage_name(step: Any, position: int) -> str:
    return f"{position + 1}. {type(step).__name__}"


def instrument(dataset: Any, times: dict[str, float]) -> list[str]:
    """Wrap the stages ``dataset`` exposes so that each call adds to ``times``; returns their names in
    order. Changes ``dataset`` in place: give it a copy."""
    names: list[str] = []
    loader = getattr(dataset, "loader", None)
    if callable(loader) and isinstance(getattr(dataset, "samples", None), list):
        def read_then_decode(path: Any, _load=loader) -> Any:
            start = time.perf_counter()
            with open(path, "rb") as file:
                file.read()
            read = time.perf_counter() - start
            times["read the file"] = times.get("read the file", 0.0) + read
            start = time.perf_counter()
            try:
                return _load(path)  # the bytes come from the page cache now: decoding, mostly
            finally:
                times["decode (the dataset's loader)"] = (times.get("decode (the dataset's loader)", 0.0)
                                                          + time.perf_counter() - start)

        dataset.loader = read_then_decode
        names += ["read the file", "decode (the dataset's loader)"]
    for attribute in TRANSFORM_ATTRIBUTES:
        transform = getattr(dataset, attribute, None)
        if transform is None or not callable(transform):
            continue
        steps = getattr(transform, "transforms", None)
        if isinstance(steps, list) and steps and all(callable(s) for s in steps):
            transform = copy.copy(transform)
            transform.transforms = [_Timed(_stage_name(s, k), s, times) for k, s in enumerate(steps)]
            names += [_stage_name(s, k) for k, s in enumerate(steps)]
        else:
            transform = _Timed(f"{attribute} ({type(transform).__name__})", transform, times)
            names.append(transform.name)
        setattr(dataset, attribute, transform)
        break
    return names


class StageTimedDataset(Dataset):
    """The learner's dataset, its stages timed: item ``k`` is ``(total seconds of __getitem__, {stage:
    seconds})`` for the ``k``-th of ``indices``. Instruments its own copy in the process that reads
    it (a worker)."""

    def __init__(self, dataset: Any, indices: list[Any]):
        self.dataset, self.indices = dataset, list(indices)
        self._times: dict[str, float] | None = None
        self._pid: int | None = None

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int) -> tuple[float, dict[str, float]]:
        if self._pid != os.getpid():
            self._times, self._pid = {}, os.getpid()
            self.dataset = copy.copy(self.dataset)
            instrument(self.dataset, self._times)
        self._times.clear()
        start = time.perf_counter()
        self.dataset[self.indices[k]]
        return time.perf_counter() - start, dict(self._times)


def exposes_stages(dataset: Any) -> bool:
    """Whether :func:`instrument` finds a stage to time in ``dataset``."""
    if isinstance(dataset, IterableDataset):
        return False
    return instrument(copy.copy(dataset), {}) != []


def time_stages(loader: DataLoader, samples: int = 24) -> dict[str, float] | None:
    """Seconds per sample of each stage of ``loader.dataset``'s ``__getitem__`` (and "the rest"),
    timed in one worker on its first ``samples`` indices (the loader's own start method); None when
    it exposes none or they cannot be timed (an iterable dataset, a dataset that cannot be copied)."""
    dataset = loader.dataset
    try:
        if not exposes_stages(dataset):
            return None
        indices = list(range(min(samples, len(dataset))))
        timed = DataLoader(StageTimedDataset(dataset, indices), batch_size=None, num_workers=1,
                           multiprocessing_context=loader.multiprocessing_context)
        rows = list(timed)
    except Exception:  # noqa: BLE001 - the breakdown is extra: none rather than a broken diagnosis
        return None
    if not rows:
        return None
    totals: dict[str, float] = {}
    for total, parts in rows[1:] or rows:  # the first sample warms caches and imports: left out
        for name, seconds in parts.items():
            totals[name] = totals.get(name, 0.0) + seconds
        totals["the rest of __getitem__"] = (totals.get("the rest of __getitem__", 0.0)
                                             + max(0.0, total - sum(parts.values())))
    count = len(rows[1:] or rows)
    return {name: seconds / count for name, seconds in totals.items()}
