"""LiDAR semantic segmentation: 2,048-point tiles cut from whole-scene .npy files."""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "point clouds"
CAUSE = ("Every __getitem__ calls np.load on the whole scene file (about 16 MB, 819,200 points) to slice "
         "out one 2,048-point tile, copying the full array into memory each time.")
CAUSE_FUNCTION = "LidarTileDataset.load_scene"
CAUSE_CALL = "numpy.load"
FIX = "Open the scene with np.load(path, mmap_mode='r') so that only the tile's rows are read."
STEP_MS = 10.0
BATCH_SIZE = 16
NUM_WORKERS = 0

NAME = "pointcloud"
N_SCENES = 1
POINTS_PER_SCENE = 819_200
TILE = 2048
N_ITEMS = 3200
N_CLASSES = 6


def _write_scenes(folder: str) -> None:
    rng = np.random.default_rng(6)
    side = int(np.sqrt(POINTS_PER_SCENE // TILE))
    for s in range(N_SCENES):
        tile = np.repeat(np.arange(POINTS_PER_SCENE // TILE), TILE)
        origin = np.stack([tile % side, tile // side], axis=1) * 20.0
        xy = origin + rng.uniform(0, 20, (POINTS_PER_SCENE, 2))
        ground = 0.05 * np.sin(xy[:, 0] / 15) + 0.03 * np.cos(xy[:, 1] / 11)
        label = rng.choice(N_CLASSES, POINTS_PER_SCENE, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05])
        z = ground + label * rng.uniform(0.0, 1.5, POINTS_PER_SCENE)
        intensity = rng.beta(2, 5, POINTS_PER_SCENE) + 0.05 * label
        scene = np.column_stack([xy, z, intensity, label]).astype(np.float32)
        np.save(os.path.join(folder, f"scene_{s:02d}.npy"), scene)


def scene_paths() -> list[str]:
    """The scene files, (points, 5) float32 as x, y, z, intensity, label; created on first use."""
    folder = _files.ensure(NAME, _write_scenes)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".npy"))


def rotate_z(points: np.ndarray, angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    rotation = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    return points @ rotation.T


class LidarTileDataset(Dataset):
    """(points (2048, 4), labels (2048,)) per tile, each tile seen under several rotations."""

    def __init__(self, paths: list[str], n_items: int = N_ITEMS):
        self.paths = paths
        self.n_items = n_items
        self.tiles_per_scene = POINTS_PER_SCENE // TILE

    def __len__(self) -> int:
        return self.n_items

    def load_scene(self, path: str) -> np.ndarray:
        return np.load(path)

    def __getitem__(self, idx: int):
        n_tiles = len(self.paths) * self.tiles_per_scene
        scene, tile = divmod(idx % n_tiles, self.tiles_per_scene)
        rows = np.asarray(self.load_scene(self.paths[scene])[tile * TILE:(tile + 1) * TILE])
        xyz = rows[:, :3] - rows[:, :3].mean(axis=0)
        xyz = rotate_z(xyz, 2 * np.pi * ((idx // n_tiles) * 0.618 % 1.0))
        points = np.concatenate([xyz, rows[:, 3:4]], axis=1)
        return torch.from_numpy(points), torch.from_numpy(rows[:, 4].astype(np.int64))


class MmapLidarTileDataset(LidarTileDataset):
    """The same tiles, read through a memory map."""

    def load_scene(self, path: str) -> np.ndarray:
        return np.load(path, mmap_mode="r")


def make_loader() -> DataLoader:
    return DataLoader(LidarTileDataset(scene_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(MmapLidarTileDataset(scene_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
