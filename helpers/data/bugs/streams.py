"""An ``IterableDataset`` in workers: sharding, and each worker's short last batch (notebook 18,
section 2).

Every worker gets its own copy of an iterable dataset and calls ``iter()`` on it; the DataLoader
does not split the stream. :class:`UnshardedStream` forgets that, so each worker yields every
sample; :class:`ShardedStream` takes every ``num_workers``-th sample from its worker id
(``get_worker_info()``). Batches are built *inside each worker* (``_IterableDatasetFetcher`` in
``torch/utils/data/_utils/fetch.py``), so each worker ends its shard with its own short batch, and
``drop_last=True`` drops one per worker. :func:`shard_tails` predicts both from the sizes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from ...timing.timeline import Timeline
from .randomness import KeepBatches, _check_length


class UnshardedStream(IterableDataset):
    """Sample ids ``0 … length − 1`` in order, read by every worker in full (the bug)."""

    def __init__(self, length: int):
        _check_length(length)
        self.length = length

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.length))


class ShardedStream(IterableDataset):
    """Sample ids ``0 … length − 1``; with workers, worker ``k`` of ``n`` yields ``k, k + n, …``."""

    def __init__(self, length: int):
        _check_length(length)
        self.length = length

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        if info is None:  # no workers: the main process reads the whole stream
            return iter(range(self.length))
        return iter(range(info.id, self.length, info.num_workers))  # every num_workers-th, from its id


@dataclass(frozen=True)
class StreamBatch:
    """One batch of sample ids as the loop received it."""

    epoch: int
    worker: int  #: -1: the main process
    ids: tuple[int, ...]


@dataclass(frozen=True)
class StreamRun:
    """What one recording delivered, with the loader settings that decide it."""

    batches: tuple[StreamBatch, ...]
    dataset: str  #: the dataset's class name
    length: int  #: the stream's (or dataset's) number of samples
    num_workers: int
    batch_size: int
    drop_last: bool
    epochs: int

    @property
    def times(self) -> Counter:
        """How many times each id arrived, over all epochs."""
        return Counter(i for b in self.batches for i in b.ids)

    @property
    def sizes(self) -> list[int]:
        """Every batch's size, in arrival order."""
        return [len(b.ids) for b in self.batches]

    @property
    def short(self) -> list[int]:
        """The sizes of the batches shorter than ``batch_size``, in arrival order."""
        return [n for n in self.sizes if n < self.batch_size]

    @property
    def lost_per_epoch(self) -> int:
        """Samples per epoch that never arrived."""
        times = self.times
        return sum(max(0, self.epochs - times.get(i, 0)) for i in range(self.length)) // self.epochs

    def arrivals(self) -> dict[int, int]:
        """How many ids arrived how many times per epoch: {times: ids}."""
        times = self.times
        return dict(sorted(Counter(times.get(i, 0) // self.epochs for i in range(self.length)).items()))

    def describe(self) -> str:
        spread = ", ".join(f"{n} ids × {k}" for k, n in self.arrivals().items())
        return (f"{len(self.batches)} batches, {len(self.short)} short {self.short}; ids per epoch: "
                f"{spread}; {self.lost_per_epoch} lost per epoch")


def stream_run(loader: Any, tl: Timeline, kept: KeepBatches | Sequence[Any]) -> StreamRun:
    """The batches of a recording of ``loader`` (:func:`helpers.record`) with the ids its step kept
    (each batch a tensor of ids, or a dict with ``"index"``, or a tuple/list whose first element is
    one), and the loader's settings."""
    batches = kept.batches if isinstance(kept, KeepBatches) else list(kept)
    if len(batches) != len(tl.batches):
        raise ValueError(f"{len(batches)} batches kept for {len(tl.batches)} recorded: record(loader, kept) "
                         "with a fresh KeepBatches()")
    out = []
    for record, batch in zip(tl.batches, batches, strict=True):
        ids = batch["index"] if isinstance(batch, dict) else batch[0] if isinstance(batch, (list, tuple)) \
            else batch
        out.append(StreamBatch(record.epoch, record.worker, tuple(int(i) for i in ids.tolist())))
    dataset = loader.dataset
    length = getattr(dataset, "length", None) or len(dataset)
    return StreamRun(tuple(out), type(dataset).__name__, length, loader.num_workers, loader.batch_size,
                     bool(loader.drop_last), len(tl.epochs))


def shard_sizes(length: int, num_workers: int) -> list[int]:
    """How many ids each worker's shard holds when worker ``k`` takes ``k, k + n, …``."""
    return [len(range(k, length, num_workers)) for k in range(max(num_workers, 1))]


def shard_tails(length: int, num_workers: int, batch_size: int) -> dict[str, Any]:
    """What batching inside each worker predicts for a sharded stream: the shards' sizes, the size
    of each worker's last (short) batch, how many batches are short, and how many samples
    ``drop_last=True`` drops — against a map-style loader of the same length, which batches in the
    main process's sampler and has at most one short batch."""
    shards = shard_sizes(length, num_workers)
    tails = [s % batch_size for s in shards]
    return {"shards": shards, "tails": tails, "short_batches": sum(1 for t in tails if t),
            "dropped": sum(tails), "map_style_short": int(length % batch_size > 0),
            "map_style_dropped": length % batch_size}
