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


class Fields(Dataset):
    """A sample as a dict of ``fields`` small tensors (an HF-style record of features)."""

    def __init__(self, length: int, fields: int = 12):
        self.length, self.fields = length, fields

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        return {f"f{k}": torch.full((3,), float(i + k)) for k in range(self.fields)}


def as_they_are(samples: list) -> list:
    """A collate_fn that returns the samples as they are: a batch of many small tensors."""
    return samples


def many_small_tensors():
    """The list-of-small-tensors loader: 32 dicts of 8 tensors a batch (256 storages), 2 workers."""
    from torch.utils.data import DataLoader

    return DataLoader(Fields(320, fields=8), batch_size=32, num_workers=2, collate_fn=as_they_are)


class Vector(Dataset):
    """A sample that costs nothing: one vector of 64 floats."""

    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((64,), float(i))


class SlowSampler(Sampler):
    """A sampler that spends ``cpu_s`` of Python per index (a filter over metadata, say): the
    DataLoader calls it in the main process."""

    def __init__(self, length: int, cpu_s: float = 0.002):
        self.length, self.cpu_s = length, cpu_s

    def __iter__(self):
        for i in range(self.length):
            end = time.thread_time() + self.cpu_s
            while time.thread_time() < end:
                pass
            yield i

    def __len__(self) -> int:
        return self.length


def slow_sampler():
    """The slow-sampler loader: 2 ms of Python per index, batches of 8 (16 ms a batch), 2 workers."""
    from torch.utils.data import DataLoader

    return DataLoader(Vector(256), batch_size=8, sampler=SlowSampler(256), num_workers=2)


def keeps_every_batch():
    """The list-of-small-tensors loader with a step that keeps every batch (a list for logging, say):
    each kept batch holds its 256 descriptors, and the loop runs out of them on its own."""
    kept: list = []
    return many_small_tensors(), kept.append


# -- the outside set: loaders written the way users write them (tests/test_diagnose.py runs each from
# the command line). Files come from the folder in DLLAB_OUTSIDE_DATA, which the test fills.
def _data_folder():
    import os
    from pathlib import Path

    return Path(os.environ["DLLAB_OUTSIDE_DATA"])


def jpeg_folder(color_jitter: bool = True):
    """ImageFolder-style JPEGs decoded with PIL, RandomResizedCrop + flip + ColorJitter, 0 workers."""
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    steps = [transforms.RandomResizedCrop(128), transforms.RandomHorizontalFlip()]
    steps += [transforms.ColorJitter(0.4, 0.4, 0.4, 0.1)] if color_jitter else []
    steps += [transforms.ToTensor()]
    images = datasets.ImageFolder(str(_data_folder() / "jpegs"), transform=transforms.Compose(steps))
    return DataLoader(images, batch_size=16, shuffle=True, num_workers=0)


def jpeg_folder_without_jitter():
    """The same, ColorJitter left out: what following the stage advice measures."""
    return jpeg_folder(color_jitter=False)


def hf_style_dicts():
    """Dict samples with a string and a label, 4 ms of waiting each (a remote read), 0 workers."""
    from torch.utils.data import DataLoader

    return DataLoader(DictItems(256, wait_s=0.004), batch_size=8, num_workers=0)


class LinesOfFiles(IterableDataset):
    """An IterableDataset over text files, 2 ms of reading a line, unsharded."""

    def __init__(self, files: list):
        self.files = files

    def __iter__(self):
        for path in self.files:
            with open(path) as lines:
                for line in lines:
                    time.sleep(0.002)
                    yield torch.tensor([float(len(line))])


def iterable_over_files():
    from torch.utils.data import DataLoader

    files = sorted((_data_folder() / "lines").glob("*.txt"))
    return DataLoader(LinesOfFiles(files), batch_size=8, num_workers=0)


def fake_tokenize(text: str) -> list[int]:
    """A tokenizer's cost in Python: a pass per character, then one id per word."""
    total = 0
    for _ in range(8):
        for ch in text:
            total += ord(ch)
    return [hash(word) % 30000 for word in text.split()]


class Texts(Dataset):
    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> str:
        return " ".join(f"word{(i * 7 + k) % 97}" for k in range(120))


def tokenizing_collate(texts: list) -> torch.Tensor:
    ids = [fake_tokenize(t) for t in texts]
    width = max(len(x) for x in ids)
    return torch.tensor([x + [0] * (width - len(x)) for x in ids])


def text_with_tokenizer():
    """Tokenization in a collate_fn, 0 workers."""
    from torch.utils.data import DataLoader

    return DataLoader(Texts(512), batch_size=16, num_workers=0, collate_fn=tokenizing_collate)


class NamesIndex(Dataset):
    """A dataset holding a large Python list of file names (1.5 million), each sample cheap."""

    def __init__(self, count: int = 1_500_000, length: int = 64):
        self.names = [f"images/train/{i:08d}.jpg" for i in range(count)]
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(len(self.names[i]))])


def big_index_under_spawn():
    """The names pickled to every spawned worker at every epoch: short epochs of 8 batches."""
    from torch.utils.data import DataLoader

    return DataLoader(NamesIndex(), batch_size=8, num_workers=2, multiprocessing_context="spawn")


def slow_init(worker_id: int) -> None:
    """A worker_init_fn that opens a connection or loads a model: 0.3 s."""
    time.sleep(0.3)


def slow_worker_init():
    from torch.utils.data import DataLoader

    return DataLoader(Vector(64), batch_size=8, num_workers=2, worker_init_fn=slow_init)


class Burning(Dataset):
    """Samples that compute: 4 ms of Python each."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.thread_time() + 0.004
        while time.thread_time() < end:
            pass
        return torch.zeros(8)


class MatmulStep:
    """A training step on the CPU: tensor operations torch splits over its intra-op threads."""

    def __init__(self):
        self.w = torch.randn(256, 256)

    def __call__(self, batch) -> None:
        for _ in range(12):
            self.w @ self.w
