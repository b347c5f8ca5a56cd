"""Action recognition from short clips stored as packed JPEG frames, four frames sampled per clip."""

from __future__ import annotations

import io
import os
import struct

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "video"
CAUSE = ("decode_clip decodes all 64 JPEG frames of a clip with PIL, and __getitem__ then keeps only the "
         "4 frames it samples, so 60 of every 64 decodes are thrown away.")
CAUSE_FUNCTION = "decode_clip"
CAUSE_CALL = "PIL.Image.Image.convert"
FIX = "Read the clip's frame index and decode only the 4 sampled frames."
STEP_MS = 15.0
BATCH_SIZE = 8
NUM_WORKERS = 2

NAME = "video"
N_CLIPS = 32
N_ITEMS = 1600
FRAMES = 64
SEGMENTS = 4
WIDTH, HEIGHT = 192, 144
MAGIC = b"CLIP"


def _render_clip(rng: np.random.Generator, label: int) -> list[bytes]:
    background = rng.integers(30, 200, 3)
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = (background + 0.2 * xx[..., None] + rng.normal(0, 4, (HEIGHT, WIDTH, 3))).clip(0, 255)
    x, y = rng.uniform(20, WIDTH - 60), rng.uniform(20, HEIGHT - 60)
    vx, vy = np.cos(label) * 2.5, np.sin(label) * 2.5
    frames = []
    for f in range(FRAMES):
        image = Image.fromarray(base.astype(np.uint8))
        px, py = (x + vx * f) % (WIDTH - 40), (y + vy * f) % (HEIGHT - 40)
        ImageDraw.Draw(image).ellipse([px, py, px + 40, py + 40], fill=(230, 80 + 20 * label, 40))
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=85)
        frames.append(out.getvalue())
    return frames


def _write_clips(folder: str) -> None:
    rng = np.random.default_rng(5)
    for i in range(N_CLIPS):
        label = i % 8
        frames = _render_clip(rng, label)
        offsets = np.cumsum([0] + [len(b) for b in frames]).astype("<u4")
        with open(os.path.join(folder, f"clip_{i:03d}_action{label}.clip"), "wb") as f:
            f.write(MAGIC + struct.pack("<I", len(frames)) + offsets.tobytes() + b"".join(frames))


def clip_paths() -> list[str]:
    """The packed clip files, created on first use."""
    folder = _files.ensure(NAME, _write_clips)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".clip"))


def read_frame_bytes(path: str) -> list[bytes]:
    """The JPEG bytes of every frame of a packed clip."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != MAGIC:
        raise ValueError(f"{path} is not a packed clip")
    (count,) = struct.unpack_from("<I", data, 4)
    offsets = np.frombuffer(data, dtype="<u4", count=count + 1, offset=8)
    start = 8 + 4 * (count + 1)
    bounds = zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    return [data[start + a:start + b] for a, b in bounds]


def decode_frame(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))


def decode_clip(path: str) -> np.ndarray:
    """Every frame of a clip, shape (frames, height, width, 3)."""
    return np.stack([decode_frame(jpeg) for jpeg in read_frame_bytes(path)])


def sampled_indices(idx: int, n_frames: int) -> list[int]:
    """One frame from each of SEGMENTS equal segments, offset by the sample index."""
    length = n_frames // SEGMENTS
    return [s * length + (idx * 7 + s * 3) % length for s in range(SEGMENTS)]


def to_tensor(frames: np.ndarray) -> torch.Tensor:
    """(frames, 3, H, W) uint8, normalised later on the accelerator."""
    return torch.from_numpy(np.ascontiguousarray(frames.transpose(0, 3, 1, 2)))


class ClipDataset(Dataset):
    """(4 sampled frames, action label) per clip, several samplings per clip."""

    def __init__(self, paths: list[str], n_items: int = N_ITEMS):
        self.paths = paths
        self.n_items = n_items
        self.labels = [int(os.path.basename(p).split("action")[1].split(".")[0]) for p in paths]

    def __len__(self) -> int:
        return self.n_items

    def __getitem__(self, idx: int):
        i = idx % len(self.paths)
        frames = decode_clip(self.paths[i])
        keep = sampled_indices(idx, len(frames))
        return to_tensor(frames[keep]), self.labels[i]


class SampledFramesClipDataset(ClipDataset):
    """The same samples, decoding only the frames that are kept."""

    def __getitem__(self, idx: int):
        i = idx % len(self.paths)
        jpegs = read_frame_bytes(self.paths[i])
        keep = sampled_indices(idx, len(jpegs))
        return to_tensor(np.stack([decode_frame(jpegs[k]) for k in keep])), self.labels[i]


def make_loader() -> DataLoader:
    return DataLoader(ClipDataset(clip_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(SampledFramesClipDataset(clip_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
