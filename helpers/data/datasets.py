"""Workloads with known costs, importable (and so picklable) under every start method.

Every dataset here lives in a module, never in a notebook cell: under ``spawn``
(macOS, Windows) and ``forkserver`` (the Linux default from Python 3.14) a
worker process re-imports the dataset's class by name, and a class defined in
``__main__`` of a notebook kernel cannot be found there.

Two kinds of cost, named the same way everywhere in the lab:

* ``..._wait_s`` - waiting that frees the CPU, like I/O (disk, network, a database):
  the thread sleeps;
* ``..._cpu_s`` - CPU work, like decoding or augmenting: the thread spins until it has
  used that much *CPU time*, so on a crowded machine it takes longer in wall time,
  exactly like real CPU work.

Each is paid per ``item`` (every sample) or per ``request`` (every ``__getitem__`` call,
or every ``__getitems__`` call for a whole batch).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, TensorDataset, get_worker_info

from ..system import burn_cpu


def pay(wait_s: float = 0.0, cpu_s: float = 0.0) -> None:
    """Pay an I/O-like cost (``wait_s`` of sleeping) and a CPU-like cost (``cpu_s`` of CPU time)."""
    if wait_s > 0:
        time.sleep(wait_s)
    burn_cpu(cpu_s)


def _check_costs(**costs: float) -> None:
    for name, value in costs.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0 seconds, got {value}")


def _check_length(length: int) -> None:
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be an integer >= 1, got {length!r}")


class WorkDataset(Dataset):
    """A map-style dataset with a stated cost per request and per item.

    Each ``__getitem__`` call is one *request* for one item, so it pays
    ``request_wait_s`` / ``request_cpu_s`` (one query, one file open, one HTTP round
    trip) plus ``item_wait_s`` / ``item_cpu_s`` (the per-sample work).

    Item ``i`` is the integer ``i`` when ``item_shape`` is ``()``; otherwise a float32
    tensor of ``item_shape`` filled with ``i`` (so the payload has a real size in
    shared memory and its content can be checked).

    ``slow_every=k`` (k >= 1) makes items ``i % k == 0`` cost ``slow_factor`` times the
    per-item cost: stragglers among many (0 = none).

    The blog experiment (a 2020 post on choosing ``num_workers``) is ``WorkDataset(20, item_wait_s=1.0)``.
    """

    def __init__(
        self,
        length: int,
        *,
        item_wait_s: float = 0.0,
        item_cpu_s: float = 0.0,
        request_wait_s: float = 0.0,
        request_cpu_s: float = 0.0,
        item_shape: Sequence[int] = (),
        slow_every: int = 0,
        slow_factor: float = 1.0,
    ):
        _check_length(length)
        if slow_every < 0 or slow_factor < 1:
            raise ValueError(f"slow_every must be >= 0 and slow_factor >= 1, "
                             f"got {slow_every} and {slow_factor}")
        _check_costs(item_wait_s=item_wait_s, item_cpu_s=item_cpu_s, request_wait_s=request_wait_s,
                     request_cpu_s=request_cpu_s)
        self.length = length
        self.item_wait_s = item_wait_s
        self.item_cpu_s = item_cpu_s
        self.request_wait_s = request_wait_s
        self.request_cpu_s = request_cpu_s
        self.item_shape = tuple(item_shape)
        self.slow_every = slow_every
        self.slow_factor = slow_factor

    def __len__(self) -> int:
        return self.length

    def is_slow(self, index: int) -> bool:
        return bool(self.slow_every) and index % self.slow_every == 0

    def _factor(self, index: int) -> float:
        return self.slow_factor if self.is_slow(index) else 1.0

    def mean_item_s(self) -> float:
        """The average per-item cost (wait + CPU), stragglers included at their share."""
        slow_share = (self.slow_factor - 1) / self.slow_every if self.slow_every else 0.0
        return (self.item_wait_s + self.item_cpu_s) * (1 + slow_share)

    def _make(self, index: int) -> int | torch.Tensor:
        if not self.item_shape:
            return int(index)
        return torch.full(self.item_shape, float(index), dtype=torch.float32)

    def __getitem__(self, index: int) -> int | torch.Tensor:
        pay(self.request_wait_s, self.request_cpu_s)
        factor = self._factor(index)
        pay(self.item_wait_s * factor, self.item_cpu_s * factor)
        return self._make(index)


class BatchedWorkDataset(WorkDataset):
    """:class:`WorkDataset` plus ``__getitems__``: one request for the whole batch.

    With automatic batching (``batch_size`` set) the DataLoader calls
    ``__getitems__(indices)`` once per batch when it exists, and still passes the list
    it returns to ``collate_fn``. The request cost is paid once per batch; the per-item
    cost is still paid for every item.
    """

    def __getitems__(self, indices: list[int]) -> list[int | torch.Tensor]:
        pay(self.request_wait_s, self.request_cpu_s)
        factors = sum(self._factor(i) for i in indices)
        pay(self.item_wait_s * factors, self.item_cpu_s * factors)
        return [self._make(i) for i in indices]


class TaggedDataset(Dataset):
    """Item ``i`` says who built it: ``{"index": i, "worker": worker id or -1, "pid": process
    id, "tag": self.tag}``, after ``item_wait_s`` of waiting.

    ``tag`` is an attribute a ``worker_init_fn`` (or the main process) may set, to show
    which copy of the dataset a worker holds.
    """

    def __init__(self, length: int, item_wait_s: float = 0.0, tag: str = ""):
        _check_length(length)
        _check_costs(item_wait_s=item_wait_s)
        self.length = length
        self.item_wait_s = item_wait_s
        self.tag = tag

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, int | str]:
        time.sleep(self.item_wait_s)
        info = get_worker_info()
        return {"index": int(index), "worker": -1 if info is None else info.id,
                "pid": os.getpid(), "tag": self.tag}


class WorkStream(IterableDataset):
    """An iterable dataset of ``length`` integers, each after ``item_wait_s`` of waiting.

    With workers, worker ``k`` of ``n`` yields items ``k, k+n, k+2n, ...`` so that every
    item is produced exactly once (an iterable dataset must shard itself).
    """

    def __init__(self, length: int, item_wait_s: float = 0.0):
        _check_length(length)
        _check_costs(item_wait_s=item_wait_s)
        self.length = length
        self.item_wait_s = item_wait_s

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for index in range(start, self.length, step):
            time.sleep(self.item_wait_s)
            yield index


class TutorialDataset(Dataset):
    """The PyTorch data-loading tutorial's synthetic images ("Data Loading Optimization").

    Item ``i``: a ``randn(shape)`` image (seeded by ``seed + i``, so repeatable) and a
    label in ``[0, num_classes)``, after a simulated transform of ``item_wait_s`` seconds
    of sleep. Defaults: 512 items of 3x224x224, 5 ms each. ``uint8=True``: the image as
    raw bytes (uniform in 0..255, uint8), a quarter of the float32 size, for pipelines
    that normalise on the device.
    """

    def __init__(self, length: int = 512, *, shape: Sequence[int] = (3, 224, 224),
                 item_wait_s: float = 0.005, num_classes: int = 10, seed: int = 0, uint8: bool = False):
        _check_length(length)
        _check_costs(item_wait_s=item_wait_s)
        self.length = length
        self.shape = tuple(shape)
        self.item_wait_s = item_wait_s
        self.num_classes = num_classes
        self.seed = seed
        self.uint8 = uint8

    def __len__(self) -> int:
        return self.length

    def _label(self, index: int) -> int:
        return (index * 7 + self.seed) % self.num_classes

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.item_wait_s)
        generator = torch.Generator().manual_seed(self.seed + int(index))
        if self.uint8:
            image = torch.randint(0, 256, self.shape, generator=generator, dtype=torch.uint8)
            return image, self._label(index)
        return torch.randn(self.shape, generator=generator), self._label(index)


class BatchedTutorialDataset(TutorialDataset):
    """The tutorial's batched variant: ``__getitems__`` builds the whole batch with one
    vectorised call after ONE ``item_wait_s`` for the whole batch (not one per item).

    That single wait is where the tutorial's ~10x comes from; notebook 08 measures when
    batching a fetch really pays off.
    """

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        time.sleep(self.item_wait_s)
        generator = torch.Generator().manual_seed(self.seed + int(indices[0]))
        if self.uint8:
            images = torch.randint(0, 256, (len(indices), *self.shape), generator=generator,
                                   dtype=torch.uint8)
        else:
            images = torch.randn((len(indices), *self.shape), generator=generator)
        return [(image, self._label(i)) for image, i in zip(images, indices, strict=True)]


class BatchedTensorDataset(TensorDataset):
    """A ``TensorDataset`` with ``__getitems__``: one tensor index per batch instead of one
    ``__getitem__`` call per sample.

    The DataLoader still collates the rows it returns (``default_collate`` stacks
    them); pass a ``BatchSampler`` with ``batch_size=None`` to skip that too.
    """

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, ...]]:
        index = torch.as_tensor(indices)
        return list(zip(*(tensor[index] for tensor in self.tensors), strict=True))


def mnist_like(num_samples: int = 60_000, *, seed: int = 0) -> TensorDataset:
    """MNIST-shaped tensors held in memory (the forum case: "why is my training slower with num_workers?").

    ``num_samples`` x 784 float32 inputs and int64 labels in ``[0, 10)``. The
    labels depend on the inputs (a fixed random linear rule), so a model can learn.
    """
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.rand((num_samples, 784), generator=generator)
    rule = torch.randn((784, 10), generator=generator)
    labels = (inputs @ rule).argmax(dim=1)
    return TensorDataset(inputs, labels)


class HostTransform:
    """A costly per-batch transform in the main process (e.g. augmentation on the whole
    batch): ``cpu_s`` of CPU work plus ``wait_s`` of waiting; returns the batch unchanged."""

    def __init__(self, cpu_s: float = 0.0, wait_s: float = 0.0):
        _check_costs(cpu_s=cpu_s, wait_s=wait_s)
        self.cpu_s = cpu_s
        self.wait_s = wait_s

    def __call__(self, batch: Any) -> Any:
        pay(self.wait_s, self.cpu_s)
        return batch

    def __repr__(self) -> str:
        return f"HostTransform(cpu_s={self.cpu_s}, wait_s={self.wait_s})"
