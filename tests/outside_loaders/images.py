"""Scene classification from camera JPEGs, trained on 128 x 128 thumbnails."""

from __future__ import annotations

import os

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "images"
CAUSE = ("Each 1024 x 768 JPEG is decoded at full resolution by Image.convert and then shrunk to a "
         "128 x 128 thumbnail, so almost all of the decoded pixels are thrown away.")
CAUSE_FUNCTION = "ThumbnailDataset.__getitem__"
CAUSE_CALL = "PIL.Image.Image.convert"
FIX = ("Call Image.draft('RGB', (size, size)) before converting, so libjpeg decodes at a reduced scale "
       "close to the thumbnail size.")
STEP_MS = 20.0
BATCH_SIZE = 16
NUM_WORKERS = 2

NAME = "images"
N_IMAGES = 40
N_ITEMS = 3200
WIDTH, HEIGHT = 1024, 768
SIZE = 128
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _write_photos(folder: str) -> None:
    rng = np.random.default_rng(3)
    small_h, small_w = HEIGHT // 8, WIDTH // 8
    yy, xx = np.mgrid[0:small_h, 0:small_w].astype(np.float32)
    for i in range(N_IMAGES):
        top, bottom = rng.uniform(40, 220, 3), rng.uniform(40, 220, 3)
        mix = (yy / small_h)[..., None]
        base = top * (1 - mix) + bottom * mix + 12 * np.sin(xx / rng.uniform(4, 12))[..., None]
        base += rng.normal(0, 6, base.shape)
        image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8)).resize((WIDTH, HEIGHT), Image.BICUBIC)
        draw = ImageDraw.Draw(image)
        for _ in range(12):
            x, y = rng.uniform(0, WIDTH), rng.uniform(0, HEIGHT)
            w, h = rng.uniform(60, 400, 2)
            colour = tuple(int(c) for c in rng.integers(0, 256, 3))
            (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x, y, x + w, y + h], fill=colour)
        image.save(os.path.join(folder, f"scene_{i:03d}_class{i % 6}.jpg"), quality=90)


def photo_paths() -> list[str]:
    """The JPEG files, created on first use."""
    folder = _files.ensure(NAME, _write_photos)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".jpg"))


def to_tensor(image: Image.Image) -> torch.Tensor:
    """A normalised CHW float tensor of a 128 x 128 centre crop."""
    scale = SIZE / min(image.size)
    image = image.resize((round(image.width * scale), round(image.height * scale)), Image.BILINEAR)
    left, top = (image.width - SIZE) // 2, (image.height - SIZE) // 2
    image = image.crop((left, top, left + SIZE, top + SIZE))
    array = (np.asarray(image, dtype=np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(array.transpose(2, 0, 1).copy())


class ThumbnailDataset(Dataset):
    """(thumbnail, class) for each photo, with a horizontal flip on alternate passes."""

    def __init__(self, paths: list[str], n_items: int = N_ITEMS):
        self.paths = paths
        self.n_items = n_items
        self.labels = [int(os.path.basename(p).split("class")[1].split(".")[0]) for p in paths]

    def __len__(self) -> int:
        return self.n_items

    def open(self, path: str) -> Image.Image:
        return Image.open(path)

    def __getitem__(self, idx: int):
        i = idx % len(self.paths)
        image = self.open(self.paths[i]).convert("RGB")
        x = to_tensor(image)
        if (idx // len(self.paths)) % 2:
            x = x.flip(-1)
        return x, self.labels[i]


class DraftThumbnailDataset(ThumbnailDataset):
    """The same thumbnails, with the JPEG decoded at a reduced scale."""

    def open(self, path: str) -> Image.Image:
        image = Image.open(path)
        image.draft("RGB", (SIZE, SIZE))
        return image


def make_loader() -> DataLoader:
    return DataLoader(ThumbnailDataset(photo_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(DraftThumbnailDataset(photo_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
