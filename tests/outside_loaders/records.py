"""Review-rating prediction from daily JSON exports of product reviews."""

from __future__ import annotations

import json
import os
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "JSON records"
CAUSE = ("Every __getitem__ runs json.load on the whole day's export (400 reviews, about 300 kB) to "
         "return one review.")
CAUSE_FUNCTION = "ReviewDataset.reviews"
CAUSE_CALL = "json.load"
FIX = "Parse each day's file once per worker, lazily, and keep its list of reviews for later samples."
STEP_MS = 10.0
BATCH_SIZE = 32
NUM_WORKERS = 2

NAME = "records"
N_DAYS = 16
PER_DAY = 400
MAX_TOKENS = 96
BUCKETS = 1 << 18
WORDS = ("great terrible battery screen fast slow cheap broke love returned works perfectly quality price "
         "shipping arrived damaged excellent poor recommend never again size fits small large colour sound "
         "loud quiet comfortable heavy light sturdy flimsy instructions easy hard setup minutes").split()


def _review(rng: np.random.Generator, day: int, i: int) -> dict:
    rating = int(rng.integers(1, 6))
    words = [WORDS[j] for j in rng.integers(0, len(WORDS), int(rng.integers(20, 90)))]
    return {
        "review_id": f"R{day:02d}{i:05d}",
        "product": {"asin": f"B0{int(rng.integers(10**7, 10**8))}", "category": ["electronics", "home",
                    "toys", "garden"][i % 4], "price": round(float(rng.gamma(2.0, 20.0)), 2)},
        "reviewer": {"id": f"U{int(rng.integers(10**6))}", "verified": bool(rng.random() < 0.8),
                     "reviews_written": int(rng.poisson(6))},
        "title": " ".join(words[:5]).capitalize(),
        "text": " ".join(words),
        "helpful_votes": int(rng.poisson(2)),
        "images": [f"https://img.example.com/{day}/{i}/{k}.jpg" for k in range(int(rng.integers(0, 3)))],
        "rating": rating,
    }


def _write_exports(folder: str) -> None:
    rng = np.random.default_rng(8)
    for day in range(N_DAYS):
        reviews = [_review(rng, day, i) for i in range(PER_DAY)]
        with open(os.path.join(folder, f"reviews_2024-05-{day + 1:02d}.json"), "w") as f:
            json.dump(reviews, f, indent=1)


def export_paths() -> list[str]:
    """The daily JSON files, created on first use."""
    folder = _files.ensure(NAME, _write_exports)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".json"))


def encode(review: dict) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(hashed token ids, numeric features, rating class 0..4) for one review."""
    tokens = (review["title"] + " . " + review["text"]).lower().split()[:MAX_TOKENS]
    ids = torch.zeros(MAX_TOKENS, dtype=torch.long)
    ids[: len(tokens)] = torch.tensor([zlib.crc32(t.encode()) % (BUCKETS - 1) + 1 for t in tokens])
    numeric = torch.tensor([np.log1p(review["product"]["price"]), float(review["reviewer"]["verified"]),
                            np.log1p(review["helpful_votes"]), len(review["images"])], dtype=torch.float32)
    return ids, numeric, review["rating"] - 1


class ReviewDataset(Dataset):
    """One sample per review across the daily exports."""

    def __init__(self, paths: list[str], per_file: int = PER_DAY):
        self.paths = paths
        self.per_file = per_file

    def __len__(self) -> int:
        return len(self.paths) * self.per_file

    def reviews(self, path: str) -> list[dict]:
        with open(path) as f:
            return json.load(f)

    def __getitem__(self, idx: int):
        return encode(self.reviews(self.paths[idx // self.per_file])[idx % self.per_file])


class CachedReviewDataset(ReviewDataset):
    """The same reviews, each file parsed once per worker."""

    def __init__(self, paths: list[str], per_file: int = PER_DAY):
        super().__init__(paths, per_file)
        self._parsed: dict[str, list[dict]] = {}

    def reviews(self, path: str) -> list[dict]:
        if path not in self._parsed:
            self._parsed[path] = super().reviews(path)
        return self._parsed[path]


def make_loader() -> DataLoader:
    return DataLoader(ReviewDataset(export_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(CachedReviewDataset(export_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
