"""Workloads with known costs, importable (and so picklable) under every start method.

Every dataset here lives in a module, never in a notebook cell: under ``spawn``
(macOS, Windows) and ``forkserver`` (the Linux default from Python 3.14) a
worker process re-imports the dataset's class by name, and a class defined in
``__main__`` of a notebook kernel cannot be found there.

Two kinds of cost are modelled:

* **sleep** - waiting that frees the CPU, like I/O (disk, network, a database);
* **busy** - CPU work, like decoding or augmenting: the thread spins until it has
  used that much *CPU time*, so on a crowded machine it takes longer in wall time,
  exactly like real CPU work.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Dataset, IterableDataset, TensorDataset, get_worker_info


def burn_cpu(cpu_s: float) -> None:
    """Spin until this thread has used ``cpu_s`` seconds of CPU time (CPU-bound work)."""
    if cpu_s <= 0:
        return
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def pay(sleep_s: float = 0.0, busy_s: float = 0.0) -> None:
    """Pay an I/O-like cost (``sleep_s`` of waiting) and a CPU-like cost (``busy_s`` of CPU)."""
    if sleep_s > 0:
        time.sleep(sleep_s)
    burn_cpu(busy_s)


def _check_costs(**costs: float) -> None:
    for name, value in costs.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0 seconds, got {value}")


class _Sleeping:
    """``length`` items that each take ``load_s`` seconds of sleep (shared by the map-style
    and the iterable variant)."""

    def __init__(self, length: int, load_s: float):
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        _check_costs(load_s=load_s)
        self.length = length
        self.load_s = load_s

    def __len__(self) -> int:
        return self.length


class SleepDataset(_Sleeping, Dataset):
    """``length`` items; item ``i`` is the integer ``i``, returned after ``load_s`` seconds of sleep.

    The blog experiment's dataset (SOURCES.md section 2): 20 items, 1 s each.
    """

    def __getitem__(self, index: int) -> int:
        time.sleep(self.load_s)
        return int(index)


class TaggedDataset(SleepDataset):
    """Like :class:`SleepDataset`, but item ``i`` says who built it:
    ``{"index": i, "worker": worker id or -1, "pid": process id, "tag": self.tag}``.

    ``tag`` is an attribute a ``worker_init_fn`` (or the main process) may set, to
    show which copy of the dataset a worker holds.
    """

    def __init__(self, length: int, load_s: float = 0.0, tag: str = ""):
        super().__init__(length, load_s)
        self.tag = tag

    def __getitem__(self, index: int) -> dict[str, int | str]:
        time.sleep(self.load_s)
        info = get_worker_info()
        return {"index": int(index), "worker": -1 if info is None else info.id,
                "pid": os.getpid(), "tag": self.tag}


class StragglerDataset(SleepDataset):
    """:class:`SleepDataset` where one item in ``every`` is ``factor`` times slower
    (items ``i`` with ``i % every == offset``): a few slow samples among many."""

    def __init__(self, length: int, load_s: float, *, every: int = 20, factor: float = 10.0,
                 offset: int = 0):
        super().__init__(length, load_s)
        if every < 1 or factor < 1:
            raise ValueError(f"every must be >= 1 and factor >= 1, got {every} and {factor}")
        self.every, self.factor, self.offset = every, factor, offset

    def is_slow(self, index: int) -> bool:
        return index % self.every == self.offset % self.every

    def __getitem__(self, index: int) -> int:
        time.sleep(self.load_s * (self.factor if self.is_slow(index) else 1.0))
        return int(index)


class WorkDataset(Dataset):
    """A map-style dataset with a configurable cost per request and per item.

    Each ``__getitem__`` call is one *request* for one item, so it pays
    ``request_sleep_s`` / ``request_busy_s`` (one query, one file open, one HTTP
    round trip) plus ``item_sleep_s`` / ``item_busy_s`` (the per-sample work).

    Item ``i`` is the integer ``i`` when ``item_shape`` is ``()``; otherwise a
    float32 tensor of ``item_shape`` filled with ``i`` (so the payload has a real
    size in shared memory and its content can be checked).

    ``slow_every=k`` (k >= 1) makes items ``i % k == 0`` cost ``slow_factor`` times the
    per-item cost: stragglers among many (0 = none).
    """

    def __init__(
        self,
        length: int,
        *,
        item_sleep_s: float = 0.0,
        item_busy_s: float = 0.0,
        request_sleep_s: float = 0.0,
        request_busy_s: float = 0.0,
        item_shape: Sequence[int] = (),
        slow_every: int = 0,
        slow_factor: float = 1.0,
    ):
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        if slow_every < 0 or slow_factor < 1:
            raise ValueError(f"slow_every must be >= 0 and slow_factor >= 1, "
                             f"got {slow_every} and {slow_factor}")
        _check_costs(
            item_sleep_s=item_sleep_s,
            item_busy_s=item_busy_s,
            request_sleep_s=request_sleep_s,
            request_busy_s=request_busy_s,
        )
        self.length = length
        self.item_sleep_s = item_sleep_s
        self.item_busy_s = item_busy_s
        self.request_sleep_s = request_sleep_s
        self.request_busy_s = request_busy_s
        self.item_shape = tuple(item_shape)
        self.slow_every = slow_every
        self.slow_factor = slow_factor

    def __len__(self) -> int:
        return self.length

    def _factor(self, index: int) -> float:
        return self.slow_factor if self.slow_every and index % self.slow_every == 0 else 1.0

    def _make(self, index: int) -> int | torch.Tensor:
        if not self.item_shape:
            return int(index)
        return torch.full(self.item_shape, float(index), dtype=torch.float32)

    def __getitem__(self, index: int) -> int | torch.Tensor:
        pay(self.request_sleep_s, self.request_busy_s)
        factor = self._factor(index)
        pay(self.item_sleep_s * factor, self.item_busy_s * factor)
        return self._make(index)


class BatchedWorkDataset(WorkDataset):
    """:class:`WorkDataset` plus ``__getitems__``: one request for the whole batch.

    The DataLoader calls ``__getitems__(indices)`` once per batch when it exists,
    so the request cost is paid once per batch while the per-item cost is still
    paid for every item.
    """

    def __getitems__(self, indices: list[int]) -> list[int | torch.Tensor]:
        pay(self.request_sleep_s, self.request_busy_s)
        factors = sum(self._factor(i) for i in indices)
        pay(self.item_sleep_s * factors, self.item_busy_s * factors)
        return [self._make(i) for i in indices]


class SleepStream(_Sleeping, IterableDataset):
    """An iterable dataset of ``length`` integers, each after ``load_s`` of sleep.

    With workers, worker ``k`` of ``n`` yields items ``k, k+n, k+2n, ...`` so that
    every item is produced exactly once.
    """

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for index in range(start, self.length, step):
            time.sleep(self.load_s)
            yield index


class TutorialDataset(Dataset):
    """The PyTorch data-loading tutorial's synthetic images (SOURCES.md section 1).

    Item ``i``: a ``randn(shape)`` image (seeded by ``seed + i``, so repeatable)
    and a label in ``[0, num_classes)``, after a simulated transform of
    ``delay_s`` seconds of sleep. Defaults: 512 items of 3x224x224, 5 ms each.
    ``uint8=True``: the image as raw bytes (uniform in 0..255, uint8), a quarter of
    the float32 size, for pipelines that normalise on the device.
    """

    def __init__(
        self,
        length: int = 512,
        *,
        shape: Sequence[int] = (3, 224, 224),
        delay_s: float = 0.005,
        num_classes: int = 10,
        seed: int = 0,
        uint8: bool = False,
    ):
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        _check_costs(delay_s=delay_s)
        self.length = length
        self.shape = tuple(shape)
        self.delay_s = delay_s
        self.num_classes = num_classes
        self.seed = seed
        self.uint8 = uint8

    def __len__(self) -> int:
        return self.length

    def _label(self, index: int) -> int:
        return (index * 7 + self.seed) % self.num_classes

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.delay_s)
        generator = torch.Generator().manual_seed(self.seed + int(index))
        if self.uint8:
            image = torch.randint(0, 256, self.shape, generator=generator, dtype=torch.uint8)
            return image, self._label(index)
        return torch.randn(self.shape, generator=generator), self._label(index)


class BatchedTutorialDataset(TutorialDataset):
    """The tutorial's batched variant: ``__getitems__`` builds the whole batch with one
    vectorised call after ONE ``delay_s`` for the whole batch (not one per item).

    That single delay is where the tutorial's ~10x comes from; notebook 06 measures
    when batching a fetch really pays off.
    """

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        time.sleep(self.delay_s)
        generator = torch.Generator().manual_seed(self.seed + int(indices[0]))
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
    """MNIST-shaped tensors held in memory (the forum case, SOURCES.md section 3).

    ``num_samples`` x 784 float32 inputs and int64 labels in ``[0, 10)``. The
    labels depend on the inputs (a fixed random linear rule), so a model can learn.
    """
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.rand((num_samples, 784), generator=generator)
    rule = torch.randn((784, 10), generator=generator)
    labels = (inputs @ rule).argmax(dim=1)
    return TensorDataset(inputs, labels)
