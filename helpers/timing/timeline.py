"""What :func:`helpers.record` returns: every batch, every epoch, and views of them. All times
are seconds on one clock (``time.perf_counter``, system-wide on Linux, macOS and Windows),
relative to the recording's start: :mod:`helpers.timing.hooks` says where each is taken."""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .hooks import MAIN_PROCESS


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
    sent: float | None = None  #: the worker's queue thread pickled it (None: fetched by the main process)
    received_start: float | None = None  #: the main process started unpickling it
    received_end: float | None = None  #: ...and had rebuilt its tensors from shared memory
    pin_start: float | None = None  #: pinning thread starts pinning it (pin_memory=True)
    pin_end: float | None = None
    copy_end: float | None = None  #: the loop's copy to the device finished (``device=``)
    #: CPU seconds the fetching process used during the fetch (all its threads): near ``fetch_s``
    #: when loading computes, near 0 when it waits (disk, network, a sleep)
    fetch_cpu_s: float | None = None
    collate_s: float | None = None  #: seconds of the fetch spent in ``collate_fn``, where it ran
    stopped: float | None = None  #: a CPU quota's stops, from iter() to this step's end (s; None: none)

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

    @property
    def receive_s(self) -> float:
        """Unpickling it in the main process (0.0 when the main process fetched it)."""
        if self.received_start is None or self.received_end is None:
            return 0.0
        return self.received_end - self.received_start


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
    #: how long a CPU quota stopped this process's group in the epoch, from ``iter()`` to the loop's
    #: end (s; cgroup ``cpu.stat``, summed over the cores: ``helpers.cores.stopped_s``); None: no quota
    stopped_s: float | None = None
    #: the same while ``iter()`` ran (it starts the workers and sends the first indices)
    stopped_in_iter_s: float | None = None
    #: the same from ``iter()`` returning to the first batch in the loop's hands
    stopped_to_first_s: float | None = None

    @property
    def startup_s(self) -> float:
        return self.iter_end - self.iter_start

    @property
    def wall_s(self) -> float:
        """From ``iter(loader)`` to the end of this epoch's loop (start-up included)."""
        return self.end - self.iter_start

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


@dataclass(frozen=True)
class Pause:
    """A garbage-collection pause of the main process (every thread of it stops)."""

    start: float
    end: float
    generation: int  #: 2 = a full collection, which walks every tracked object

    @property
    def duration_s(self) -> float:
        return self.end - self.start


@dataclass
class Timeline:
    """What :func:`record` measured: every batch, every epoch, and the loader's settings."""

    batches: list[BatchRecord]
    epochs: list[EpochRecord]
    config: dict[str, Any]
    spans: list[Span] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    #: CPU seconds of the main process (all its threads) from the first iter() to the end; None: not measured
    main_cpu_s: float | None = None

    # -- derived views ------------------------------------------------------
    @property
    def wall_s(self) -> float:
        """From the first ``iter(loader)`` to the end of the last epoch's loop."""
        if not self.epochs:
            return 0.0
        return self.epochs[-1].end - self.epochs[0].iter_start

    def median_epoch_s(self) -> float:
        """The median of the epochs' wall times (each from its ``iter(loader)``, start-up included).

        For short epochs: one stall that is not the loader's (a CPU quota's stop, another
        program) moves one epoch, not the median of three."""
        if not self.epochs:
            return 0.0
        return statistics.median(e.wall_s for e in self.epochs)

    @property
    def stopped_s(self) -> float | None:
        """How long a CPU quota stopped this process's group during the recorded epochs (s, summed over
        the cores; :attr:`EpochRecord.stopped_s`), or None without a quota."""
        stops = [e.stopped_s for e in self.epochs if e.stopped_s is not None]
        return sum(stops) if stops else None

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

    def worker_startup_s(self, epoch: int | None = None) -> float:
        """From ``iter(loader)`` until the last worker started in ``epoch`` was ready
        (0.0 when none started: 0 workers, or persistent workers already running).
        ``epoch`` is the epoch's number (None: the first epoch of this timeline)."""
        if epoch is None:
            record_ = self.epochs[0]
        else:
            matches = [e for e in self.epochs if e.epoch == epoch]
            if not matches:
                known = [e.epoch for e in self.epochs]
                raise ValueError(f"this timeline has no epoch {epoch} (it has {known})")
            record_ = matches[0]
        if not record_.worker_ready:
            return 0.0
        return max(record_.worker_ready.values()) - record_.iter_start

    def wait_s(self) -> float:
        """Time the loop had no batch in hand: creating iterators plus waiting in ``next``."""
        return sum(e.startup_s for e in self.epochs) + sum(b.wait_s for b in self.batches)

    def window(self, first_epoch: int) -> Timeline:
        """The same recording from ``first_epoch`` on (e.g. without a warm-up epoch);
        times keep their origin."""
        start = self.epochs[first_epoch].iter_start if first_epoch < len(self.epochs) else math.inf
        return Timeline(batches=[b for b in self.batches if b.epoch >= first_epoch],
                        epochs=[e for e in self.epochs if e.epoch >= first_epoch],
                        config=self.config,
                        spans=[s for s in self.spans if s.epoch >= first_epoch],
                        pauses=[p for p in self.pauses if p.end >= start])

    def gc_pause_s(self, start: float = -math.inf, end: float = math.inf) -> float:
        """Time the main process spent in garbage collection (s), from ``start`` to ``end`` (default:
        the whole recording): the loop's own process stopped, which no loader setting shortens."""
        return sum(max(0.0, min(p.end, end) - max(p.start, start)) for p in self.pauses)

    def paused_intervals(self) -> int:
        """How many of :meth:`steady_intervals` contain a garbage-collection pause of at
        least 10 ms (those intervals are long for a reason that is not the data)."""
        count = 0
        for epoch in self.epochs:
            ends = [b.step_end for b in self.epoch_batches(epoch.epoch)]
            for earlier, later in zip(ends, ends[1:], strict=False):
                count += any(p.duration_s >= 0.01 and earlier < p.end and p.start < later
                             for p in self.pauses)
        return count

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
            "mean_receive_s": _mean([b.receive_s for b in self.batches]),
            "gc_pause_s": self.gc_pause_s(),
        }

    def describe(self) -> str:
        """One line of the loader's settings, e.g. for a plot title."""
        return str(self.config.get("describe", ""))

    # -- export -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "epochs": [asdict(e) for e in self.epochs],
            "batches": [asdict(b) for b in self.batches],
            "spans": [asdict(s) for s in self.spans],
            "pauses": [asdict(p) for p in self.pauses],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timeline:
        """The inverse of :meth:`to_dict` (e.g. a recording made in a child process, sent as JSON)."""
        batches = [BatchRecord(**{**b, "indices": None if b["indices"] is None else tuple(b["indices"])})
                   for b in data["batches"]]
        epochs = [EpochRecord(**{**e, "worker_ready": {int(k): v for k, v in e["worker_ready"].items()}})
                  for e in data["epochs"]]
        return cls(batches=batches, epochs=epochs, config=data["config"],
                   spans=[Span(**s) for s in data.get("spans", [])],
                   pauses=[Pause(**p) for p in data.get("pauses", [])])

    def to_chrome_trace(self, path: str | os.PathLike) -> Path:
        """Write Chrome-trace JSON (open it in https://ui.perfetto.dev or chrome://tracing).

        One track for the training loop (start-up, waiting, stepping), one per
        worker (fetches), and one for the pinning thread when there is pinning.
        """
        loop_tid, pin_tid, receive_tid = 0, 1, 999

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
            if b.received_start is not None and b.received_end is not None:
                events.append(span(f"receive {label}", receive_tid, b.received_start, b.received_end))
                names[receive_tid] = "receive (unpickle in the main process)"
            if b.pin_start is not None and b.pin_end is not None:
                names[pin_tid] = "pin_memory thread"
                events.append(span(f"pin {label}", pin_tid, b.pin_start, b.pin_end))
        for p in self.pauses:
            events.append(span(f"garbage collection (generation {p.generation})", loop_tid, p.start, p.end))
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
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
        return path


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan
