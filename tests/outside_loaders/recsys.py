"""Next-item recommendation from a binary interaction log, user histories decoded in collate_fn."""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "recommender logs"
CAUSE = ("collate_events unpacks every 12-byte event of every history with struct.iter_unpack into "
         "Python tuples and builds the padded batch from nested Python lists with torch.tensor.")
CAUSE_FUNCTION = "collate_events"
CAUSE_CALL = "torch.tensor"
FIX = ("Decode each history with np.frombuffer and a structured dtype (item <i4, seconds <i4, dwell <f4) "
       "and pad the resulting tensors.")
STEP_MS = 8.0
BATCH_SIZE = 32
NUM_WORKERS = 0

NAME = "recsys"
N_USERS = 6400
N_ITEMS = 50_000
MEAN_HISTORY = 160
MAX_HISTORY = 400
RECORD = struct.Struct("<iif")
EVENT_DTYPE = np.dtype([("item", "<i4"), ("seconds", "<i4"), ("dwell", "<f4")])


def _write_log(folder: str) -> None:
    rng = np.random.default_rng(7)
    lengths = np.clip(rng.geometric(1 / MEAN_HISTORY, N_USERS), 5, MAX_HISTORY)
    total = int(lengths.sum())
    popularity = rng.zipf(1.3, total) % N_ITEMS
    events = np.empty(total, dtype=EVENT_DTYPE)
    events["item"] = popularity
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    gaps = rng.exponential(900.0, total).astype(np.int64)
    seconds = np.cumsum(gaps)
    seconds -= np.repeat(seconds[offsets[:-1]], lengths)
    events["seconds"] = seconds
    events["dwell"] = rng.lognormal(2.5, 1.0, total)
    events.tofile(os.path.join(folder, "events.bin"))
    np.save(os.path.join(folder, "user_offsets.npy"), offsets * EVENT_DTYPE.itemsize)


def log_files() -> tuple[str, str]:
    """(events.bin, user_offsets.npy), created on first use."""
    folder = _files.ensure(NAME, _write_log)
    return os.path.join(folder, "events.bin"), os.path.join(folder, "user_offsets.npy")


class UserHistoryDataset(Dataset):
    """The raw bytes of one user's event history, oldest first."""

    def __init__(self, events_path: str, offsets_path: str):
        self.events_path = events_path
        self.offsets = np.load(offsets_path)
        self._map: mmap.mmap | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_map": None}

    def __getitem__(self, idx: int) -> bytes:
        if self._map is None:
            with open(self.events_path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._map[int(self.offsets[idx]):int(self.offsets[idx + 1])]


def collate_events(batch: list[bytes]) -> dict[str, torch.Tensor]:
    """Inputs (all events but the last, padded with 0) and the next item to predict."""
    histories = [list(RECORD.iter_unpack(raw)) for raw in batch]
    longest = max(len(h) for h in histories) - 1
    items, gaps, dwell, mask, target = [], [], [], [], []
    for events in histories:
        inputs, pad = events[:-1], longest - (len(events) - 1)
        items.append([e[0] for e in inputs] + [0] * pad)
        gaps.append([events[-1][1] - e[1] for e in inputs] + [0] * pad)
        dwell.append([e[2] for e in inputs] + [0.0] * pad)
        mask.append([True] * len(inputs) + [False] * pad)
        target.append(events[-1][0])
    return {"items": torch.tensor(items), "age_s": torch.tensor(gaps),
            "dwell": torch.tensor(dwell), "mask": torch.tensor(mask),
            "target": torch.tensor(target)}


def collate_events_frombuffer(batch: list[bytes]) -> dict[str, torch.Tensor]:
    """The same batch, each history decoded with np.frombuffer."""
    histories = [np.frombuffer(raw, dtype=EVENT_DTYPE) for raw in batch]
    inputs = [h[:-1] for h in histories]
    items = pad_sequence([torch.from_numpy(h["item"].copy()) for h in inputs], batch_first=True)
    gaps = pad_sequence([torch.from_numpy(h[-1]["seconds"] - x["seconds"])
                         for h, x in zip(histories, inputs, strict=True)], batch_first=True)
    dwell = pad_sequence([torch.from_numpy(h["dwell"].copy()) for h in inputs], batch_first=True)
    lengths = torch.tensor([len(h) for h in inputs])
    mask = torch.arange(items.shape[1]) < lengths[:, None]
    target = torch.tensor([int(h[-1]["item"]) for h in histories])
    return {"items": items.long(), "age_s": gaps.long(), "dwell": dwell, "mask": mask,
            "target": target}


def make_loader() -> DataLoader:
    return DataLoader(UserHistoryDataset(*log_files()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, collate_fn=collate_events,
                      generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(UserHistoryDataset(*log_files()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, collate_fn=collate_events_frombuffer,
                      generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
