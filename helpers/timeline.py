"""The instrument: when every batch was fetched, by which worker, and what the loop did.

:func:`record` iterates a DataLoader the way a training loop does and measures,
for every batch:

* in the process that builds it (a worker, or the main process with 0 workers):
  ``fetch_start`` / ``fetch_end`` around the dataset access and ``collate_fn``;
* in the loop: ``wait_start`` (the loop asks for the next batch), ``ready`` (the
  batch is in hand) and ``step_end`` (the step on it returned);
* with ``pin_memory=True``: ``pin_start`` / ``pin_end`` in the pinning thread;
* with ``device=``: ``copy_end``, when the loop's copy of the batch to the device
  finished (the device is synchronised before the clock is read);
* with ``wrap=`` (a prefetcher around the loader's iterator, e.g.
  :class:`helpers.ThreadPrefetcher`): the prefetcher's own spans, one row each.

All times are seconds on one clock (``time.perf_counter``, system-wide on Linux,
macOS and Windows), relative to the recording's start.

How it works, in one paragraph: in each worker (through a wrapper around the
loader's ``worker_init_fn``), and on the main process's own fetcher with 0
workers, the fetch is wrapped so that the batch leaves the worker inside a small
envelope that carries its timings. The envelope travels the way the batch would
(shared memory, the pinning thread, which pins what it holds), and :func:`record`
takes the batch out before it calls ``step``. The loader's dataset, sampler and
``collate_fn`` are left alone, so ``get_worker_info()`` and ``__getitems__`` behave
as always; ``worker_init_fn`` is restored when the recording ends.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter as clock
from typing import Any

from torch.utils.data import DataLoader, get_worker_info
from torch.utils.data._utils import fetch as _fetch_module
from torch.utils.data._utils.pin_memory import pin_memory as _pin_memory
from torch.utils.data.dataloader import _SingleProcessDataLoaderIter

from .system import default_start_method
from .transfer import synchronize, to_device

MAIN_PROCESS = -1  #: the ``worker`` of a batch fetched by the main process (0 workers)


# --------------------------------------------------------------------------
# What travels with a batch
# --------------------------------------------------------------------------
class _Stamped:
    """A batch in an envelope that carries its fetch times (and, once pinned, pin times)."""

    def __init__(self, data, worker, pid, fetch_start, fetch_end, seq, indices, worker_ready):
        self.data = data
        self.worker = worker
        self.pid = pid
        self.fetch_start = fetch_start
        self.fetch_end = fetch_end
        self.seq = seq
        self.indices = indices
        self.worker_ready = worker_ready
        self.pin_start: float | None = None
        self.pin_end: float | None = None

    def pin_memory(self, device=None):
        # The DataLoader's pinning thread calls this instead of pinning the envelope:
        # pin the batch inside exactly as the DataLoader would, and time it.
        start = clock()
        self.data = _pin_memory(self.data, device)
        self.pin_start, self.pin_end = start, clock()
        return self


def map_data(item: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to a batch, inside the instrument's envelope when there is one.

    Prefetchers that :func:`record` wraps around a loader's iterator (``wrap=``) see
    envelopes; they transform the batch with this so the timings travel on.
    """
    if isinstance(item, _Stamped):
        item.data = fn(item.data)
        return item
    return fn(item)


def _indices_of(possibly_batched_index) -> tuple[int, ...] | None:
    """The sample indices of a fetch; None for iterable datasets (which have none)."""
    if isinstance(possibly_batched_index, int):
        return (possibly_batched_index,)
    try:
        values = tuple(possibly_batched_index)
    except TypeError:
        return None
    if values and all(isinstance(v, int) for v in values):
        return values
    return None


class _ProcessState:
    """Per-process bookkeeping of the hooked fetch (one per worker process)."""

    def __init__(self):
        self.seq = 0
        self.ready = clock()


_STATE: _ProcessState | None = None  # in worker processes only


def _stamp(fetch: Callable, possibly_batched_index, worker: int, state: _ProcessState) -> _Stamped:
    start = clock()
    data = fetch(possibly_batched_index)  # StopIteration and errors pass through untouched
    end = clock()
    stamped = _Stamped(data, worker, os.getpid(), start, end, state.seq,
                       _indices_of(possibly_batched_index), state.ready)
    state.seq += 1
    return stamped


def _hooked_fetch(original):
    @functools.wraps(original)
    def fetch(self, possibly_batched_index):
        info = get_worker_info()
        if info is None or _STATE is None:  # not a recording worker: behave as torch does
            return original(self, possibly_batched_index)
        return _stamp(functools.partial(original, self), possibly_batched_index, info.id, _STATE)

    fetch.__dlllab_hooked__ = True
    return fetch


def _install_worker_hooks() -> None:
    """Wrap the fetchers' ``fetch`` in this (worker) process; idempotent."""
    global _STATE
    _STATE = _ProcessState()
    for cls in (_fetch_module._MapDatasetFetcher, _fetch_module._IterableDatasetFetcher):
        if not getattr(cls.fetch, "__dlllab_hooked__", False):
            cls.fetch = _hooked_fetch(cls.fetch)


class RecordingWorkerInit:
    """The ``worker_init_fn`` that :func:`record` installs: hooks the worker's fetch,
    then calls the loader's own ``worker_init_fn`` (if any). Picklable under spawn."""

    def __init__(self, user_init: Callable[[int], Any] | None):
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        _install_worker_hooks()
        if self.user_init is not None:
            self.user_init(worker_id)


class _MainProcessFetch:
    """Replaces the main process fetcher's ``fetch`` (0 workers) for one iterator."""

    def __init__(self, fetch: Callable):
        self.fetch = fetch
        self.state = _ProcessState()

    def __call__(self, possibly_batched_index):
        return _stamp(self.fetch, possibly_batched_index, MAIN_PROCESS, self.state)


# --------------------------------------------------------------------------
# What record() returns
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchRecord:
    """One batch. Times in seconds since the recording started."""

    epoch: int
    index: int  #: arrival order within the epoch (0 = first batch the loop received)
    worker: int  #: worker id, or -1 (``MAIN_PROCESS``) when the main process fetched it
    fetch_start: float  #: the fetching process starts the dataset access
    fetch_end: float  #: ``collate_fn`` returned
    wait_start: float  #: the loop asks for the batch (calls ``next``)
    ready: float  #: the batch is in the loop's hands
    step_end: float  #: the step on it returned
    worker_seq: int  #: batches this process had fetched before this one
    indices: tuple[int, ...] | None  #: the sample indices (None for iterable datasets)
    pid: int  #: the fetching process
    pin_start: float | None = None  #: pinning thread starts pinning it (pin_memory=True)
    pin_end: float | None = None
    copy_end: float | None = None  #: the loop's copy to the device finished (``device=``)

    @property
    def wait_s(self) -> float:
        """How long the loop waited for this batch."""
        return self.ready - self.wait_start

    @property
    def step_start(self) -> float:
        """When the step began: after the loop's device copy, if it made one."""
        return self.ready if self.copy_end is None else self.copy_end

    @property
    def step_s(self) -> float:
        return self.step_end - self.step_start

    @property
    def copy_s(self) -> float:
        """The loop's own copy to the device (0.0 when it made none)."""
        return 0.0 if self.copy_end is None else self.copy_end - self.ready

    @property
    def fetch_s(self) -> float:
        return self.fetch_end - self.fetch_start


@dataclass(frozen=True)
class EpochRecord:
    """One epoch: creating the iterator (which starts workers) and the first batch."""

    epoch: int
    iter_start: float  #: the loop calls ``iter(loader)``
    iter_end: float  #: ``iter`` returned (workers launched, or reused when persistent)
    first_ready: float | None  #: the epoch's first batch in hand (None: no batch)
    end: float  #: the epoch's loop ended
    #: worker id -> when that worker process was ready to fetch (ran its init); only
    #: workers started in this epoch appear (persistent workers start once)
    worker_ready: dict[int, float] = field(default_factory=dict)

    @property
    def startup_s(self) -> float:
        return self.iter_end - self.iter_start

    @property
    def first_batch_s(self) -> float | None:
        """From ``iter(loader)`` to the first batch in hand."""
        return None if self.first_ready is None else self.first_ready - self.iter_start


@dataclass(frozen=True)
class Span:
    """Work done beside the loader by a prefetcher that :func:`record` wrapped (``wrap=``):
    a transform in a background thread, a copy on a side CUDA stream. Seconds since
    the recording started."""

    row: str  #: the timeline row, e.g. "prefetch thread" or "copy stream"
    kind: str  #: what was done, e.g. "transform" or "copy"
    start: float
    end: float
    epoch: int
    batch: int  #: the prefetcher's count of batches handed out in this epoch (0-based)


@dataclass
class Timeline:
    """What :func:`record` measured: every batch, every epoch, and the loader's settings."""

    batches: list[BatchRecord]
    epochs: list[EpochRecord]
    config: dict[str, Any]
    spans: list[Span] = field(default_factory=list)

    # -- derived views ------------------------------------------------------
    @property
    def wall_s(self) -> float:
        """From the first ``iter(loader)`` to the end of the last epoch's loop."""
        if not self.epochs:
            return 0.0
        return self.epochs[-1].end - self.epochs[0].iter_start

    @property
    def workers(self) -> list[int]:
        """The fetching processes seen: worker ids, or ``[-1]`` for the main process."""
        return sorted({b.worker for b in self.batches})

    def intervals(self) -> list[float]:
        """Per batch, the time since the loop's previous iteration ended, in arrival order.

        For an epoch's first batch this is measured from ``iter(loader)``, so it
        includes worker start-up (the blog experiment's first bar).
        """
        out = []
        for epoch in self.epochs:
            previous = epoch.iter_start
            for b in self.epoch_batches(epoch.epoch):
                out.append(b.step_end - previous)
                previous = b.step_end
        return out

    def steady_intervals(self) -> list[float]:
        """:meth:`intervals` without each epoch's first batch (start-up excluded)."""
        out = []
        for epoch in self.epochs:
            ends = [b.step_end for b in self.epoch_batches(epoch.epoch)]
            out.extend(later - earlier for earlier, later in zip(ends, ends[1:], strict=False))
        return out

    def epoch_batches(self, epoch: int) -> list[BatchRecord]:
        return [b for b in self.batches if b.epoch == epoch]

    def worker_startup_s(self, epoch: int = 0) -> float:
        """From ``iter(loader)`` until the last worker started in ``epoch`` was ready
        (0.0 when none started: 0 workers, or persistent workers already running)."""
        record_ = self.epochs[epoch]
        if not record_.worker_ready:
            return 0.0
        return max(record_.worker_ready.values()) - record_.iter_start

    def wait_s(self) -> float:
        """Time the loop had no batch in hand: creating iterators plus waiting in ``next``."""
        return sum(e.startup_s for e in self.epochs) + sum(b.wait_s for b in self.batches)

    def window(self, first_epoch: int) -> Timeline:
        """The same recording from ``first_epoch`` on (e.g. without a warm-up epoch);
        times keep their origin."""
        return Timeline(batches=[b for b in self.batches if b.epoch >= first_epoch],
                        epochs=[e for e in self.epochs if e.epoch >= first_epoch],
                        config=self.config,
                        spans=[s for s in self.spans if s.epoch >= first_epoch])

    def interval_percentiles(self, percents: tuple[int, ...] = (50, 95, 99)) -> dict[int, float]:
        """Percentiles of :meth:`steady_intervals` (each epoch's first batch excluded), in
        seconds: the tail a straggler puts on the loop's step time."""
        steady = sorted(self.steady_intervals())
        if not steady:
            return {p: math.nan for p in percents}
        if len(steady) == 1:
            return {p: steady[0] for p in percents}
        cuts = statistics.quantiles(steady, n=100, method="inclusive")
        return {p: cuts[p - 1] if 0 < p < 100 else (steady[0] if p == 0 else steady[-1]) for p in percents}

    def blocked_behind(self, batch: BatchRecord) -> int:
        """How many later batches (arrival order) were already built while the loop waited
        for ``batch``: head-of-line blocking, in batches."""
        return sum(1 for c in self.epoch_batches(batch.epoch)
                   if c.index > batch.index and c.fetch_end <= batch.ready)

    def runahead(self) -> dict[int, int]:
        """Per fetching process, the most batches it had *started* for later loop iterations
        at the moment the loop asked for a batch: how far ahead it ran (``prefetch_factor``
        caps it per worker)."""
        out: dict[int, int] = {}
        for epoch in self.epochs:
            mine = self.epoch_batches(epoch.epoch)
            for b in mine:
                for w in {c.worker for c in mine}:
                    ahead = sum(1 for c in mine
                                if c.worker == w and c.index > b.index and c.fetch_start < b.wait_start)
                    out[w] = max(out.get(w, 0), ahead)
        return dict(sorted(out.items()))

    def peak_buffered(self) -> int:
        """The most batches that were built (fetch ended) but not yet taken by the loop,
        at any moment: what the pipeline held in memory beyond the batch in use."""
        events = []
        for b in self.batches:
            if b.fetch_end < b.ready:
                events.append((b.fetch_end, 1))
                events.append((b.ready, -1))
        level = peak = 0
        for _, change in sorted(events, key=lambda e: (e[0], e[1])):
            level += change
            peak = max(peak, level)
        return peak

    def summary(self) -> dict[str, Any]:
        """Headline numbers (seconds, fractions of wall time, batches per second).

        * ``mean_step_interval_s``: mean time between consecutive loop iterations,
          each epoch's first batch excluded (see ``first_batch_s``);
        * ``wait_fraction``: :meth:`wait_s` / ``wall_s``;
        * ``first_batch_s``: epoch 0, from ``iter(loader)`` to its first batch;
        * ``worker_busy``: per fetching process (``-1`` = main), fetch time / wall time.
        """
        wall = self.wall_s
        steady = self.steady_intervals()
        all_intervals = self.intervals()
        busy: dict[int, float] = {}
        for b in self.batches:
            busy[b.worker] = busy.get(b.worker, 0.0) + b.fetch_s
        first = self.epochs[0].first_batch_s if self.epochs else None
        return {
            "batches": len(self.batches),
            "epochs": len(self.epochs),
            "wall_s": wall,
            "mean_step_interval_s": _mean(steady or all_intervals),
            "median_step_interval_s": _median(steady or all_intervals),
            "wait_fraction": self.wait_s() / wall if wall > 0 else math.nan,
            "batches_per_s": len(self.batches) / wall if wall > 0 else math.nan,
            "first_batch_s": first if first is not None else math.nan,
            "first_batch_s_per_epoch": [
                e.first_batch_s if e.first_batch_s is not None else math.nan for e in self.epochs
            ],
            "startup_s_per_epoch": [e.startup_s for e in self.epochs],
            "mean_step_s": _mean([b.step_s for b in self.batches]),
            "mean_copy_s": _mean([b.copy_s for b in self.batches]),
            "mean_fetch_s": _mean([b.fetch_s for b in self.batches]),
            "worker_busy": {w: t / wall if wall > 0 else math.nan for w, t in sorted(busy.items())},
        }

    def describe(self) -> str:
        """One line of the loader's settings, e.g. for a plot title."""
        c = self.config
        parts = [f"num_workers={c.get('num_workers')}"]
        if c.get("num_workers"):
            parts.append(f"prefetch_factor={c.get('prefetch_factor')}")
        parts.append(f"batch_size={c.get('batch_size')}")
        for flag in ("persistent_workers", "pin_memory"):
            if c.get(flag):
                parts.append(flag)
        if c.get("in_order") is False:
            parts.append("in_order=False")
        if c.get("num_workers"):
            parts.append(str(c.get("start_method")))
        return ", ".join(parts)

    # -- export -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "epochs": [asdict(e) for e in self.epochs],
            "batches": [asdict(b) for b in self.batches],
            "spans": [asdict(s) for s in self.spans],
        }

    def to_chrome_trace(self, path: str | os.PathLike) -> Path:
        """Write Chrome-trace JSON (open it in https://ui.perfetto.dev or chrome://tracing).

        One track for the training loop (start-up, waiting, stepping), one per
        worker (fetches), and one for the pinning thread when there is pinning.
        """
        loop_tid, pin_tid = 0, 1

        def worker_tid(worker: int) -> int:
            return 2 if worker == MAIN_PROCESS else worker + 3

        def span(name: str, tid: int, start: float, end: float, **args: Any) -> dict[str, Any]:
            return {"name": name, "ph": "X", "pid": 1, "tid": tid, "ts": start * 1e6,
                    "dur": max(end - start, 0.0) * 1e6, "args": args}

        names = {loop_tid: "training loop"}
        events: list[dict[str, Any]] = []
        for e in self.epochs:
            events.append(span(f"iter() epoch {e.epoch}", loop_tid, e.iter_start, e.iter_end))
            for worker, ready in e.worker_ready.items():
                events.append(span(f"worker start-up (epoch {e.epoch})", worker_tid(worker),
                                   e.iter_start, ready))
        for b in self.batches:
            tid = worker_tid(b.worker)
            names[tid] = "main process fetch" if b.worker == MAIN_PROCESS else f"worker {b.worker}"
            label = f"e{b.epoch} b{b.index}"
            events.append(span(f"fetch {label}", tid, b.fetch_start, b.fetch_end,
                               indices=list(b.indices) if b.indices else None))
            events.append(span(f"wait {label}", loop_tid, b.wait_start, b.ready))
            if b.copy_end is not None:
                events.append(span(f"copy {label}", loop_tid, b.ready, b.copy_end))
            events.append(span(f"step {label}", loop_tid, b.step_start, b.step_end))
            if b.pin_start is not None and b.pin_end is not None:
                names[pin_tid] = "pin_memory thread"
                events.append(span(f"pin {label}", pin_tid, b.pin_start, b.pin_end))
        span_rows = sorted({s.row for s in self.spans})
        for s in self.spans:
            tid = 1000 + span_rows.index(s.row)
            names[tid] = s.row
            events.append(span(f"{s.kind} e{s.epoch} b{s.batch}", tid, s.start, s.end))
        for tid, name in names.items():
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                           "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid,
                           "args": {"sort_index": tid}})
        events.append({"name": "process_name", "ph": "M", "pid": 1,
                       "args": {"name": f"DataLoader ({self.describe()})"}})
        path = Path(path)
        path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
        return path


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


# --------------------------------------------------------------------------
# record()
# --------------------------------------------------------------------------
def loader_config(loader: DataLoader) -> dict[str, Any]:
    """The settings of ``loader`` that shape its timeline (JSON-friendly)."""
    context = loader.multiprocessing_context
    start_method = default_start_method() if context is None else context.get_start_method()
    try:
        dataset_len: int | None = len(loader.dataset)  # type: ignore[arg-type]
    except TypeError:
        dataset_len = None
    return {
        "dataset": type(loader.dataset).__name__,
        "dataset_len": dataset_len,
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": loader.persistent_workers,
        "pin_memory": loader.pin_memory,
        "in_order": getattr(loader, "in_order", True),
        "drop_last": loader.drop_last,
        "start_method": start_method,
    }


def _drop_workers(loader: DataLoader) -> None:
    """Shut down a persistent iterator's workers so the next ``iter`` starts fresh ones."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        loader._iterator = None


def _no_step(batch: Any) -> None:
    return None


def record(
    loader: DataLoader,
    step: Callable[[Any], Any] | None = None,
    *,
    epochs: int = 1,
    max_batches: int | None = None,
    on_batch: Callable[[BatchRecord], Any] | None = None,
    device: Any = None,
    wrap: Callable[[Any], Any] | None = None,
) -> Timeline:
    """Iterate ``loader`` like a training loop, call ``step(batch)`` on each batch, and
    measure every batch (see the module docstring).

    Args:
        loader: any ``DataLoader`` (map-style or iterable, 0 or more workers, any start
            method, ``in_order``, ``persistent_workers``, ``pin_memory``, ``drop_last``,
            custom ``collate_fn``). ``step`` receives each batch exactly as the loader
            delivers it.
        step: the work per batch, e.g. ``helpers.ModelledStep(0.25)``; None = no work.
        epochs: how many passes over the loader.
        max_batches: stop after this many batches in total (across epochs).
        on_batch: called with each :class:`BatchRecord` as it completes (progress bars).
        device: copy each batch to this device in the loop before ``step`` (with
            ``non_blocking`` when the loader pins memory), synchronise, and record
            ``copy_end``: the copy shows as its own segment on the loop's row.
        wrap: called with each epoch's loader iterator; returns the iterable the loop
            takes batches from (a prefetcher such as :class:`helpers.ThreadPrefetcher`
            or :class:`helpers.DevicePrefetcher`). Its ``spans`` are recorded, and its
            ``close()`` is called when the epoch ends.

    The recording starts from cold workers: a persistent iterator the loader already
    had is shut down first, and the recording's own workers are shut down at the end
    (they carry the instrument's hooks). ``loader.worker_init_fn`` is restored.
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(f"record() needs a torch.utils.data.DataLoader, got {type(loader).__name__}")
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if max_batches is not None and (not isinstance(max_batches, int) or max_batches < 1):
        raise ValueError(f"max_batches must be None or a positive integer, got {max_batches!r}")
    if isinstance(loader.worker_init_fn, RecordingWorkerInit):
        raise RuntimeError("this loader is already being recorded (record() is not re-entrant)")
    step = step if step is not None else _no_step

    batches: list[BatchRecord] = []
    epoch_records: list[EpochRecord] = []
    spans: list[Span] = []
    config = loader_config(loader)
    user_init = loader.worker_init_fn
    _drop_workers(loader)
    if loader.num_workers > 0:
        loader.worker_init_fn = RecordingWorkerInit(user_init)
    t0 = clock()
    try:
        for epoch in range(epochs):
            if max_batches is not None and len(batches) >= max_batches:
                break
            iter_start = clock()
            iterator = iter(loader)
            if isinstance(iterator, _SingleProcessDataLoaderIter):
                fetcher = iterator._dataset_fetcher
                fetcher.fetch = _MainProcessFetch(fetcher.fetch)
            source = iterator if wrap is None else wrap(iterator)
            source_iter = iter(source)
            iter_end = clock()
            first_ready = None
            worker_ready: dict[int, float] = {}
            for index in itertools.count():
                if max_batches is not None and len(batches) >= max_batches:
                    break
                wait_start = clock()
                try:
                    item = next(source_iter)
                except StopIteration:
                    break
                ready = clock()
                if not isinstance(item, _Stamped):
                    raise RuntimeError(
                        "a batch arrived without the instrument's timings: record() supports "
                        "torch.utils.data.DataLoader iterators (a DataLoader subclass that "
                        "changes iteration is not supported)"
                    )
                copy_end = None
                data = item.data
                if device is not None:
                    data = to_device(data, device, non_blocking=loader.pin_memory)
                    synchronize(device)
                    copy_end = clock()
                step(data)
                del data
                step_end = clock()
                if first_ready is None:
                    first_ready = ready
                if item.worker != MAIN_PROCESS and item.worker_ready >= iter_start:
                    worker_ready.setdefault(item.worker, item.worker_ready - t0)
                record_ = BatchRecord(
                    epoch=epoch,
                    index=index,
                    worker=item.worker,
                    fetch_start=item.fetch_start - t0,
                    fetch_end=item.fetch_end - t0,
                    wait_start=wait_start - t0,
                    ready=ready - t0,
                    step_end=step_end - t0,
                    worker_seq=item.seq,
                    indices=item.indices,
                    pid=item.pid,
                    pin_start=None if item.pin_start is None else item.pin_start - t0,
                    pin_end=None if item.pin_end is None else item.pin_end - t0,
                    copy_end=None if copy_end is None else copy_end - t0,
                )
                batches.append(record_)
                del item
                if on_batch is not None:
                    on_batch(record_)
            end = clock()
            if source is not iterator:
                close = getattr(source, "close", None)
                if close is not None:
                    close()
                spans.extend(Span(row, kind, start - t0, stop - t0, epoch, number)
                             for row, kind, start, stop, number in getattr(source, "spans", ()))
            epoch_records.append(EpochRecord(
                epoch=epoch,
                iter_start=iter_start - t0,
                iter_end=iter_end - t0,
                first_ready=None if first_ready is None else first_ready - t0,
                end=end - t0,
                worker_ready=worker_ready,
            ))
            # Without persistent workers, end this epoch's workers now (as a loop that
            # moves on to the next epoch does); the time shows before the next iter().
            del iterator, source, source_iter
    finally:
        loader.worker_init_fn = user_init
        _drop_workers(loader)
    return Timeline(batches=batches, epochs=epoch_records, config=config, spans=spans)
