"""Prefetchers that sit between the DataLoader and the training loop.

* :class:`ThreadPrefetcher` runs a per-batch main-process transform in a background
  thread, ``depth`` batches ahead of the loop; :class:`BatchTransform` runs the same
  transform in the loop's own thread (the baseline to compare with).
* :class:`DevicePrefetcher` copies batches to the GPU on a side CUDA stream, in a
  background thread, so the copy of batch s+1 runs while the GPU steps on batch s; the
  step on each batch waits (on the GPU, not on the host) for that batch's own copy only.
* :class:`SerialisedDevicePrefetcher` is this lab's former device prefetcher, kept only
  to measure what the fix above buys: it orders every step after the *next* copy too.

Each wraps an iterable of batches (a DataLoader), is an iterable itself, and runs in the
main process. They carry no timing code: :func:`helpers.record` times their per-batch
work (``transform``, ``copy_to_device``) from outside.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
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
        """Stop the background thread (it finishes the batch it is on) and drop what it held."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            while self._thread.is_alive():
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    pass
                self._thread.join(timeout=0.05)


class DevicePrefetcher(ThreadPrefetcher):
    """Copy batches to ``device`` ahead of the loop, so the copy of batch s+1 runs while the
    GPU steps on batch s.

    The pattern, on CUDA:

    * **A background thread** takes batches from the loader and queues each copy as soon
      as the batch arrives, ``depth`` batches ahead. The loop gets batch s as soon as its
      copy is *queued*, never waiting for the loader to produce batch s+1; and copy s+1
      is queued while step s runs, even if the step ends in a sync such as
      ``loss.item()`` (a copy queued after that sync could no longer overlap it).
    * **A side stream** for the copies, so they run beside the compute on the loop's
      stream (the GPU's copy engines are separate from its compute units). The source
      must be pinned (``pin_memory=True``) for the copy to be asynchronous at all.
    * **An event per copy**: recorded on the side stream right after copy s was queued.
      Before handing batch s out, the loop's stream ``wait_event``-s it: the step's kernels
      run after *this batch's* copy and after nothing queued after it (``wait_stream`` on
      the side stream would also wait for any later batch's copy queued by then). The host
      does not block.
    * **record_stream**: the batch's memory was allocated on the side stream; PyTorch's
      caching allocator reuses freed blocks per stream. ``record_stream(loop's stream)``
      stops it from handing the block to a later copy while kernels on the loop's stream
      may still read it (a silent race, not an error).

    ``normalize=(mean, std)``: the loader ships uint8 images (4× fewer bytes through
    shared memory, pinning and the copy); the first tensor of each batch is converted to
    float and normalised on the device, on the side stream.

    On a non-CUDA device (the CPU) the same thread moves each batch synchronously: the code
    path runs everywhere, and there is no copy to overlap.
    """

    def __init__(self, source: Iterable[Any], device: torch.device | str, *,
                 normalize: tuple[Sequence[float], Sequence[float]] | None = None, depth: int = 2):
        super().__init__(source, self.copy_to_device, depth=depth)
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self.normalize = normalize
        self._mean = self._std = None
        if normalize is not None:
            mean, std = normalize
            shape = (1, len(mean), 1, 1)
            self._mean = torch.tensor(mean, dtype=torch.float32).view(shape).to(self.device)
            self._std = torch.tensor(std, dtype=torch.float32).view(shape).to(self.device)

    def copy_to_device(self, batch: Any) -> Any:
        """Move one batch (and normalise it); queued on the side stream on CUDA."""
        batch = to_device(batch, self.device, non_blocking=self.stream is not None)
        if self.normalize is not None:
            first, *rest = batch if isinstance(batch, (list, tuple)) else (batch,)
            first = first.float().div_(255.0).sub_(self._mean).div_(self._std)
            batch = (first, *rest) if isinstance(batch, (list, tuple)) else first
        return batch

    def _prepare(self, batch: Any) -> Any:
        if self.stream is None:
            return self.copy_to_device(batch), None
        with torch.cuda.stream(self.stream):
            moved = self.copy_to_device(batch)
            copied = torch.cuda.Event()
            copied.record(self.stream)
        return moved, copied

    def _hand_out(self, prepared: Any) -> Any:
        moved, copied = prepared
        if copied is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(copied)  # this batch's copy, and nothing queued after it
            for tensor in tensors_in(moved):
                tensor.record_stream(current)
        return moved

    def __iter__(self) -> Iterator[Any]:
        if self.stream is not None:
            # The side stream starts after everything queued so far (e.g. the normalisation
            # constants' copies) on the loop's stream.
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
        return super().__iter__()


class SerialisedDevicePrefetcher:
    """The lab's former device prefetcher, kept to measure what :class:`DevicePrefetcher`
    fixes. Do not copy it: it pulls batch s+1 from the loader and queues its copy *before*
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
