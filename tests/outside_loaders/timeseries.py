"""Sleep staging from an 8-channel EEG recording stored as raw little-endian float32."""

from __future__ import annotations

import os
import struct

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "time series"
CAUSE = ("Each 30 s window is read as bytes, unpacked with struct.unpack into a tuple of 30,720 Python "
         "floats and then turned into a tensor by torch.tensor, one element at a time.")
CAUSE_FUNCTION = "EEGWindowDataset.decode"
CAUSE_CALL = "torch.tensor"
FIX = "Decode the window's bytes with np.frombuffer(buf, dtype='<f4') (or torch.frombuffer) instead."
STEP_MS = 15.0
BATCH_SIZE = 16
NUM_WORKERS = 0

NAME = "timeseries"
CHANNELS = 8
RATE = 128
WINDOW = 30 * RATE
HOP = 128
N_WINDOWS = 3200
N_FRAMES = (N_WINDOWS - 1) * HOP + WINDOW
N_STAGES = 5


def _write_recording(folder: str) -> None:
    rng = np.random.default_rng(4)
    t = np.arange(N_FRAMES, dtype=np.float32) / RATE
    stage = (np.sin(2 * np.pi * t / 1800.0) * 2 + 2).round().astype(np.int64)
    freqs = np.array([2.0, 6.0, 10.0, 14.0, 22.0], dtype=np.float32)[stage]
    phase = np.cumsum(2 * np.pi * freqs / RATE)
    signal = np.stack([np.sin(phase * (1 + 0.03 * c)) * 40e-6 for c in range(CHANNELS)], axis=1)
    signal += rng.normal(0, 8e-6, signal.shape)
    signal.astype("<f4").tofile(os.path.join(folder, "night_01.f32"))
    labels = stage[np.arange(N_WINDOWS) * HOP + WINDOW // 2]
    np.save(os.path.join(folder, "night_01_stages.npy"), labels)


def recording_files() -> tuple[str, str]:
    """(raw samples, per-window stage labels), created on first use."""
    folder = _files.ensure(NAME, _write_recording)
    return os.path.join(folder, "night_01.f32"), os.path.join(folder, "night_01_stages.npy")


class EEGWindowDataset(Dataset):
    """Overlapping 30 s windows, shape (channels, samples), z-scored per channel, with a stage label."""

    def __init__(self, raw_path: str, labels_path: str):
        self.raw_path = raw_path
        self.labels = np.load(labels_path)

    def __len__(self) -> int:
        return len(self.labels)

    def read_window(self, idx: int) -> bytes:
        with open(self.raw_path, "rb") as f:
            f.seek(idx * HOP * CHANNELS * 4)
            return f.read(WINDOW * CHANNELS * 4)

    def decode(self, buf: bytes) -> torch.Tensor:
        values = struct.unpack(f"<{WINDOW * CHANNELS}f", buf)
        return torch.tensor(values, dtype=torch.float32)

    def __getitem__(self, idx: int):
        x = self.decode(self.read_window(idx)).view(WINDOW, CHANNELS).T
        x = (x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + 1e-8)
        return x, int(self.labels[idx])


class FrombufferEEGWindowDataset(EEGWindowDataset):
    """The same windows, decoded straight from the bytes."""

    def decode(self, buf: bytes) -> torch.Tensor:
        return torch.from_numpy(np.frombuffer(buf, dtype="<f4").copy())


def make_loader() -> DataLoader:
    return DataLoader(EEGWindowDataset(*recording_files()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(FrombufferEEGWindowDataset(*recording_files()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
