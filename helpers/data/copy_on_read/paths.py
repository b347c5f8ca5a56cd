"""The datasets of notebook 12: a list of paths held four ways (:data:`STORAGES`), read by
:class:`PathDataset`, and what a batch of each sends back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

MiB = 2**20

#: How each storage keeps the same strings. "none" keeps no data (the index is the item):
#: the reference for what a worker's memory does anyway while it serves an epoch.
STORAGES = ("list", "object array", "numpy bytes", "buffer + offsets", "arrow", "tensor", "none")


def _name(i: int) -> str:
    return f"train/{i % 1000:04d}/img_{i:08d}.jpg"


def make_paths(n: int) -> list[str]:
    """``n`` file names like ``train/0042/img_00001234.jpg`` (27 characters each): the list a
    dataset of images typically holds."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return [_name(i) for i in range(n)]


@contextlib.contextmanager
def no_hugepage_hint() -> Iterator[None]:
    """Make NumPy arrays, inside the block, without its transparent-huge-page hint.

    On Linux NumPy asks the kernel for transparent huge pages for every array of 4 MiB or more
    (``madvise``; numpy.org, "Global state": madvise hugepage on Linux, ``NUMPY_MADVISE_HUGEPAGE``).
    Where ``/sys/kernel/mm/transparent_hugepage/enabled`` says ``madvise`` or ``always``, the
    kernel's ``khugepaged`` may later merge such an array's pages into huge pages in one process
    — a copy — and a forked worker's pages of it stop being shared though nobody wrote to it.
    Notebook 12 compares what *reading* copies, so its arrays are made without the hint."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # NumPy 1.x
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            yield
            return
    previous = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(previous)


MADV_NOHUGEPAGE = 15  #: <sys/mman.h> on Linux


def refuse_huge_pages(array: np.ndarray | torch.Tensor) -> bool:
    """Mark the whole pages of ``array``'s buffer ``MADV_NOHUGEPAGE``, so that ``khugepaged`` never
    merges them into huge pages (a copy) in a forked worker. :func:`no_hugepage_hint` alone was not
    enough: an array made without NumPy's hint can reuse heap memory an earlier array was hinted in
    (the hint marks the address range, not the array). Returns whether the kernel took the advice
    (False off Linux, or for a buffer under a page). (It was added for a numpy-bytes worker seen
    8.4 MiB above a no-data worker; that incident recurs with it, and the one recorded per mapping
    had its extra pages in the heap, not in the array: the flag stays, as harmless, and the cause
    is open.)"""
    import ctypes
    import mmap
    import sys

    if not sys.platform.startswith("linux"):
        return False
    address = array.data_ptr() if isinstance(array, torch.Tensor) else array.ctypes.data
    nbytes = array.nbytes
    page = mmap.PAGESIZE
    start, end = -(-address // page) * page, (address + nbytes) // page * page
    if end <= start:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_NOHUGEPAGE) == 0


def _encode(paths: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """One uint8 buffer with every string's UTF-8 bytes, and ``len(paths) + 1`` offsets."""
    encoded = [p.encode() for p in paths]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


class PathDataset(Dataset):
    """The same file names held one of :data:`STORAGES`' ways; item ``i`` reads name ``i``
    and returns the class number in it (as a dataset of images would read the path, then
    the file). ``"none"`` holds nothing and computes the same number from ``i``."""

    def __init__(self, paths: Sequence[str], storage: str = "list"):
        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {', '.join(map(repr, STORAGES))}, got {storage!r}")
        self.storage = storage
        self.length = len(paths)
        self.data: Any = None
        self.offsets: Any = None
        with no_hugepage_hint():
            self._hold(paths, storage)
        for array in (self.data, self.offsets):
            if isinstance(array, (np.ndarray, torch.Tensor)):
                refuse_huge_pages(array)

    def _hold(self, paths: Sequence[str], storage: str) -> None:
        if storage == "list":
            self.data = list(paths)
        elif storage == "object array":
            self.data = np.array(list(paths), dtype=object)
        elif storage == "numpy bytes":
            self.data = np.array([p.encode() for p in paths])  # fixed-width bytes: one buffer
        elif storage == "buffer + offsets":
            self.data, self.offsets = _encode(paths)
        elif storage == "arrow":
            try:
                import pyarrow as pa
            except ImportError as error:  # pragma: no cover - pyarrow is a dependency
                raise ImportError("storage='arrow' needs pyarrow: run `make lab` (it installs it)") from error
            self.data = pa.array(list(paths), type=pa.string())
            # Building the array grows its buffers step by step; Arrow's allocator (mimalloc here) keeps
            # the freed steps mapped - 74 MiB beside the 59 MiB array for 2,000,000 names, 14 MiB for
            # 300,000 - and forked workers inherit them. When the main process and one worker each give
            # that memory back, the other worker is left its only holder: its USS grows with nothing
            # read (seen in 1 CPU at full size: one worker 46 MiB above the other, 38.8 over a no-data
            # worker). Returned before any worker starts, there is nothing to inherit.
            pa.default_memory_pool().release_unused()
        elif storage == "tensor":
            buffer, offsets = _encode(paths)
            self.data, self.offsets = torch.from_numpy(buffer.copy()), torch.from_numpy(offsets)

    def __len__(self) -> int:
        return self.length

    def path(self, i: int) -> str:
        """The name at ``i``, read from this dataset's storage."""
        if self.storage in ("list", "object array"):
            return self.data[i]
        if self.storage == "numpy bytes":
            return self.data[i].decode()
        if self.storage == "buffer + offsets":
            return self.data[self.offsets[i]:self.offsets[i + 1]].tobytes().decode()
        if self.storage == "arrow":
            return self.data[i].as_py()
        if self.storage == "tensor":
            start, end = int(self.offsets[i]), int(self.offsets[i + 1])
            return self.data[start:end].numpy().tobytes().decode()
        return _name(i)

    def __getitem__(self, i: int) -> int:
        return int(self.path(i)[6:10])

    def data_bytes(self) -> int:
        """What the storage holds, in bytes (for a list: the list and every string object)."""
        import sys

        if self.storage == "list":
            return sys.getsizeof(self.data) + sum(sys.getsizeof(p) for p in self.data)
        if self.storage == "object array":
            return int(self.data.nbytes) + sum(sys.getsizeof(p) for p in self.data)
        if self.storage == "numpy bytes":
            return int(self.data.nbytes)
        if self.storage == "buffer + offsets":
            return int(self.data.nbytes + self.offsets.nbytes)
        if self.storage == "arrow":
            return int(self.data.nbytes)
        if self.storage == "tensor":
            return int(self.data.nbytes + self.offsets.nbytes)
        return 0


def sent_bytes(dataset: Any) -> int:
    """The bytes ``spawn`` and ``forkserver`` send to *each* worker for ``dataset``: the
    DataLoader passes it in the worker's ``Process`` arguments (in a one-item list the
    worker empties), which multiprocessing pickles with its ``ForkingPickler``. PyTorch
    registers reductions there that move a tensor's storage into shared memory and send a
    handle (a file descriptor, with the default ``file_descriptor`` strategy) instead.

    Pickled here, outside a process start, a descriptor is lent through multiprocessing's
    resource sharer (a thread that keeps a duplicate of it); that is stopped afterwards, so
    the shared memory is released and no thread is left."""
    from multiprocessing import resource_sharer
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)

    try:
        return len(ForkingPickler.dumps(dataset))
    finally:
        resource_sharer.stop(timeout=5)


def encoded_bytes(paths: Sequence[str]) -> int:
    """The names' UTF-8 bytes: the least any storage holds."""
    return sum(len(p.encode()) for p in paths)
