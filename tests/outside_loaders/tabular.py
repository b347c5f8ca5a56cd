"""Churn prediction from daily CSV exports, one customer row per sample."""

from __future__ import annotations

import csv
import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from outside_loaders import _files

DOMAIN = "tabular"
CAUSE = ("Every __getitem__ opens the day's CSV export and parses all of its 400 rows with csv.DictReader "
         "to return the one row it needs.")
CAUSE_FUNCTION = "DailyCsvDataset.read_rows"
CAUSE_CALL = "csv.DictReader"
FIX = "Parse each CSV file once per worker, lazily, and keep its rows for later samples."
STEP_MS = 10.0
BATCH_SIZE = 32
NUM_WORKERS = 2

NAME = "tabular"
N_FILES = 16
ROWS_PER_FILE = 400
NUMERIC = ["tenure_months", "monthly_charges", "total_charges", "sessions_30d", "minutes_30d",
           "support_tickets", "late_payments", "discount_pct", "devices", "avg_session_min",
           "days_since_login", "plan_changes", "referrals", "nps", "data_gb", "age"]
CATEGORICAL = {"plan": ["basic", "plus", "pro", "family"],
               "region": ["north", "south", "east", "west", "intl"],
               "payment": ["card", "bank", "paypal", "invoice"]}


def _write_exports(folder: str) -> None:
    rng = np.random.default_rng(2)
    header = ["customer_id", *NUMERIC, *CATEGORICAL, "churned"]
    for day in range(N_FILES):
        values = rng.gamma(2.0, 10.0, (ROWS_PER_FILE, len(NUMERIC)))
        with open(os.path.join(folder, f"customers_2024-03-{day + 1:02d}.csv"), "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            for r in range(ROWS_PER_FILE):
                cats = [options[int(rng.integers(len(options)))] for options in CATEGORICAL.values()]
                churned = int(values[r, 6] > 25 or values[r, 10] > 40)
                writer.writerow([f"C{day:02d}{r:05d}", *(f"{v:.3f}" for v in values[r]), *cats, churned])


def export_paths() -> list[str]:
    """The daily CSV files, created on first use."""
    folder = _files.ensure(NAME, _write_exports)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".csv"))


def encode_row(row: dict[str, str]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(numeric features, categorical codes, label) for one parsed row."""
    numeric = torch.tensor([float(row[name]) for name in NUMERIC], dtype=torch.float32)
    codes = torch.tensor([options.index(row[name]) for name, options in CATEGORICAL.items()])
    return torch.log1p(numeric), codes, int(row["churned"])


class DailyCsvDataset(Dataset):
    """One sample per customer row across the daily exports."""

    def __init__(self, paths: list[str], rows_per_file: int = ROWS_PER_FILE):
        self.paths = paths
        self.rows_per_file = rows_per_file

    def __len__(self) -> int:
        return len(self.paths) * self.rows_per_file

    def read_rows(self, path: str) -> list[dict[str, str]]:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))

    def __getitem__(self, idx: int):
        rows = self.read_rows(self.paths[idx // self.rows_per_file])
        return encode_row(rows[idx % self.rows_per_file])


class CachedDailyCsvDataset(DailyCsvDataset):
    """The same rows, each file parsed once per worker."""

    def __init__(self, paths: list[str], rows_per_file: int = ROWS_PER_FILE):
        super().__init__(paths, rows_per_file)
        self._parsed: dict[str, list[dict[str, str]]] = {}

    def read_rows(self, path: str) -> list[dict[str, str]]:
        if path not in self._parsed:
            self._parsed[path] = super().read_rows(path)
        return self._parsed[path]


def make_loader() -> DataLoader:
    return DataLoader(DailyCsvDataset(export_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def make_fixed_loader() -> DataLoader:
    return DataLoader(CachedDailyCsvDataset(export_paths()), batch_size=BATCH_SIZE, shuffle=True,
                      num_workers=NUM_WORKERS, generator=torch.Generator().manual_seed(0))


def cleanup() -> None:
    _files.remove(NAME)
