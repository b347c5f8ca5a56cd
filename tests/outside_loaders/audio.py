"""Keyword-spotting clips: 16 kHz WAV files turned into log-mel spectrograms."""

from __future__ import annotations

import math
import os
import wave

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "audio"
CAUSE = ("The mel filterbank, the same 80 x 257 matrix for every clip, is rebuilt in a nested Python "
         "loop inside every __getitem__.")
CAUSE_FUNCTION = "mel_filterbank"
CAUSE_CALL = "a Python loop"
FIX = "Build the filterbank once in the Dataset's __init__ and reuse it for every clip."
STEP_MS = 15.0
BATCH_SIZE = 16
NUM_WORKERS = 2

NAME = "audio"
SAMPLE_RATE = 16_000
CLIP_SECONDS = 3
N_CLIPS = 48
N_ITEMS = 3200
N_FFT = 512
HOP = 160
N_MELS = 80
WINDOW = SAMPLE_RATE


def _write_clips(folder: str) -> None:
    rng = np.random.default_rng(0)
    t = np.arange(SAMPLE_RATE * CLIP_SECONDS) / SAMPLE_RATE
    for i in range(N_CLIPS):
        f0 = 120.0 + 40.0 * (i % 10)
        voice = sum(np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 6))
        envelope = 0.5 * (1 + np.sin(2 * np.pi * rng.uniform(1.0, 3.0) * t))
        signal = 0.3 * voice * envelope + 0.02 * rng.standard_normal(t.size)
        pcm = np.clip(signal * 32767 / max(1.0, np.abs(signal).max()), -32768, 32767).astype("<i2")
        with wave.open(os.path.join(folder, f"clip_{i:03d}_label{i % 10}.wav"), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SAMPLE_RATE)
            out.writeframes(pcm.tobytes())


def clip_paths() -> list[str]:
    """The WAV files, created on first use."""
    folder = _files.ensure(NAME, _write_clips)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".wav"))


def hz_to_mel(hz: float) -> float:
    return 2595.0 * math.log10(1.0 + hz / 700.0)


def mel_to_hz(mel: float) -> float:
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int) -> torch.Tensor:
    """Triangular mel filters, shape (n_mels, n_fft // 2 + 1)."""
    n_freqs = n_fft // 2 + 1
    low, high = hz_to_mel(0.0), hz_to_mel(sample_rate / 2)
    edges = [mel_to_hz(low + (high - low) * i / (n_mels + 1)) for i in range(n_mels + 2)]
    bank = []
    for m in range(1, n_mels + 1):
        left, centre, right = edges[m - 1], edges[m], edges[m + 1]
        row = []
        for k in range(n_freqs):
            freq = k * sample_rate / n_fft
            if left <= freq <= centre:
                weight = (freq - left) / (centre - left)
            elif centre < freq <= right:
                weight = (right - freq) / (right - centre)
            else:
                weight = 0.0
            row.append(weight * 2.0 / (right - left))
        bank.append(row)
    return torch.tensor(bank, dtype=torch.float32)


def read_wav(path: str, start: int, length: int) -> torch.Tensor:
    """``length`` samples from ``start`` as floats in [-1, 1]."""
    with wave.open(path, "rb") as f:
        f.setpos(start)
        frames = f.readframes(length)
    return torch.from_numpy(np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0)


class MelDataset(Dataset):
    """One-second windows of labelled clips as (log-mel, label)."""

    def __init__(self, paths: list[str], n_items: int = N_ITEMS):
        self.paths = paths
        self.n_items = n_items
        self.labels = [int(os.path.basename(p).split("label")[1].split(".")[0]) for p in paths]
        self.window = torch.hann_window(N_FFT)

    def __len__(self) -> int:
        return self.n_items

    def filterbank(self) -> torch.Tensor:
        return mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS)

    def __getitem__(self, idx: int):
        clip = idx % len(self.paths)
        start = (idx // len(self.paths)) * 2311 % (SAMPLE_RATE * (CLIP_SECONDS - 1))
        audio = read_wav(self.paths[clip], start, WINDOW)
        spec = torch.stft(audio, N_FFT, HOP, window=self.window, return_complex=True).abs() ** 2
        mel = self.filterbank() @ spec
        return torch.log(mel + 1e-6), self.labels[clip]


class CachedFilterbankMelDataset(MelDataset):
    """The same windows, with the filterbank built once."""

    def __init__(self, paths: list[str], n_items: int = N_ITEMS):
        super().__init__(paths, n_items)
        self.bank = mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS)

    def filterbank(self) -> torch.Tensor:
        return self.bank


def make_loader() -> DataLoader:
    return DataLoader(MelDataset(clip_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(CachedFilterbankMelDataset(clip_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
