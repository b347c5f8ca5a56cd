"""A real image pipeline (notebook 14): JPEG files made here, decoded and augmented in workers.

:func:`make_jpegs` draws synthetic photographs (smooth colour fields with texture and
noise, so that JPEG compresses them as it does photos, about 0.5 bytes per pixel at quality
90) and encodes them with ``torchvision.io.encode_jpeg``: no download. :func:`pack_tar`
packs them into one tar shard. :class:`JpegDataset` reads either — one file per image, or a
byte range of the shard — decodes with ``torchvision.io.decode_jpeg`` and applies a
``transforms.v2`` pipeline (:func:`train_transform`). The batch leaves the worker as uint8;
:func:`normalize_on_device` turns it into normalised floats where the model runs.

``threads`` gives the dataset a ``__getitems__`` that decodes a batch's images on a pool of
threads inside one process, to compare threads with worker processes on the same work.
"""

from __future__ import annotations

import functools
import os
import tarfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

# Imported here, not in the first __getitem__: a worker started by spawn or forkserver imports
# this module while it unpickles the dataset (its start-up), so the first fetch is a fetch.
from torchvision.io import decode_jpeg, encode_jpeg

#: ImageNet's channel means and standard deviations (of images scaled to 0..1).
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def synthetic_image(index: int, size: int) -> torch.Tensor:
    """A ``3 × size × size`` uint8 picture, the same for the same index: two colour waves at a
    random frequency and phase, a bright disc, and pixel noise."""
    g = torch.Generator().manual_seed(index)
    y, x = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    a, b = torch.rand(3, 1, 1, generator=g), torch.rand(3, 1, 1, generator=g)
    f = 1 + 9 * torch.rand(1, generator=g)
    img = 0.5 + 0.5 * (a * torch.sin(f * 6.28 * x + 6 * b) + (1 - a) * torch.cos(4 * f * y * (1 + b)))
    cy, cx, r = torch.rand(3, generator=g)
    img = torch.where((y - cy) ** 2 + (x - cx) ** 2 < (0.1 + 0.2 * r) ** 2, 0.5 + 0.5 * b.expand_as(img), img)
    img = img + 0.06 * torch.randn(3, size, size, generator=g)
    return (img.clamp(0, 1) * 255).to(torch.uint8)


def make_jpegs(
    folder: str | os.PathLike, n: int, size: int, *, quality: int = 90, classes: int = 10
) -> tuple[list[Path], list[int]]:
    """Write ``n`` JPEG files of ``size × size`` pixels into ``folder``; their paths and labels."""

    if not isinstance(n, int) or n < 1 or not isinstance(size, int) or size < 8:
        raise ValueError(f"n must be a positive integer and size at least 8 pixels, got {n!r} and {size!r}")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be 1..100, got {quality!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths, labels = [], []
    for i in range(n):
        path = folder / f"img_{i:06d}.jpg"
        path.write_bytes(encode_jpeg(synthetic_image(i, size), quality=quality).numpy().tobytes())
        paths.append(path)
        labels.append(i % classes)
    return paths, labels


def pack_tar(paths: Sequence[str | os.PathLike], shard: str | os.PathLike) -> Path:
    """Pack files into one tar shard (the format WebDataset and many pipelines read)."""
    shard = Path(shard)
    with tarfile.open(shard, "w") as tar:
        for path in paths:
            tar.add(path, arcname=Path(path).name)
    return shard


def tar_index(shard: str | os.PathLike) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Names, data offsets and sizes of the members of a tar shard (read once, in the main
    process; kept as NumPy arrays so that forked workers share them: notebook 12)."""
    names, offsets, sizes = [], [], []
    with tarfile.open(shard, "r") as tar:
        for member in tar:
            if member.isfile():
                names.append(member.name)
                offsets.append(member.offset_data)
                sizes.append(member.size)
    if not names:
        raise ValueError(f"{shard} holds no files: pack it with helpers.pack_tar(paths, shard)")
    return names, np.array(offsets, dtype=np.int64), np.array(sizes, dtype=np.int64)


def train_transform(crop: int, *, normalize: bool = False):
    """The usual training augmentation on a decoded uint8 image: ``RandomResizedCrop`` and a
    horizontal flip. ``normalize=True`` also converts to float and normalises here, in the
    worker (what ``normalize_on_device`` does after the copy instead)."""
    from torchvision.transforms import v2

    steps = [v2.RandomResizedCrop(crop, antialias=True), v2.RandomHorizontalFlip()]
    if normalize:
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    return v2.Compose(steps)


def normalize_on_device(images: torch.Tensor, device: Any = "cpu") -> torch.Tensor:
    """uint8 images (N, 3, H, W) → float32 normalised on ``device`` with the v2 transforms
    ``ToDtype(float32, scale=True)`` and ``Normalize(MEAN, STD)``, which work on a batch and on
    any device: the copy moves 1 byte per value, and the conversion runs where the model runs."""
    from torchvision.transforms import v2

    if images.dtype != torch.uint8:
        raise TypeError(f"normalize_on_device expects the loader's uint8 images, got {images.dtype}")
    to_float = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    return to_float(images.to(device, non_blocking=True))


class JpegDataset(Dataset):
    """Images read from JPEG files or from one tar shard, decoded and transformed.

    Args:
        source: a list of file paths, or the path of a tar shard (:func:`pack_tar`).
        labels: one label per image.
        transform: applied to the decoded uint8 image (e.g. :func:`train_transform`); None: none.
        threads: 1 = one image at a time; more = ``__getitems__`` decodes a batch's images on a
            pool of this many threads in the worker (or the main process).
    """

    def __init__(
        self,
        source: Sequence[str | os.PathLike] | str | os.PathLike,
        labels: Sequence[int],
        *,
        transform: Any = None,
        threads: int = 1,
    ):
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        if isinstance(source, str | os.PathLike):
            self.shard: Path | None = Path(source)
            if not self.shard.is_file():
                raise FileNotFoundError(
                    f"no tar shard at {self.shard}: make one with helpers.pack_tar(paths, shard)"
                )
            _, self.offsets, self.sizes = tar_index(self.shard)
            count = len(self.offsets)
            self.paths = None
        else:
            self.shard, self.offsets, self.sizes = None, None, None
            self.paths = np.array([str(p) for p in source])  # one object, not a list of str (notebook 12)
            count = len(self.paths)
            if count == 0:
                raise ValueError("no image paths: pass the paths that helpers.make_jpegs() returned")
            missing = [p for p in self.paths[:3] if not os.path.isfile(p)]
            if missing:
                raise FileNotFoundError(f"no image at {missing[0]}: make the files with helpers.make_jpegs()")
        if len(labels) != count:
            raise ValueError(f"{len(labels)} labels for {count} images: give one label per image")
        self.labels = torch.as_tensor(labels, dtype=torch.int64)
        self.transform, self.threads = transform, threads
        self._state: tuple[int, Any, Any] | None = None  # (pid, open shard, thread pool)

    @property
    def source(self) -> str:
        return "tar shard" if self.shard is not None else "files"

    def __len__(self) -> int:
        return len(self.labels)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_state": None}  # file handles and pools are made in each process

    def _process_state(self):
        if self._state is None or self._state[0] != os.getpid():
            handle = None if self.shard is None else open(self.shard, "rb", buffering=0)  # noqa: SIM115
            pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
            self._state = (os.getpid(), handle, pool)
        return self._state

    def read_bytes(self, index: int) -> bytes:
        """The JPEG bytes of image ``index`` (a whole file, or its range of the shard)."""
        _, handle, _ = self._process_state()
        if self.shard is None:
            with open(self.paths[index], "rb", buffering=0) as f:
                return f.read()
        return os.pread(handle.fileno(), int(self.sizes[index]), int(self.offsets[index]))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:

        data = torch.frombuffer(bytearray(self.read_bytes(index)), dtype=torch.uint8)
        image = decode_jpeg(data)
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        _, _, pool = self._process_state()
        if pool is None:
            return [self[i] for i in indices]
        return list(pool.map(self.__getitem__, indices))


def images_per_s(timeline: Any) -> float:
    """Images per second of a recording, worker start-up left out: every image over the time
    from the first fetch's start to the last batch in hand."""
    batches = timeline.batches
    if not batches:
        return float("nan")
    span = max(b.ready for b in batches) - min(b.fetch_start for b in batches)
    return sum(len(b.indices) for b in batches) / span if span > 0 else float("nan")


def decode_rate(timeline: Any) -> float:
    """Images per second the workers decode together while they all work: the window from the last
    worker's first fetch to the first worker's last one (the main process's fetches, with 0
    workers), every fetch counted for the share of it inside the window, over the window's length.
    Start-up, workers that came up apart and the epoch's tail, when fewer workers share the cores,
    are left out. Two workers on two free cores decode about twice what one does; a third worker on
    two cores makes every fetch take longer on the wall clock and adds nothing.

    Adding up each worker's median images ÷ fetch time would mislead: fetch times are skewed
    (a few take twice the median), so it overstated what the workers decoded together (830 images/s
    for 2 workers that decoded 560), and with 3-4 fetches per worker in a smoke run its ratios
    ranged 0.7-1.3×; this one held 1.64-1.66× (2 vs 1) and 0.79-0.82× (3 vs 2) in the same runs."""
    per_worker: dict[int, list[Any]] = {}
    for b in timeline.batches:
        if b.fetch_end > b.fetch_start:
            per_worker.setdefault(b.worker, []).append(b)
    if not per_worker:
        return float("nan")
    start = max(min(b.fetch_start for b in bs) for bs in per_worker.values())
    end = min(max(b.fetch_end for b in bs) for bs in per_worker.values())
    if end <= start:  # no moment when every worker was fetching: all of them, start to end
        start = min(b.fetch_start for bs in per_worker.values() for b in bs)
        end = max(b.fetch_end for bs in per_worker.values() for b in bs)
    decoded = sum(len(b.indices) * max(0.0, min(b.fetch_end, end) - max(b.fetch_start, start))
                  / (b.fetch_end - b.fetch_start) for bs in per_worker.values() for b in bs)
    return float(decoded / (end - start))


def cpu_per_image(timeline: Any) -> float:
    """CPU seconds the fetching processes used per image: each fetch's process CPU time
    (``fetch_cpu_s``) over its images, every fetch that has one; nan when none was measured.

    The same decoding costs the same CPU on one machine at one speed, however many workers share
    the cores. A machine whose speed changes between two runs (a virtual machine beside busy
    neighbours, a laptop changing its clock) moves this number and the run's images/s together:
    in ten sweeps of notebook 14 on a 2-core machine, 3 workers' images/s over 2 workers' read
    0.86-1.14×, and the CPU per image of the two runs moved with them: the products, 0.97-1.05×."""
    fetches = [b for b in timeline.batches if b.fetch_cpu_s is not None and b.indices]
    images = sum(len(b.indices) for b in fetches)
    return sum(b.fetch_cpu_s for b in fetches) / images if images else float("nan")


def record_best(loaders: dict[Any, Any], step: Any = None, *, rounds: int = 2,
                describe: Any = str, progress: bool = True) -> dict[Any, Any]:
    """Record every loader in ``loaders`` (a dict of ``DataLoader``s) ``rounds`` times, the rounds
    interleaved (each loader once, then each again), and keep per key the recording that decoded
    fastest (:func:`decode_rate`). Whatever else the machine does meanwhile (another program,
    the system's own work) only ever slows a run down, so the faster of two is the closer to
    what the cores can do; interleaved, one slow moment cannot hit every run of one
    loader. ``describe(key)`` names a run in the progress bar (``progress=False``: none)."""
    from ..timing.recorder import record, record_fastest

    made = dict.fromkeys(loaders, 0)

    def run(key: Any) -> Any:
        made[key] += 1
        label = describe(key) + (f" (round {made[key]} of {rounds})" if rounds > 1 else "")
        return record(loaders[key], step, progress=label if progress else False)

    return record_fastest({key: functools.partial(run, key) for key in loaders}, rounds,
                          score=lambda tl: -decode_rate(tl))


def cost_per_image(dataset: JpegDataset, count: int = 32) -> dict[str, float]:
    """Median seconds per image to read its bytes, decode them and transform, in this process
    with one torch thread (as in a worker)."""
    import time

    from ..system import torch_threads

    read, decode, transform = [], [], []
    with torch_threads(1):
        for i in range(min(count, len(dataset))):
            t0 = time.perf_counter()
            data = torch.frombuffer(bytearray(dataset.read_bytes(i)), dtype=torch.uint8)
            t1 = time.perf_counter()
            image = decode_jpeg(data)
            t2 = time.perf_counter()
            if dataset.transform is not None:
                dataset.transform(image)
            t3 = time.perf_counter()
            read.append(t1 - t0)
            decode.append(t2 - t1)
            transform.append(t3 - t2)
    return {
        "read": float(np.median(read)),
        "decode": float(np.median(decode)),
        "transform": float(np.median(transform)),
    }


def gpu_decode_rate(paths: Sequence[str | os.PathLike], crop: int, *, repeats: int = 3) -> dict[str, float]:
    """Images/s on a CUDA GPU: the batch's JPEGs decoded together with
    ``decode_jpeg(list, device="cuda")`` and the v2 transforms applied on the GPU, against
    ``decode_jpeg`` + the same transforms on one CPU thread. Needs CUDA."""
    import time

    from torchvision.io import read_file

    from ..system import torch_threads

    if not torch.cuda.is_available():
        raise RuntimeError("gpu_decode_rate needs a CUDA GPU (torch.cuda.is_available() is False)")
    data = [read_file(str(p)) for p in paths]
    transform = train_transform(crop)
    out = {}
    for _ in range(2):  # warm-up: the decoder's handles, the kernels
        [transform(image) for image in decode_jpeg(data, device="cuda")]
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        [transform(image) for image in decode_jpeg(data, device="cuda")]
    torch.cuda.synchronize()
    out["GPU decode + transforms"] = repeats * len(data) / (time.perf_counter() - start)
    with torch_threads(1):
        start = time.perf_counter()
        for _ in range(repeats):
            [transform(decode_jpeg(d)) for d in data]
        out["CPU, one thread"] = repeats * len(data) / (time.perf_counter() - start)
    return out


def deprecation_notice() -> str | None:
    """What this torchvision warns when its JPEG decoder is called (torchvision 0.29 deprecates
    its image decoding and encoding in favour of TorchCodec), or None when it warns nothing."""
    import warnings


    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decode_jpeg(encode_jpeg(torch.zeros(3, 8, 8, dtype=torch.uint8)))
    return next((str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)), None)
