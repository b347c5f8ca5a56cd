"""Randomness in workers: who draws which "random" augmentation (notebook 18, section 1).

Each dataset returns, per sample, ``{"index": i, "draw": x}``: ``x`` is the random number its
augmentation used (a crop position, a flip, a colour jitter are all drawn this way). Where ``x``
comes from is the lesson:

- :class:`GlobalDraws`: NumPy's global generator. PyTorch seeds it in every worker
  (``_worker_loop`` in ``torch/utils/data/_utils/worker.py``), so the workers differ;
- :class:`InitGeneratorDraws`: a generator made in ``__init__`` (NumPy's ``default_rng(0)`` or a
  ``torch.Generator``). It is part of the dataset, so every worker gets a copy in the same state;
- :func:`reseed_from_worker`: the ``worker_init_fn`` that fixes it, from the seed PyTorch chose
  for the worker (``get_worker_info().seed``);
- :class:`PerSampleDraws`: a generator per sample, seeded from ``(seed, epoch, index)``; the
  epoch comes with every index from :class:`EpochCountingSampler`.

:class:`KeepBatches` is a training step (main process) that keeps what arrived, and
:func:`draws_of` reads a recording (:func:`helpers.record`) and those batches into one
:class:`Draw` per sample: which epoch, which worker, its place in that worker's sequence, the
sample and the value. :func:`count_repeats` counts the values drawn more than once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, get_worker_info

from ...timing.timeline import Timeline


def _check_length(length: int) -> None:
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be a positive integer, got {length!r}")


class GlobalDraws(Dataset):
    """Sample ``i``: ``{"index": i, "draw": np.random.random()}`` (NumPy's global generator)."""

    def __init__(self, length: int):
        _check_length(length)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": int(index), "draw": float(np.random.random())}


class InitGeneratorDraws(Dataset):
    """Sample ``i``: ``{"index": i, "draw": x}``, ``x`` from a generator made here, in ``__init__``:
    ``kind="numpy"`` (``np.random.default_rng(seed)``) or ``"torch"`` (a seeded ``torch.Generator``;
    float64 draws, so that two equal values are one value drawn twice)."""

    def __init__(self, length: int, seed: int = 0, kind: str = "numpy"):
        _check_length(length)
        if kind not in ("numpy", "torch"):
            raise ValueError(f"kind must be 'numpy' or 'torch', got {kind!r}")
        self.length = length
        self.rng = np.random.default_rng(seed) if kind == "numpy" else torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.length

    def __getstate__(self) -> dict[str, Any]:
        # Under spawn and forkserver, torch 2.14 cannot send a torch.Generator to a worker: the worker
        # dies unpickling it (pytorch/pytorch#146828). Its state travels as bytes instead: every
        # worker still gets the same copy, as under fork.
        state = dict(self.__dict__)
        if isinstance(self.rng, torch.Generator):
            state["rng"] = ("torch.Generator", self.rng.get_state().numpy().tobytes())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if isinstance(state["rng"], tuple):
            generator = torch.Generator()
            generator.set_state(torch.frombuffer(bytearray(state["rng"][1]), dtype=torch.uint8))
            state = {**state, "rng": generator}
        self.__dict__.update(state)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if isinstance(self.rng, torch.Generator):
            draw = torch.rand((), generator=self.rng, dtype=torch.float64).item()
        else:
            draw = float(self.rng.random())
        return {"index": int(index), "draw": draw}


def reseed_from_worker(worker_id: int) -> None:
    """worker_init_fn: the worker's copy of the dataset gets a generator of its own, derived from
    the seed PyTorch chose for this worker (another one per worker, and per epoch unless the
    workers persist). Derived, not that seed itself: PyTorch seeded the worker's global torch
    generator with it, and a generator seeded alike would replay the numbers that transforms
    drawing from the global generator (torchvision's) get."""
    info = get_worker_info()  # in a worker: its id, the seed PyTorch set for it, its copy of the dataset
    seed = int(np.random.SeedSequence([info.seed, 1]).generate_state(1, np.uint64)[0])  # a stream of its own
    if isinstance(info.dataset.rng, torch.Generator):
        info.dataset.rng.manual_seed(seed)
    else:
        info.dataset.rng = np.random.default_rng(seed)


class PerSampleDraws(Dataset):
    """Sample ``(epoch, i)``: ``{"index": i, "draw": x}``, ``x`` from a generator seeded with
    ``(seed, epoch, i)`` — the same for that sample in that epoch whichever process draws it.
    Use it with :class:`EpochCountingSampler` (or any sampler that yields ``(epoch, i)``)."""

    def __init__(self, length: int, seed: int = 0):
        _check_length(length)
        self.length = length
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: tuple[int, int]) -> dict[str, Any]:
        epoch, i = index
        rng = np.random.default_rng((self.seed, epoch, i))  # one generator per sample and epoch
        return {"index": int(i), "draw": float(rng.random())}


class EpochCountingSampler(Sampler):
    """Yields ``(epoch, i)`` for ``i`` in ``range(length)``; the epoch is the number of passes begun
    before this one (0, 1, 2, …), as a loop that calls ``set_epoch(epoch)`` before each epoch would
    set it. It runs in the main process, so the epoch reaches persistent workers too (notebook 05).
    The count advances when a pass yields its first index (an iterator made and never used,
    as DataLoader makes one when it starts its workers, does not count)."""

    def __init__(self, length: int):
        _check_length(length)
        self.length = length
        self.epoch = -1

    def set_epoch(self, epoch: int) -> None:
        """The next pass is ``epoch``."""
        self.epoch = int(epoch) - 1

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[tuple[int, int]]:
        self.epoch += 1
        epoch = self.epoch
        for i in range(self.length):
            yield (epoch, i)


class KeepBatches:
    """A training step that keeps every batch it is given (in the main process), in arrival order,
    so that what arrived can be counted: ``batches``."""

    def __init__(self) -> None:
        self.batches: list[Any] = []

    def __call__(self, batch: Any) -> None:
        self.batches.append(batch)


@dataclass(frozen=True)
class Draw:
    """One sample's random number, and who drew it."""

    epoch: int
    worker: int  #: -1: the main process (0 workers)
    k: int  #: its place in that worker's draws of that epoch (0, 1, …)
    index: int  #: the sample
    value: float


@dataclass(frozen=True)
class DrawRun:
    """What one recording drew, with the loader settings that decide it."""

    draws: tuple[Draw, ...]
    source: str  #: "np.random" (global), "numpy" / "torch" (a generator made in __init__), "per sample"
    num_workers: int
    persistent: bool  #: persistent_workers=True
    reseeded: bool  #: worker_init_fn=reseed_from_worker
    epochs: int

    @property
    def repeats(self) -> Repeats:
        return count_repeats(self.draws)

    def shares(self) -> dict[tuple[int, int], list[float]]:
        """(epoch, worker) -> that worker's draws in that epoch, in order."""
        out: dict[tuple[int, int], list[float]] = {}
        for d in self.draws:
            out.setdefault((d.epoch, d.worker), []).append(d.value)
        return out

    def workers_agree(self) -> bool:
        """Whether, in every epoch, each worker's k-th draw is every other worker's k-th draw."""
        shares = self.shares()
        for epoch in range(self.epochs):
            rows = [v for (e, _), v in shares.items() if e == epoch]
            if len(rows) < 2 or any(row[:len(rows[0])] != rows[0][:len(row)] for row in rows[1:]):
                return False
        return True

    def epochs_repeat(self) -> bool:
        """Whether every epoch drew exactly the values of the first."""
        first = {d.value for d in self.draws if d.epoch == 0}
        return self.epochs > 1 and all({d.value for d in self.draws if d.epoch == e} == first
                                       for e in range(1, self.epochs))

    def describe(self) -> str:
        return self.repeats.describe()


def _source(dataset: Dataset) -> str:
    if isinstance(dataset, InitGeneratorDraws):
        return "torch" if isinstance(dataset.rng, torch.Generator) else "numpy"
    if isinstance(dataset, PerSampleDraws):
        return "per sample"
    return "np.random" if isinstance(dataset, GlobalDraws) else type(dataset).__name__


def draws_of(loader: Any, tl: Timeline, kept: KeepBatches | Sequence[Any]) -> DrawRun:
    """One :class:`Draw` per sample, in arrival order, from a recording of ``loader`` and the batches
    its step kept (each a dict with tensors ``"index"`` and ``"draw"``), with the loader's settings.
    A worker builds its batches in the order it receives them, so its k-th draw is its k-th sample."""
    batches = kept.batches if isinstance(kept, KeepBatches) else list(kept)
    if len(batches) != len(tl.batches):
        raise ValueError(f"{len(batches)} batches kept for {len(tl.batches)} recorded: record(loader, kept) "
                         "with a fresh KeepBatches()")
    out, counts = [], {}
    for record, batch in zip(tl.batches, batches, strict=True):
        for index, value in zip(batch["index"].tolist(), batch["draw"].tolist(), strict=True):
            key = (record.epoch, record.worker)
            k = counts.get(key, 0)
            counts[key] = k + 1
            out.append(Draw(record.epoch, record.worker, k, int(index), float(value)))
    return DrawRun(tuple(out), _source(loader.dataset), loader.num_workers,
                   bool(loader.persistent_workers), loader.worker_init_fn is reseed_from_worker,
                   len(tl.epochs))


def repeat_flags(draws: Sequence[Draw]) -> list[str]:
    """Per draw, in order: ``""`` (its value is new), ``"epoch"`` (drawn before in the same epoch,
    by another worker or sample) or ``"earlier epoch"`` (drawn before, only in an earlier epoch)."""
    first_epoch: dict[float, int] = {}
    seen_in_epoch: set[tuple[int, float]] = set()
    flags = []
    for d in draws:
        if (d.epoch, d.value) in seen_in_epoch:
            flags.append("epoch")
        elif d.value in first_epoch:
            flags.append("earlier epoch")
        else:
            flags.append("")
        first_epoch.setdefault(d.value, d.epoch)
        seen_in_epoch.add((d.epoch, d.value))
    return flags


@dataclass(frozen=True)
class Repeats:
    """How many of a run's draws repeat an earlier one."""

    draws: int
    distinct: int
    within_epoch: int  #: drawn before in the same epoch (in the bug: by another worker)
    across_epochs: int  #: drawn before only in an earlier epoch

    @property
    def repeated(self) -> int:
        return self.draws - self.distinct

    def describe(self) -> str:
        return (f"{self.distinct} distinct of {self.draws} draws: {self.repeated} repeats "
                f"({self.within_epoch} within an epoch, {self.across_epochs} of an earlier epoch)")


def count_repeats(draws: Sequence[Draw]) -> Repeats:
    flags = repeat_flags(draws)
    return Repeats(len(draws), len({d.value for d in draws}), flags.count("epoch"),
                   flags.count("earlier epoch"))


def same_draws(a: DrawRun, b: DrawRun) -> bool:
    """Whether two runs drew the same value for every (epoch, sample), whoever drew it."""
    return (sorted((d.epoch, d.index, d.value) for d in a.draws)
            == sorted((d.epoch, d.index, d.value) for d in b.draws))
