"""The instrument's hooks: where :func:`helpers.record` takes its timings.

* **In each worker** (installed by the loader's ``worker_init_fn``) and on the main
  process's fetcher with 0 workers, the fetch — dataset access plus ``collate_fn`` — is
  wrapped, and the batch leaves in a small envelope (:class:`Stamped`) carrying its times.
* **On the way to the main process** the envelope stamps itself: when the worker's queue
  thread pickles it (``sent``), and when the main process starts and finishes unpickling
  it (``received_start`` / ``received_end``: rebuilding its tensors from shared memory,
  which with the ``file_descriptor`` strategy includes fetching each descriptor from the
  worker). With ``pin_memory=True`` the pin thread calls the envelope's ``pin_memory``,
  which pins the batch inside exactly as the DataLoader would, and times it.
* **In the main process** :class:`GcMonitor` records Python's garbage-collection pauses
  (``gc.callbacks``): a full collection holds the GIL, so every thread of the training
  process that runs Python — the loop, the pin thread — stops (workers are other processes).
* **Around a prefetcher** (``record(wrap=...)``) :class:`PrefetcherTimer` times the
  prefetcher's per-batch work from outside the class, by replacing the instance's
  ``transform`` or ``copy_to_device`` attribute with a timed wrapper (CUDA events on the
  stream the work is queued on, for device copies).

Nothing here changes what the dataset, sampler or ``collate_fn`` do.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable
from time import perf_counter as clock
from time import process_time
from typing import Any

from torch.utils.data import get_worker_info

from . import torch_internals

MAIN_PROCESS = -1  #: the ``worker`` of a batch fetched by the main process (0 workers)


class _ReceiveClock:
    """Pickled in place of a time: unpickling it calls ``perf_counter`` in the receiving
    process, before the batch's tensors are rebuilt (pickle rebuilds arguments in order)."""

    def __reduce__(self):
        return (clock, ())


class Stamped:
    """A batch in an envelope that carries its fetch times, and, once it has travelled,
    its send, receive and pin times."""

    def __init__(self, data, worker, pid, fetch_start, fetch_end, seq, indices, worker_ready,
                 fetch_cpu=None, collate_s=None):
        self.data = data
        self.worker = worker
        self.pid = pid
        self.fetch_start = fetch_start
        self.fetch_end = fetch_end
        self.seq = seq
        self.indices = indices
        self.worker_ready = worker_ready
        self.fetch_cpu = fetch_cpu  # CPU seconds the fetching process used during the fetch
        self.collate_s = collate_s  # seconds in collate_fn during the fetch (None: not seen)
        self.sent: float | None = None
        self.received_start: float | None = None
        self.received_end: float | None = None
        self.pin_start: float | None = None
        self.pin_end: float | None = None

    def __reduce__(self):
        # Called by the worker's queue thread as it sends the batch: that moment is `sent`.
        return (_received, (_ReceiveClock(), self.data, self.worker, self.pid, self.fetch_start,
                            self.fetch_end, self.seq, self.indices, self.worker_ready, clock(),
                            self.fetch_cpu, self.collate_s))

    def pin_memory(self, device=None):
        # The DataLoader's pin thread calls this instead of pinning the envelope.
        start = clock()
        self.data = torch_internals.pin_batch(self.data, device)
        self.pin_start, self.pin_end = start, clock()
        return self


def _received(received_start, data, worker, pid, fetch_start, fetch_end, seq, indices, worker_ready,
              sent, fetch_cpu=None, collate_s=None) -> Stamped:
    stamped = Stamped(data, worker, pid, fetch_start, fetch_end, seq, indices, worker_ready, fetch_cpu,
                      collate_s)
    stamped.sent, stamped.received_start, stamped.received_end = sent, received_start, clock()
    return stamped


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


class _TimedCollate:
    """Stands in for a fetcher's ``collate_fn`` during one fetch and adds up the time it took."""

    __slots__ = ("collate", "seconds")

    def __init__(self, collate: Callable):
        self.collate, self.seconds = collate, 0.0

    def __call__(self, data):
        start = clock()
        try:
            return self.collate(data)
        finally:
            self.seconds += clock() - start


def _stamp(fetch: Callable, possibly_batched_index, worker: int, state: _ProcessState,
           fetcher: Any = None) -> Stamped:
    # collate_fn is timed where it runs (in the worker), by standing in for the fetcher's own
    # attribute for this one call; the CPU time the process used tells computing from waiting.
    collate = getattr(fetcher, "collate_fn", None)
    timed = _TimedCollate(collate) if collate is not None else None
    if timed is not None:
        fetcher.collate_fn = timed
    cpu = process_time()
    start = clock()
    try:
        data = fetch(possibly_batched_index)  # StopIteration and errors pass through untouched
    finally:
        if timed is not None:
            fetcher.collate_fn = collate
    end = clock()
    cpu = process_time() - cpu
    stamped = Stamped(data, worker, os.getpid(), start, end, state.seq,
                      _indices_of(possibly_batched_index), state.ready, cpu,
                      None if timed is None else timed.seconds)
    state.seq += 1
    return stamped


def _hooked_fetch(original):
    @functools.wraps(original)
    def fetch(self, possibly_batched_index):
        info = get_worker_info()
        if info is None or _STATE is None:  # not a recording worker: behave as torch does
            return original(self, possibly_batched_index)
        return _stamp(functools.partial(original, self), possibly_batched_index, info.id, _STATE, self)

    fetch.__dlllab_hooked__ = True
    return fetch


def install_worker_hooks() -> None:
    """Wrap the fetchers' ``fetch`` in this (worker) process; idempotent."""
    global _STATE
    torch_internals.require()
    _STATE = _ProcessState()
    for cls in torch_internals.FETCHER_CLASSES:
        if not getattr(cls.fetch, "__dlllab_hooked__", False):
            cls.fetch = _hooked_fetch(cls.fetch)


class RecordingWorkerInit:
    """The ``worker_init_fn`` that :func:`record` installs: hooks the worker's fetch,
    then calls the loader's own ``worker_init_fn`` (if any). Picklable under spawn."""

    def __init__(self, user_init: Callable[[int], Any] | None):
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        install_worker_hooks()
        if self.user_init is not None:
            self.user_init(worker_id)


class MainProcessFetch:
    """Replaces the main process fetcher's ``fetch`` (0 workers) for one iterator."""

    def __init__(self, fetch: Callable):
        self.fetch = fetch
        self.state = _ProcessState()

    def __call__(self, possibly_batched_index):
        return _stamp(self.fetch, possibly_batched_index, MAIN_PROCESS, self.state,
                      getattr(self.fetch, "__self__", None))


class GcMonitor:
    """Records the main process's garbage-collection pauses while it is active
    (``with GcMonitor() as gc_monitor: ...``): every full (generation 2) collection, and
    any other that lasted at least ``min_s``. ``pauses``: ``(start, end, generation)``."""

    def __init__(self, min_s: float = 0.001):
        self.min_s = min_s
        self.pauses: list[tuple[float, float, int]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = clock()
            return
        end = clock()
        if info["generation"] == 2 or end - self._start >= self.min_s:
            self.pauses.append((self._start, end, info["generation"]))

    def __enter__(self) -> GcMonitor:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


#: Timeline rows for the lab's prefetchers (by class name; others get their class name).
_ROWS = {"ThreadPrefetcher": "prefetch thread", "BatchTransform": "transform (loop thread)",
         "DevicePrefetcher": "copy stream", "SerialisedDevicePrefetcher": "copy stream"}


class PrefetcherTimer:
    """Times a prefetcher's per-batch work from outside its class.

    A prefetcher that exposes its per-batch work as an attribute — ``copy_to_device``
    (a device copy; with a ``stream`` attribute on CUDA) or ``transform`` (host work) —
    gets that attribute replaced, on this instance only, by a wrapper that notes when each
    call ran: on the host clock, or with CUDA events on the stream the call queues its
    work on. Other prefetchers run untimed (their batches are still recorded).
    """

    def __init__(self, prefetcher: Any):
        self.kind: str | None = None
        self.row = _ROWS.get(type(prefetcher).__name__, type(prefetcher).__name__)
        self._host: list[tuple[float, float, int]] = []
        self._events: list[tuple[Any, Any, int]] = []
        self._calls = 0
        self.cuda = False
        for attribute, kind in (("copy_to_device", "copy"), ("transform", "transform")):
            work = getattr(prefetcher, attribute, None)
            if callable(work):
                self.kind = kind
                stream = getattr(prefetcher, "stream", None) if kind == "copy" else None
                self.cuda = stream is not None and type(stream).__module__.startswith("torch.cuda")
                if kind == "copy" and not self.cuda:
                    self.row = "copy (prefetch thread)" if self.row == "copy stream" else self.row
                setattr(prefetcher, attribute, self._timed(work))
                break

    def _timed(self, work: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(work)
        def timed(batch: Any) -> Any:
            number = self._calls
            self._calls += 1
            if self.cuda:
                import torch

                begin = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                begin.record()  # on the current stream: where the prefetcher queues its copy
                out = work(batch)
                end.record()
                self._events.append((begin, end, number))
                return out
            start = clock()
            out = work(batch)
            self._host.append((start, clock(), number))
            return out

        return timed

    def spans(self, cuda_anchor: tuple[float, Any] | None) -> list[tuple[str, str, float, float, int]]:
        """``(row, kind, start, end, batch)`` on the host clock. For CUDA events,
        ``cuda_anchor`` is ``(host time, event)`` recorded together after a synchronize;
        reading the events synchronises the device."""
        if self.kind is None:
            return []
        out = [(self.row, self.kind, start, end, n) for start, end, n in self._host]
        if self._events:
            import torch

            torch.cuda.synchronize()
            anchor_s, anchor = cuda_anchor
            out += [(self.row, self.kind, anchor_s + anchor.elapsed_time(b) / 1e3,
                     anchor_s + anchor.elapsed_time(e) / 1e3, n) for b, e, n in self._events]
        return out
