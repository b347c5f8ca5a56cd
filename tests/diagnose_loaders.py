"""Loaders "written outside the lab" for tests/test_diagnose.py: batches of dicts and strings, many
small tensors per batch, a custom batch sampler. Module level, so that spawned workers import them."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler


class DictItems(Dataset):
    """A dict per sample: a tensor, a string and an int (default_collate makes a dict batch)."""

    def __init__(self, length: int, wait_s: float = 0.0):
        self.length, self.wait_s = length, wait_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        time.sleep(self.wait_s)
        return {"x": torch.full((4,), float(i)), "name": f"sample-{i}", "label": i}


class ManyTensors(Dataset):
    """A sample of ``parts`` tiny tensors: a batch of them is many tensors to unpickle."""

    def __init__(self, length: int, parts: int = 48):
        self.length, self.parts = length, parts

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple:
        return tuple(torch.full((2,), float(i + k)) for k in range(self.parts))


class LateSecondWorker(Dataset):
    """Samples that cost nothing, except worker 1's first fetch, which waits ``wait_s``: a second
    worker that comes up late (forked after the first from a large process on a slow machine, or
    importing torch under spawn)."""

    def __init__(self, length: int, wait_s: float):
        self.length, self.wait_s, self.waited = length, wait_s, False

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.id == 1 and not self.waited:
            self.waited = True  # this worker's copy
            time.sleep(self.wait_s)
        return torch.full((4,), float(i))


class PairSampler(Sampler):
    """A batch sampler of its own: batches [0, 1], [2, 3], ..."""

    def __init__(self, length: int):
        self.length = length

    def __iter__(self):
        return iter([[i, i + 1] for i in range(0, self.length - 1, 2)])

    def __len__(self) -> int:
        return self.length // 2


def make_loader():
    """For the command line: 0 workers, 9 ms per sample, no step of its own."""
    from torch.utils.data import DataLoader

    import helpers

    return DataLoader(helpers.WorkDataset(64, item_wait_s=0.009), batch_size=1)


class Nothing(IterableDataset):
    """An iterable dataset that yields nothing (a shard filter that matched no file, say)."""

    def __iter__(self):
        return iter(())
