"""Prefetchers that sit between the DataLoader and the training loop.

* :class:`DevicePrefetcher` copies batch s+1 to the GPU on a side CUDA stream while
  the loop steps on batch s (the PyTorch tutorial's prefetcher, with the reasons
  spelled out), optionally shipping uint8 and normalising on the device.
* :class:`ThreadPrefetcher` runs a per-batch main-process transform in a
  background thread, ``depth`` batches ahead; :class:`BatchTransform` runs the same
  transform in the loop's own thread (the baseline to compare with).

All three wrap an iterable of batches (a DataLoader, or the iterator that
:func:`helpers.record` passes to ``wrap=``), are iterables themselves, and keep
``spans``: ``(row, kind, start, end, batch)`` tuples on the ``time.perf_counter``
clock, which ``record`` draws as extra timeline rows. They run in the main
process only.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from time import perf_counter as clock
from typing import Any

import torch

from .datasets import pay
from .timeline import map_data
from .transfer import tensors_in, to_device


class HostTransform:
    """A costly per-batch transform in the main process (e.g. augmentation on the
    whole batch): ``busy_s`` of CPU work plus ``sleep_s`` of waiting; returns the batch."""

    def __init__(self, busy_s: float = 0.0, sleep_s: float = 0.0):
        if busy_s < 0 or sleep_s < 0:
            raise ValueError(f"busy_s and sleep_s must be >= 0 seconds, got {busy_s}, {sleep_s}")
        self.busy_s = busy_s
        self.sleep_s = sleep_s

    def __call__(self, batch: Any) -> Any:
        pay(self.sleep_s, self.busy_s)
        return batch

    def __repr__(self) -> str:
        return f"HostTransform(busy_s={self.busy_s}, sleep_s={self.sleep_s})"


class _Spans:
    def __init__(self, row: str, kind: str):
        self.row = row
        self.kind = kind
        self.spans: list[tuple[str, str, float, float, int]] = []

    def _timed(self, fn: Callable[[Any], Any], item: Any, number: int) -> Any:
        start = clock()
        out = map_data(item, fn)
        self.spans.append((self.row, self.kind, start, clock(), number))
        return out


class BatchTransform(_Spans):
    """Apply ``transform`` to each batch in the loop's thread, when the loop asks for it
    (no overlap: the transform adds to every iteration)."""

    def __init__(self, source: Iterable[Any], transform: Callable[[Any], Any]):
        super().__init__("transform (loop thread)", "transform")
        self.source = source
        self.transform = transform

    def __iter__(self) -> Iterator[Any]:
        for number, item in enumerate(self.source):
            yield self._timed(self.transform, item, number)


_DONE = object()


class ThreadPrefetcher(_Spans):
    """Apply ``transform`` to each batch in a background thread, up to ``depth`` batches
    ahead of the loop.

    It overlaps with the loop wherever the loop's thread does not need the CPU or the
    GIL: a step on an accelerator (or the modelled one), I/O, or torch ops that
    release the GIL. Pure-Python transforms still take turns with Python in the loop.
    Errors in the thread are raised in the loop; :meth:`close` stops the thread.
    """

    def __init__(self, source: Iterable[Any], transform: Callable[[Any], Any], *, depth: int = 2):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an integer >= 1 (batches held ahead), got {depth!r}")
        super().__init__("prefetch thread", "transform")
        self.source = source
        self.transform = transform
        self.depth = depth
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _put(self, value: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(value, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for number, item in enumerate(self.source):
                if self._stop.is_set() or not self._put(self._timed(self.transform, item, number)):
                    return
            self._put(_DONE)
        except BaseException as error:  # handed to the loop, raised there
            self._put(error)

    def __iter__(self) -> Iterator[Any]:
        if self._thread is not None:
            raise RuntimeError("a ThreadPrefetcher is iterated once; make a new one per epoch")
        self._thread = threading.Thread(target=self._run, name="ThreadPrefetcher", daemon=True)
        self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop the background thread (it finishes the batch it is on) and drop what it held."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            while self._thread.is_alive():
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    pass
                self._thread.join(timeout=0.05)


class DevicePrefetcher:
    """Copy the next batch to ``device`` on a side CUDA stream while the loop steps on this one.

    How it keeps the copy correct and overlapped (CUDA):

    * copies are queued on a side stream, so they run beside the compute on the
      default stream (the source must be pinned — ``pin_memory=True`` — for the copy
      to be asynchronous at all);
    * before handing a batch out, the default stream ``wait_stream``-s the side
      stream: kernels queued next cannot read the batch before its copy finished;
    * each handed-out tensor gets ``record_stream(default stream)``. The caching
      allocator tracks memory per stream: the batch was allocated on the side
      stream, and without this, when the loop drops its last reference the
      allocator would hand the block to the *next copy* on the side stream while
      kernels on the default stream may still be reading it (a silent race).

    ``normalize=(mean, std)``: the advanced variant. The loader ships uint8 images
    (4× fewer bytes to copy and to pass between processes); the first tensor of
    each batch is converted to float and normalised on the device, on the side stream.

    On a non-CUDA device (the CPU) it does the same work synchronously, so the code
    path runs everywhere; there is nothing to overlap there.
    ``spans``: the copies, timed with CUDA events on the side stream (host clock on the CPU).
    """

    def __init__(
        self,
        source: Iterable[Any],
        device: torch.device | str,
        *,
        normalize: tuple[Sequence[float], Sequence[float]] | None = None,
    ):
        self.source = source
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.normalize = normalize
        self._mean = self._std = None
        if normalize is not None:
            mean, std = normalize
            shape = (1, len(mean), 1, 1)
            self._mean = torch.tensor(mean, dtype=torch.float32).view(shape).to(self.device)
            self._std = torch.tensor(std, dtype=torch.float32).view(shape).to(self.device)
        self._host_spans: list[tuple[str, str, float, float, int]] = []
        self._events: list[tuple[Any, Any, int]] = []
        self._anchor: tuple[float, Any] | None = None

    def _move(self, batch: Any) -> Any:
        batch = to_device(batch, self.device, non_blocking=self.cuda)
        if self.normalize is not None:
            first, *rest = batch if isinstance(batch, (list, tuple)) else (batch,)
            first = first.float().div_(255.0).sub_(self._mean).div_(self._std)
            batch = (first, *rest) if isinstance(batch, (list, tuple)) else first
        return batch

    def _start_copy(self, item: Any, number: int) -> Any:
        if not self.cuda:
            start = clock()
            moved = map_data(item, self._move)
            self._host_spans.append(("copy (loop thread)", "copy", start, clock(), number))
            return moved
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            begin.record(self.stream)
            moved = map_data(item, self._move)
            end.record(self.stream)
        self._events.append((begin, end, number))
        return moved

    def _hand_out(self, item: Any) -> Any:
        if self.cuda:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)

            def keep(batch: Any) -> Any:
                for tensor in tensors_in(batch):
                    tensor.record_stream(current)
                return batch

            map_data(item, keep)
        return item

    def __iter__(self) -> Iterator[Any]:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            anchor = torch.cuda.Event(enable_timing=True)
            anchor.record(torch.cuda.current_stream(self.device))
            self._anchor = (clock(), anchor)
        iterator = iter(self.source)
        try:
            pending = self._start_copy(next(iterator), 0)
        except StopIteration:
            return
        number = 1
        for item in iterator:
            following = self._start_copy(item, number)  # queued before the loop steps on `pending`
            yield self._hand_out(pending)
            pending = following
            number += 1
        yield self._hand_out(pending)

    @property
    def spans(self) -> list[tuple[str, str, float, float, int]]:
        """Copy spans on the host clock (synchronises the device to read CUDA events)."""
        if not self.cuda or self._anchor is None:
            return list(self._host_spans)
        torch.cuda.synchronize(self.device)
        anchor_s, anchor = self._anchor
        return [("copy stream", "copy", anchor_s + anchor.elapsed_time(b) / 1e3,
                 anchor_s + anchor.elapsed_time(e) / 1e3, n) for b, e, n in self._events]

