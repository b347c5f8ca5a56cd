"""Lesion detection on 2.5D CT slabs read from a network share of whole volumes."""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "medical volumes"
CAUSE = ("Every __getitem__ holds a multiprocessing.Lock, created once in __init__ and shared by all four "
         "workers, for the whole read from the network share, so the workers wait for each other and "
         "read one slab at a time.")
CAUSE_FUNCTION = "CTSlabDataset.__getitem__"
CAUSE_CALL = "multiprocessing.Lock"
FIX = "Drop the shared lock and let each worker read from the share on its own."
STEP_MS = 25.0
BATCH_SIZE = 16
NUM_WORKERS = 4

NAME = "medical"
N_VOLUMES = 6
DEPTH, SIDE = 64, 128
SLAB = 3
N_ITEMS = 3200
LATENCY_S = 0.006
WINDOW_HU = (-160.0, 240.0)


def _write_volumes(folder: str) -> None:
    rng = np.random.default_rng(9)
    zz, yy, xx = np.mgrid[0:DEPTH, 0:SIDE, 0:SIDE].astype(np.float32)
    body = ((yy - SIDE / 2) / 52) ** 2 + ((xx - SIDE / 2) / 60) ** 2 < 1
    for v in range(N_VOLUMES):
        ct = np.where(body, 40.0, -1000.0) + rng.normal(0, 20, body.shape)
        centre = rng.uniform([10, 40, 40], [DEPTH - 10, SIDE - 40, SIDE - 40])
        radius = rng.uniform(4, 9)
        lesion = (zz - centre[0]) ** 2 + (yy - centre[1]) ** 2 + (xx - centre[2]) ** 2 < radius**2
        ct[lesion] += 60.0
        np.save(os.path.join(folder, f"case_{v:03d}_ct.npy"), ct.astype(np.int16))
        np.save(os.path.join(folder, f"case_{v:03d}_lesion.npy"), lesion.any(axis=(1, 2)))


def volume_paths() -> list[tuple[str, str]]:
    """(CT volume, per-slice lesion flags) for each case, created on first use."""
    folder = _files.ensure(NAME, _write_volumes)
    names = sorted(n for n in os.listdir(folder) if n.endswith("_ct.npy"))
    return [(os.path.join(folder, n), os.path.join(folder, n.replace("_ct", "_lesion"))) for n in names]


class NetworkShare:
    """Slab reads from volumes on a network share, each read paying one round trip."""

    def __init__(self, latency_s: float = LATENCY_S):
        self.latency_s = latency_s

    def read_slab(self, path: str, z: int, depth: int) -> np.ndarray:
        time.sleep(self.latency_s)
        return np.array(np.load(path, mmap_mode="r")[z:z + depth])


class CTSlabDataset(Dataset):
    """(3 adjacent slices windowed to [0, 1], lesion flag of the middle slice); reads take a shared lock."""

    def __init__(self, cases: list[tuple[str, str]], n_items: int = N_ITEMS):
        self.cases = cases
        self.n_items = n_items
        self.share = NetworkShare()
        self.flags = [np.load(flags) for _, flags in cases]
        self.lock = multiprocessing.Lock()

    def __len__(self) -> int:
        return self.n_items

    def locate(self, idx: int) -> tuple[int, int]:
        case = idx % len(self.cases)
        return case, (idx // len(self.cases)) * 5 % (DEPTH - SLAB + 1)

    def window(self, slab: np.ndarray) -> torch.Tensor:
        low, high = WINDOW_HU
        return torch.from_numpy((np.clip(slab, low, high).astype(np.float32) - low) / (high - low))

    def __getitem__(self, idx: int):
        case, z = self.locate(idx)
        with self.lock:
            slab = self.share.read_slab(self.cases[case][0], z, SLAB)
        return self.window(slab), int(self.flags[case][z + SLAB // 2])


class UnlockedCTSlabDataset(CTSlabDataset):
    """The same slabs, each worker reading on its own."""

    def __getitem__(self, idx: int):
        case, z = self.locate(idx)
        slab = self.share.read_slab(self.cases[case][0], z, SLAB)
        return self.window(slab), int(self.flags[case][z + SLAB // 2])


def make_loader() -> DataLoader:
    return DataLoader(CTSlabDataset(volume_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(UnlockedCTSlabDataset(volume_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
