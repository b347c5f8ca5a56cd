"""Loaders with a planted problem (notebook 16): :func:`mystery_loader`, their causes in
:data:`PLANTED` (``helpers.diagnosis.PLANTED`` in the notebook), :class:`SlowCollate`, and
:class:`Captions`, whose cause is one line of its ``__getitem__``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset


# -- three loaders with a planted problem (notebook 16) -------------------------------------------
class SlowCollate:
    """``default_collate`` plus ``cpu_s`` of CPU work per batch (a collate that decodes, pads
    or augments in Python)."""

    def __init__(self, cpu_s: float):
        self.cpu_s = cpu_s

    def __call__(self, samples: list[Any]) -> Any:
        from torch.utils.data import default_collate

        from .datasets import burn_cpu

        burn_cpu(self.cpu_s)
        return default_collate(samples)


class Captions(Dataset):
    """Captions as token ids: each sample picks 12 words and pads them to 32 ids."""

    def __init__(self, n: int, words: int = 8000):
        self.n = n
        self.words = [f"word{i:05d}" for i in range(words)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        ids = {word: k + 1 for k, word in enumerate(sorted(self.words))}
        caption = [self.words[(i * 7 + k * 13) % len(self.words)] for k in range(12)]
        tokens = [ids[word] for word in caption]
        return torch.tensor(tokens + [0] * (32 - len(tokens)))


#: The mystery loaders' planted causes, for the tests (the notebook does not print them first). D's is
#: a line of its ``__getitem__``: the vocabulary, sorted and numbered anew for every sample.
PLANTED = {"A": "num_workers", "B": "collate_fn", "C": "persistent_workers", "D": "sample_cost"}


def mystery_loader(name: str, *, smoke: bool | None = None) -> tuple[DataLoader, Callable[[Any], Any], int]:
    """One of four loaders with a planted problem: ``(loader, step, steps to diagnose)``."""
    from ..config import is_smoke
    from ..models import ModelledStep
    from .datasets import WorkDataset

    smoke = is_smoke() if smoke is None else smoke
    if name == "A":
        loader = DataLoader(WorkDataset(1024, item_wait_s=0.004), batch_size=16, shuffle=True, num_workers=1)
        return loader, ModelledStep(0.02), 24 if smoke else 48
    if name == "B":
        loader = DataLoader(
            WorkDataset(1024, item_wait_s=0.0005),
            batch_size=16,
            shuffle=True,
            num_workers=2,
            collate_fn=SlowCollate(0.03),
        )
        return loader, ModelledStep(0.01), 24 if smoke else 48
    if name == "C":
        loader = DataLoader(
            WorkDataset(64, item_wait_s=0.001),
            batch_size=16,
            shuffle=True,
            num_workers=2,
            multiprocessing_context="spawn",
            persistent_workers=False,
        )
        return loader, ModelledStep(0.01), 12 if smoke else 20
    if name == "D":
        loader = DataLoader(Captions(2048), batch_size=16, shuffle=True, num_workers=1)
        return loader, ModelledStep(0.01), 24 if smoke else 48
    raise ValueError(f"mystery loaders are 'A', 'B', 'C' and 'D', got {name!r}")
