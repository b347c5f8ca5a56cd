"""The instrument's loop: :func:`record` iterates a DataLoader the way a training loop does.

For every batch it measures, in the process that builds it, ``fetch_start`` /
``fetch_end`` around the dataset access and ``collate_fn``; on the way, when it was sent
and received (unpickled in the main process); in the loop, ``wait_start`` (the loop asks
for the next batch), ``ready`` (the batch is in hand) and ``step_end``; with
``pin_memory=True`` when the pin thread pinned it; with ``device=`` when the loop's copy
to the device finished; with ``wrap=`` the prefetcher's own work. Garbage-collection
pauses of the main process are recorded too. :mod:`helpers.timing.hooks` says how.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, Iterator
from time import perf_counter as clock
from time import process_time
from typing import Any

from torch.utils.data import DataLoader

from ..cores import quota_stat_files, stopped_s
from . import torch_internals
from .device import synchronize, to_device, wait_for_step
from .hooks import MAIN_PROCESS, GcMonitor, MainProcessFetch, PrefetcherTimer, RecordingWorkerInit, Stamped
from .plain import unimportable_parts
from .report import progress_bar
from .settings import loader_config
from .timeline import BatchRecord, EpochRecord, Pause, Span, Timeline


def _no_step(batch: Any) -> None:
    return None


class _Unwrapped:
    """What a prefetcher (``wrap=``) iterates: the loader's batches without the instrument's
    envelopes, whose timings wait in ``stamps`` (first in, first out) until the loop takes
    the matching batch from the prefetcher: prefetchers keep the order of batches."""

    def __init__(self, iterator: Iterator[Any]):
        self.iterator = iterator
        self.stamps: collections.deque[Stamped] = collections.deque()
        self._taking = threading.Lock()  # held while the prefetcher's thread is inside next()
        self._ended = False

    def __iter__(self) -> Iterator[Any]:
        while True:
            with self._taking:
                if self._ended:
                    return
                item = next(self.iterator, None)
            if item is None:
                return
            self.stamps.append(item)
            yield item.data
            item.data = None  # the prefetcher holds the batch now; the envelope keeps the times

    def end(self) -> None:
        """Take no more batches: wait for a next() under way in the prefetcher's thread (its batch
        comes from workers that are still running), then refuse the rest. Shutting the workers down
        while that thread waits in next() would leave it waiting for good."""
        with self._taking:
            self._ended = True


def _progress(loader: DataLoader, epochs: int, max_batches: int | None, label: str | None):
    """A progress bar for a recording (shown only when it lasts more than a few seconds)."""
    try:
        total: int | None = len(loader) * epochs
    except TypeError:
        total = None
    if max_batches is not None:
        total = max_batches if total is None else min(total, max_batches)
    return progress_bar(total, label or "recording")


def record(
    loader: DataLoader,
    step: Callable[[Any], Any] | None = None,
    *,
    epochs: int = 1,
    max_batches: int | None = None,
    on_batch: Callable[[BatchRecord], Any] | None = None,
    device: Any = None,
    wrap: Callable[[Any], Any] | None = None,
    progress: str | bool = True,
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
        on_batch: called with each :class:`BatchRecord` as it completes.
        device: copy each batch to this device in the loop before ``step`` (with
            ``non_blocking`` when the loader pins memory), synchronise, and record
            ``copy_end``: the copy shows as its own segment on the loop's row.
        wrap: called with each epoch's batches; returns the iterable the loop takes batches
            from (a prefetcher such as :class:`helpers.ThreadPrefetcher` or
            :class:`helpers.DevicePrefetcher`). It sees the batches as the loader delivers
            them; its per-batch work is timed from outside (:class:`helpers.timing.hooks.PrefetcherTimer`)
            and its ``close()`` is called when the epoch ends.
        progress: a label for the progress bar shown when a recording takes more than 3 s
            (True: "recording"; False: none).

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
    torch_internals.require()  # a torch that renamed what the instrument wraps: say what, now
    check_importable(loader)

    batches: list[BatchRecord] = []
    epoch_records: list[EpochRecord] = []
    spans: list[Span] = []
    config = loader_config(loader)
    user_init = loader.worker_init_fn
    torch_internals.drop_persistent_iterator(loader)
    if loader.num_workers > 0:
        loader.worker_init_fn = RecordingWorkerInit(user_init)
    bar = _progress(loader, epochs, max_batches, progress if isinstance(progress, str) else None) \
        if progress else None
    stat_files = quota_stat_files()  # a CPU quota's counters of its stops (none: nothing to read)
    t0, cpu0 = clock(), process_time()
    try:
        with GcMonitor() as gc_monitor:
            for epoch in range(epochs):
                if max_batches is not None and len(batches) >= max_batches:
                    break
                epoch_record, epoch_spans = _record_epoch(
                    loader, step, epoch, t0, batches, max_batches, device, wrap, on_batch, bar, stat_files)
                epoch_records.append(epoch_record)
                spans.extend(epoch_spans)
    finally:
        loader.worker_init_fn = user_init
        torch_internals.drop_persistent_iterator(loader)
        if bar is not None:
            bar.close()
    main_cpu_s = process_time() - cpu0
    pauses = [Pause(start - t0, end - t0, generation) for start, end, generation in gc_monitor.pauses]
    return Timeline(batches=batches, epochs=epoch_records, config=config, spans=spans, pauses=pauses,
                    main_cpu_s=main_cpu_s)


def record_fastest(runs: dict[Any, Callable[[], Timeline]], rounds: int = 2, *,
                   score: Callable[[Timeline], float] | None = None) -> dict[Any, Timeline]:
    """Make every recording in ``runs`` (zero-argument callables, each returning a :func:`record`
    timeline) ``rounds`` times, the rounds interleaved (each once, then each again), and keep per
    key the one with the lowest ``score`` — by default the time per batch over the whole run
    (``iter()`` to the last step's end). Whatever else the machine does meanwhile only ever slows a
    run down, so the faster of two is the closer to what the configuration costs; interleaved, one
    slow moment cannot hit every run of one key. For runs of a second or less (smoke sizes), where
    one disturbance sets the result (notebook 19; :func:`helpers.record_best` for notebook 14)."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a whole number of at least 1, got {rounds!r}")

    def per_batch(tl: Timeline) -> float:
        if not tl.batches:
            return float("inf")
        return (tl.batches[-1].step_end - tl.epochs[0].iter_start) / len(tl.batches)

    score = score or per_batch
    best: dict[Any, Timeline] = {}
    for _ in range(rounds):
        for key, run in runs.items():
            tl = run()
            if key not in best or score(tl) < score(best[key]):
                best[key] = tl
    return best


def _record_epoch(loader, step, epoch, t0, batches, max_batches, device, wrap, on_batch, bar, stat_files):
    # Under a CPU quota, the quota's stops are read around the epoch, when iter() returns, when the
    # first batch is in hand and after each step (each reading is one small file, ~20 µs, on the
    # loop's path then); without one, nothing is read here.
    stopped_start = stopped_s(stat_files)
    iter_start = clock()
    iterator = iter(loader)
    fetcher = torch_internals.main_process_fetcher(iterator)
    if fetcher is not None:
        fetcher.fetch = MainProcessFetch(fetcher.fetch)
    unwrapped = timer = anchor = None
    if wrap is None:
        source = iterator
    else:
        unwrapped = _Unwrapped(iterator)
        source = wrap(iter(unwrapped))
        timer = PrefetcherTimer(source)
        if timer.cuda:
            import torch

            torch.cuda.synchronize()
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            anchor = (clock(), event)
    source_iter = iter(source)
    iter_end = clock()
    stopped_iter_end = stopped_s(stat_files)
    stopped_first = None
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
        if stat_files and stopped_first is None:
            stopped_first = stopped_s(stat_files)
        if unwrapped is not None:
            if not unwrapped.stamps:
                raise RuntimeError(
                    "the prefetcher handed out more batches than it took from the loader: "
                    "record(wrap=...) needs a prefetcher that passes each batch on once, in order")
            stamped, data = unwrapped.stamps.popleft(), item
        elif isinstance(item, Stamped):
            stamped, data = item, item.data
        else:
            raise RuntimeError(
                "a batch arrived without the instrument's timings: record() supports "
                "torch.utils.data.DataLoader iterators (a DataLoader subclass that "
                "changes iteration is not supported)")
        copy_end = None
        if device is not None:
            data = to_device(data, device, non_blocking=loader.pin_memory)
            synchronize(device)
            copy_end = clock()
        step(data)
        wait_for_step()  # a CUDA step is asynchronous: its end is when its work is done
        del data, item
        step_end = clock()
        stopped_now = stopped_s(stat_files)  # None without a quota
        if first_ready is None:
            first_ready = ready
        if stamped.worker != MAIN_PROCESS and stamped.worker_ready >= iter_start:
            worker_ready.setdefault(stamped.worker, stamped.worker_ready - t0)
        record_ = BatchRecord(
            epoch=epoch, index=index, worker=stamped.worker,
            fetch_start=stamped.fetch_start - t0, fetch_end=stamped.fetch_end - t0,
            wait_start=wait_start - t0, ready=ready - t0, step_end=step_end - t0,
            worker_seq=stamped.seq, indices=stamped.indices, pid=stamped.pid,
            sent=_since(stamped.sent, t0), received_start=_since(stamped.received_start, t0),
            received_end=_since(stamped.received_end, t0),
            pin_start=_since(stamped.pin_start, t0), pin_end=_since(stamped.pin_end, t0),
            copy_end=_since(copy_end, t0), fetch_cpu_s=stamped.fetch_cpu, collate_s=stamped.collate_s,
            stopped=_between(stopped_start, stopped_now))
        batches.append(record_)
        del stamped
        if bar is not None:
            bar.update(1)
        if on_batch is not None:
            on_batch(record_)
    end = clock()
    stopped_end = stopped_s(stat_files)
    spans: list[Span] = []
    if unwrapped is not None:
        close = getattr(source, "close", None)
        if close is not None:
            close()
        unwrapped.end()
        spans = [Span(row, kind, start - t0, stop - t0, epoch, number)
                 for row, kind, start, stop, number in timer.spans(anchor)]
    # Without persistent workers, this epoch's workers end when the iterator goes (as in a
    # loop that moves on to the next epoch); the time shows before the next iter(). Ended here, not
    # by `del`: a wrap that refers to itself (a ThreadPrefetcher whose transform is its own method) keeps
    # the iterator alive until the garbage collector runs, whose shutdown then lands in a later run.
    if fetcher is not None:
        del fetcher.fetch  # the hook holds the fetcher's own method, a cycle; the dataset's iterator
        # (a generator, with its `finally`) would then also wait for the collector
    if not loader.persistent_workers:
        torch_internals.shutdown_workers(iterator)
    del iterator, source, source_iter, fetcher
    return EpochRecord(epoch=epoch, iter_start=iter_start - t0, iter_end=iter_end - t0,
                       first_ready=_since(first_ready, t0), end=end - t0,
                       worker_ready=worker_ready, stopped_s=_between(stopped_start, stopped_end),
                       stopped_in_iter_s=_between(stopped_start, stopped_iter_end),
                       stopped_to_first_s=_between(stopped_iter_end, stopped_first)), spans


class NotImportable(TypeError):
    """Something the workers need cannot reach them under spawn or forkserver."""


def start_method_of(loader: DataLoader) -> str:
    """How the loader's workers start: its ``multiprocessing_context`` (PyTorch keeps it as a context
    object), else this process's default."""
    import multiprocessing

    context = loader.multiprocessing_context
    return context.get_start_method() if context is not None else multiprocessing.get_start_method()


def check_importable(loader: DataLoader) -> None:
    """Raise :class:`NotImportable` naming the fix when the loader's workers start by spawn or
    forkserver and its dataset, ``collate_fn`` or ``worker_init_fn`` is a lambda, a function or
    class defined inside another function, or defined in a notebook cell
    (:func:`helpers.timing.plain.unimportable_parts`): each worker receives them pickled *by name*
    and imports them, and these have no importable name (PyTorch's own error is a bare "Can't pickle
    local object" or, from the dead worker, "Can't get attribute ... on <module '__main__'>")."""
    found = unimportable_parts(loader)
    if found:
        part, why = next(iter(found.items()))
        raise NotImportable(
            f"the loader's {part} {why}: its workers start by {start_method_of(loader)}, and each one "
            f"imports what it runs by name, which this cannot give. Define it at the top level of a .py file "
            f"(a module you import, like the lab's helpers) and pass that — or use fork where it exists. "
            f"(PyTorch's own error would be \"Can't pickle local object\" or \"Can't get attribute\".)")


def _between(before: float | None, after: float | None) -> float | None:
    """What a cumulative counter gained between two readings (None when either is missing)."""
    return None if before is None or after is None else after - before


def _since(value: float | None, t0: float) -> float | None:
    return None if value is None else value - t0
