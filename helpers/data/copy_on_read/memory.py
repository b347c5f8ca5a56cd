"""Worker memory while the workers read: :class:`WorkerMemory` samples USS/PSS/RSS of every worker,
:func:`measure_memory` runs a loader beside it (:class:`MemoryRun`), and what grew per epoch."""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter as clock
from typing import Any

import numpy as np
import psutil
import torch

from .paths import MiB, PathDataset


# -- worker memory over time ------------------------------------------------------------------
def release_freed_heap() -> bool:
    """Hand the pages of freed heap chunks back to the system (glibc's ``malloc_trim(0)``), so a
    worker forked next inherits none of them. Returns False where there is no glibc (nothing done).

    Why it matters to a measurement of copied memory: a chunk this process freed before the fork
    is still resident, and every worker inherits its pages, shared. Once this process reuses the
    chunk (it copies the pages it writes) and one worker reuses it too, the other worker is the
    last holder of those pages and its USS grows by them, with nothing read. A test shows 8 MiB so
    (``tests/test_copy_on_read.py``). It is the mechanism that fits what notebook 12 saw about once
    in 6-10 runs: one worker of an array storage 8.4-10.1 MiB above the no-data workers, the extra
    pages in its heap."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


def private_dirty(pid: int, fallback: int = 0) -> int:
    """A process's private dirty bytes (``Private_Dirty`` in ``/proc/<pid>/smaps_rollup``): the
    pages it wrote that no other process maps. ``fallback`` where the file is missing (not Linux)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Private_Dirty:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(fallback)


def still_mapped(pid: int) -> bool:
    """Whether ``pid`` still has its address space: a process that has begun to exit detaches it
    before unmapping its pages, and from then on ``/proc/<pid>/statm`` shows 0 resident pages.
    Without ``/proc`` (not Linux): whether psutil finds it alive and not a zombie."""
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/statm") as statm:
                return int(statm.read().split()[1]) > 0
        except (OSError, IndexError, ValueError):
            return False
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


@dataclass(frozen=True)
class MemorySample:
    """One process's memory at one moment, in bytes (psutil ``memory_full_info``)."""

    t: float  #: seconds on the recording's clock
    round: int  #: the sampling round (every process once per round)
    pid: int
    uss: int  #: unique set: pages only this process holds (what ending it frees)
    pss: int  #: proportional set: private pages + each shared page divided by its sharers
    rss: int  #: resident set: what `top` shows as RES (shared pages counted in full)
    #: private dirty: pages this process wrote and alone holds — a forked worker's copied pages, or
    #: everything a spawned worker allocated; unlike USS, no library page it merely read (Linux;
    #: elsewhere the USS)
    private: int = 0


@dataclass
class WorkerMemory:
    """Samples the memory of this process's children (the DataLoader's workers) every
    ``interval_s`` in a thread, while a block runs::

        with helpers.WorkerMemory() as memory:
            run = helpers.record(loader, step)

    Times are on the clock :func:`helpers.record` uses, from the block's start; ``record``
    starts its own clock a few microseconds later, so the two line up within a millisecond.
    Python's multiprocessing helpers (resource tracker, forkserver) are left out.
    """

    interval_s: float = 0.1
    samples: list[MemorySample] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (0.005 <= self.interval_s <= 10):
            raise ValueError(f"interval_s must be between 0.005 and 10 seconds, got {self.interval_s!r}")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._round = 0
        #: rounds in which a worker sampled early had lost its memory by the round's end (it was exiting)
        self.broken_rounds: set[int] = set()
        self._error: BaseException | None = None

    def __enter__(self) -> WorkerMemory:
        from ..failures import child_processes

        self._before = child_processes()
        self._t0 = clock()
        self._thread = threading.Thread(target=self._run, name="worker-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._error is not None and exc[0] is None:
            raise RuntimeError(f"sampling worker memory failed: {self._error}") from self._error

    def _sample(self, pid: int) -> MemorySample | None:
        try:
            info = psutil.Process(pid).memory_full_info()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        return MemorySample(clock() - self._t0, self._round, pid, int(info.uss),
                            int(getattr(info, "pss", info.uss)), int(info.rss), private_dirty(pid, info.uss))

    def _run(self) -> None:
        from ..failures import child_processes

        try:
            while not self._stop.is_set():
                sampled = []
                for pid in sorted(child_processes() - self._before):
                    sample = self._sample(pid)
                    if sample is not None:
                        self.samples.append(sample)
                        sampled.append(pid)
                # A round counts as "every worker alive" only if every worker sampled in it still has
                # its memory once the round is over: one that began exiting between its sample and a
                # later one's would have left that later one the last holder of their shared pages.
                if len(sampled) > 1 and not all(still_mapped(pid) for pid in sampled):
                    self.broken_rounds.add(self._round)
                self._round += 1
                self._stop.wait(self.interval_s)
        except psutil.Error as error:  # pragma: no cover - depends on the system (AccessDenied)
            self._error = error

    def keep_only(self, pids: set[int]) -> None:
        """Drop the samples of every process but ``pids`` (e.g. the workers that fetched batches:
        a process that another part of the program started meanwhile is not a worker)."""
        self.samples = [s for s in self.samples if s.pid in pids and s.rss > 0]  # rss 0: it was exiting

    # -- views ---------------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """Worker pids in the order they were first seen."""
        seen: dict[int, None] = {}
        for s in self.samples:
            seen.setdefault(s.pid, None)
        return list(seen)

    def series(self, pid: int) -> list[MemorySample]:
        return [s for s in self.samples if s.pid == pid]

    def rounds_all_alive(self) -> set[int]:
        """The sampling rounds in which every worker was sampled (as many as in any round) and
        every worker sampled still held its memory at the round's end (not in :attr:`broken_rounds`).

        A worker sampled after another has exited counts as its own every page the two shared
        and the main process has since written (its copy-on-write copy went to the main
        process): USS and private dirty jump with nothing read. Those windows are short (between
        one worker's exit and the next), so a sample rarely falls in one, but when it does it
        becomes that worker's peak: a measure of the main process's writes, not of this worker's
        reading. The window opens inside a round, too: under a CPU quota the sampler can be
        stopped for 100 ms between two workers' samples, and the first can exit meanwhile; a test
        kills a child between two samples. (This does not explain the rare numpy-bytes worker
        8.4-8.9 MiB above the no-data workers that notebook 12 still sees: in the one such run
        recorded per mapping, the extra pages were in the heap and the other worker was sampled
        alive after the jump. The mechanism that fits, heap chunks freed before the fork that the
        main process and the other worker then reused, is what :func:`release_freed_heap` removes
        before the workers fork.)"""
        sizes: dict[int, int] = {}
        for s in self.samples:
            sizes[s.round] = sizes.get(s.round, 0) + 1
        most = max(sizes.values(), default=0)
        return {r for r, n in sizes.items() if n == most and r not in self.broken_rounds}

    def growth(self, what: str = "uss") -> dict[int, tuple[int, int]]:
        """Per worker: (its first sample, the largest later one) of ``what`` (uss, pss, rss).

        The largest is taken over the rounds in which every worker was sampled
        (:meth:`rounds_all_alive`); a worker never sampled in one keeps all its samples."""
        full = self.rounds_all_alive()
        out = {}
        for pid in self.pids():
            series = self.series(pid)
            values = [getattr(s, what) for s in series]
            counted = [getattr(s, what) for s in series if s.round in full] or values
            out[pid] = (values[0], max(counted))
        return out

    def peak_total(self, what: str = "uss") -> int:
        """The largest sum of ``what`` across the workers sampled at the same moment."""
        by_round: dict[int, int] = {}
        for s in self.samples:
            by_round[s.round] = by_round.get(s.round, 0) + getattr(s, what)
        return max(by_round.values(), default=0)


@dataclass(frozen=True)
class MemoryRun:
    """What one storage measured: each worker's USS at its first sample and at its peak."""

    storage: str
    start_method: str
    data_bytes: int
    first_uss: list[int]
    peak_uss: list[int]
    peak_total_rss: int
    peak_total_pss: int
    #: each worker's peak private dirty bytes (see :class:`MemorySample`), same order as ``peak_uss``
    peak_private: list[int] = field(default_factory=list)

    @property
    def growth(self) -> list[int]:
        return [p - f for f, p in zip(self.first_uss, self.peak_uss, strict=True)]


def summarise(storage: str, start_method: str, data_bytes: int, memory: WorkerMemory) -> MemoryRun:
    """One :class:`MemoryRun` from a :class:`WorkerMemory` that watched one loader's epoch."""
    growth = memory.growth("uss")
    if not growth:
        raise RuntimeError("no worker was sampled: the epoch ended before the first sample; "
                           "use more items or a lower interval_s")
    private = memory.growth("private")
    return MemoryRun(storage, start_method, int(data_bytes), [g[0] for g in growth.values()],
                     [g[1] for g in growth.values()], memory.peak_total("rss"), memory.peak_total("pss"),
                     [private[pid][1] for pid in growth])


def memory_table(runs: Sequence[MemoryRun]) -> Any:
    """A table of runs: each worker's USS at its start and its growth, against the data's size."""
    from ...timing.report import table

    return table(
        ["storage", "start method", "data (MiB)", "worker USS at first sample (MiB)",
         "growth since (MiB)",
         "workers' total RSS, as `top` adds it (MiB)", "workers' total PSS (MiB)"],
        [[r.storage, r.start_method, f"{r.data_bytes / MiB:.1f}",
          " · ".join(f"{u / MiB:.0f}" for u in r.first_uss),
          " · ".join(f"{g / MiB:.1f}" for g in r.growth),
          f"{r.peak_total_rss / MiB:.0f}", f"{r.peak_total_pss / MiB:.0f}"] for r in runs])


def extra_uss(run: MemoryRun, reference: MemoryRun, what: str = "uss") -> list[int]:
    """Each worker's peak USS above the median peak of workers that held no data (same start
    method, same epoch): what holding this storage cost the worker. ``what="private"`` compares
    private dirty bytes instead (spawned workers: see :func:`extra_private`)."""
    peaks, reference_peaks = _peaks(run, what), _peaks(reference, what)
    base = float(np.median(reference_peaks))
    return [int(p - base) for p in peaks]


def extra_private(run: MemoryRun, reference: MemoryRun) -> list[int]:
    """Each worker's peak private dirty bytes above the no-data workers' median. For spawned
    workers this is the measure: their USS also counts pages of torch's libraries that only they
    happened to read in, which differ by tens of MiB from run to run; the pages they *wrote* (the
    rebuilt dataset among them) do not."""
    return extra_uss(run, reference, "private")


def _peaks(run: MemoryRun, what: str) -> list[int]:
    if what == "uss":
        return run.peak_uss
    if what == "private":
        if not run.peak_private:
            raise ValueError(f"the {run.storage} run has no private dirty samples")
        return run.peak_private
    raise ValueError(f"what must be 'uss' or 'private', got {what!r}")


def noise_margin_bytes(list_bytes: int, reference: MemoryRun, what: str = "uss") -> int:
    """How far above the no-data workers a storage may end and still count as "no growth":
    a tenth of the list, three times the spread of the no-data workers' peaks, at least 6 MiB.
    The floor was set before :func:`measure_memory` froze the main process's objects, when a full
    garbage collection in a worker also wrote to every inherited container's header (7.8 MiB seen
    once); frozen, what is left is the allocator's arenas and the pages a batch touches, a few MiB,
    so the floor stays as a conservative margin rather than a measured one."""
    peaks = _peaks(reference, what)
    spread = max(peaks) - min(peaks)
    return int(max(0.1 * list_bytes, 3 * spread, 6 * MiB))


@dataclass(frozen=True)
class EpochWorkers:
    """Which worker processes served epochs 1 and 2 of one recording, and their memory."""

    first: list[int]  #: pids first sampled during epoch 1
    new: list[int]  #: pids first sampled during epoch 2 (workers started for it)
    kept_uss: list[int]  #: USS of each epoch-1 worker at its first sample in epoch 2 (if it lived on)
    new_peak_uss: list[int]  #: peak USS of each new epoch-2 worker

    @property
    def same_workers(self) -> bool:
        """Epoch 2 started no worker and every epoch-1 worker served it."""
        return bool(self.first) and not self.new and len(self.kept_uss) == len(self.first)


def epoch_workers(memory: WorkerMemory, timeline: Any) -> EpochWorkers:
    """Split a two-epoch recording's memory samples at epoch 2's ``iter(loader)``."""
    if len(timeline.epochs) < 2:
        raise ValueError("epoch_workers needs a recording of at least 2 epochs: record(..., epochs=2)")
    split = timeline.epochs[1].iter_start
    series = {pid: memory.series(pid) for pid in memory.pids()}
    first = [pid for pid, ss in series.items() if ss[0].t < split]
    new = [pid for pid, ss in series.items() if ss[0].t >= split]
    kept = []
    for pid in first:
        later = [s.uss for s in series[pid] if s.t >= timeline.epochs[1].iter_end]
        if later:
            kept.append(later[0])
    # a peak leaves out the rounds in which another worker exited mid-round (WorkerMemory.rounds_all_alive)
    counted = {pid: [s for s in series[pid] if s.round not in memory.broken_rounds] or series[pid]
               for pid in new}
    peaks = [max(s.uss for s in counted[pid]) for pid in new]
    return EpochWorkers(first, new, kept, peaks)


def measure_memory(loader: Any, step: Any = None, *, epochs: int = 1, interval_s: float = 0.05,
                   progress: bool = True):
    """Record ``loader`` (:func:`helpers.record`) while :class:`WorkerMemory` samples its
    workers; returns ``(MemoryRun, Timeline, WorkerMemory)``. The loader's dataset must be a
    :class:`PathDataset` (its storage and size label the run)."""
    from ...timing.recorder import record

    dataset = loader.dataset
    if not isinstance(dataset, PathDataset):
        raise TypeError(f"measure_memory needs a DataLoader over a helpers.PathDataset, got "
                        f"{type(dataset).__name__}")
    if loader.num_workers < 1:
        raise ValueError("measure_memory watches worker processes: build the loader with num_workers >= 1")
    context = loader.multiprocessing_context
    method = context.get_start_method() if context is not None else torch.multiprocessing.get_start_method()
    # Freeze the main process's objects before the workers fork (gc.freeze, notebook 02): a full
    # garbage collection in a worker writes to the header of every object it tracks, which would
    # copy inherited pages at random moments and blur what reading the data copies.
    gc.collect()
    gc.freeze()
    release_freed_heap()  # and no freed heap page for this process and one worker to orphan in the other
    try:
        with WorkerMemory(interval_s=interval_s) as memory:
            label = f"{dataset.storage}, {method}" if progress else False
            timeline = record(loader, step, epochs=epochs, progress=label)
    finally:
        gc.unfreeze()
    memory.keep_only({b.pid for b in timeline.batches})
    return summarise(dataset.storage, method, dataset.data_bytes(), memory), timeline, memory
