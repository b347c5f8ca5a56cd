"""Prefetchers that sit between the DataLoader and the training loop.

* :class:`ThreadPrefetcher` runs a per-batch main-process transform in a background
  thread, ``depth`` batches ahead of the loop; :class:`BatchTransform` runs the same
  transform in the loop's own thread (the baseline to compare with).
* :class:`DevicePrefetcher` copies batches to the GPU on a side CUDA stream, in a
  background thread, so the copy of batch s+1 runs while the GPU steps on batch s; the
  step on each batch waits (on the GPU, not on the host) for that batch's own copy only.
  It is self-contained (torch and the standard library only), so it can be copied into a
  script whole: notebook 07 shows it, and a test keeps that copy identical to this one.
* :class:`SerialisedDevicePrefetcher` is the serialised order, kept only to measure what the
  order above buys: it orders every step after the *next* copy too.

Each wraps an iterable of batches (a DataLoader), is an iterable itself, and runs in the
main process. They carry no timing code: :func:`helpers.record` times their per-batch
work (``transform``, ``copy_to_device``) from outside.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from ..timing.device import tensors_in, to_device


class BatchTransform:
    """Apply ``transform`` to each batch in the loop's thread, when the loop asks for it
    (no overlap: the transform adds to every iteration)."""

    def __init__(self, source: Iterable[Any], transform: Callable[[Any], Any]):
        self.source = source
        self.transform = transform

    def __iter__(self) -> Iterator[Any]:
        for batch in self.source:
            yield self.transform(batch)


_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class ThreadPrefetcher:
    """Apply ``transform`` to each batch in a background thread, up to ``depth`` batches
    ahead of the loop.

    It overlaps with the loop wherever the loop's thread does not need the CPU or the
    GIL: a step on an accelerator (or the modelled one), I/O, or torch ops that
    release the GIL. Pure-Python transforms still take turns with Python in the loop.
    Errors in the thread are raised in the loop; :meth:`close` stops the thread (it runs
    when the iteration ends, or when the generator is closed or dropped).
    """

    def __init__(self, source: Iterable[Any], transform: Callable[[Any], Any], *, depth: int = 2):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an integer >= 1 (batches held ahead), got {depth!r}")
        self.source = source
        self.transform = transform
        self.depth = depth
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the two halves of the pattern: in the thread, and in the loop's thread -----------
    def _prepare(self, batch: Any) -> Any:
        """Runs in the background thread for each batch."""
        return self.transform(batch)

    def _hand_out(self, prepared: Any) -> Any:
        """Runs in the loop's thread just before the loop gets the batch."""
        return prepared

    # -- the thread -------------------------------------------------------------------
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
            for batch in self.source:
                if self._stop.is_set() or not self._put(self._prepare(batch)):
                    return
            self._put(_DONE)
        except BaseException as error:  # handed to the loop, raised there
            self._put(_Failure(error))

    def __iter__(self) -> Iterator[Any]:
        if self._thread is not None:
            raise RuntimeError(f"a {type(self).__name__} is iterated once; make a new one per epoch")
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield self._hand_out(item)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the background thread without waiting for it (it ends after the batch it is on, or
        within 0.05 s if it is waiting for room) and drop what it held: a loop that leaves early goes on
        at once."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return


class DevicePrefetcher:
    """Move batches to ``device`` in a background thread, ``depth`` batches ahead of the loop: on
    CUDA each copy runs on a side stream beside the step (pin the source: ``pin_memory=True``).
    ``normalize=(mean, std)`` turns the batch's first tensor, uint8 images, into normalised floats."""

    def __init__(self, source, device, *, normalize=None, depth=2):
        self.source, self.device, self.depth, self.thread = source, torch.device(device), depth, None
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        with torch.cuda.stream(self.stream):  # made where the copies use them (no stream: no-op)
            self.normalize = normalize and [torch.tensor(v, device=self.device).view(1, -1, 1, 1)
                                            for v in normalize]

    def copy_to_device(self, batch):
        """Move one batch (and normalise it): queued on the side stream on CUDA."""
        batch = self._each(batch, lambda t: t.to(self.device, non_blocking=self.stream is not None))
        if not self.normalize:
            return batch
        (mean, std), several = self.normalize, isinstance(batch, (list, tuple))
        images = (batch[0] if several else batch).float().div_(255.0).sub_(mean).div_(std)
        return (images, *batch[1:]) if several else images

    def _each(self, batch, work):  # work(tensor) on every tensor in nested tuples, lists and dicts
        if isinstance(batch, dict):
            return {key: self._each(value, work) for key, value in batch.items()}
        if isinstance(batch, (list, tuple)):
            return type(batch)(self._each(value, work) for value in batch)
        return work(batch) if isinstance(batch, torch.Tensor) else batch

    def _run(self, ready, stop, loop):  # the background thread
        try:
            for batch in self.source:
                copied = torch.cuda.Event() if self.stream is not None else None
                with torch.cuda.stream(self.stream):
                    batch = self.copy_to_device(batch)
                if copied is not None:
                    copied.record(self.stream)  # reached when this batch's copy is done
                    self._each(batch, lambda t: t.record_stream(loop))  # kept until the loop is done
                if not self._put(ready, stop, (batch, copied)):
                    return
            self._put(ready, stop, None)
        except BaseException as error:  # raised in the loop
            self._put(ready, stop, error)

    @staticmethod
    def _put(ready, stop, item):  # False once the loop has gone (close): the thread then ends
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def __iter__(self):
        loop = torch.cuda.current_stream(self.device) if self.stream is not None else None  # loop's stream
        self.ready, self.stop = queue.Queue(maxsize=self.depth), threading.Event()
        self.thread = threading.Thread(target=self._run, args=(self.ready, self.stop, loop), daemon=True)
        self.thread.start()
        try:
            while (item := self.ready.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                batch, copied = item
                if copied is not None:
                    loop.wait_event(copied)  # this batch's copy, and nothing queued after it
                yield batch
        finally:
            self.close()

    def close(self):
        """Stop the thread without waiting for it: it ends after the batch it is on."""
        if self.thread is not None:
            self.stop.set()
            while not self.ready.empty():  # drop the batches copied ahead
                self.ready.get_nowait()


class SerialisedDevicePrefetcher:
    """The serialised order, kept to measure what :class:`DevicePrefetcher`
    buys. Do not copy it: it pulls batch s+1 from the loader and queues its copy *before*
    handing out batch s, then makes the loop's stream wait for the whole side stream — so
    the step on batch s also waits for copy s+1 (with a sync per step, such as
    ``loss.item()``, copy and step are serialised), and the loop waits for the loader's
    next batch before it may step on this one."""

    def __init__(self, source: Iterable[Any], device: torch.device | str):
        self.source = source
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def copy_to_device(self, batch: Any) -> Any:
        return to_device(batch, self.device, non_blocking=self.stream is not None)

    def _start_copy(self, batch: Any) -> Any:
        if self.stream is None:
            return self.copy_to_device(batch)
        with torch.cuda.stream(self.stream):
            return self.copy_to_device(batch)

    def _hand_out(self, moved: Any) -> Any:
        if self.stream is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)
            for tensor in tensors_in(moved):
                tensor.record_stream(current)
        return moved

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.source)
        try:
            pending = self._start_copy(next(iterator))
        except StopIteration:
            return
        for batch in iterator:
            following = self._start_copy(batch)  # queued before the loop steps on `pending`
            yield self._hand_out(pending)
            pending = following
        yield self._hand_out(pending)
