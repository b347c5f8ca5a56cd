"""A real per-request cost: samples in an SQLite database (sqlite3 ships with Python).

:class:`SqliteDataset` runs one ``SELECT`` per sample in ``__getitem__``;
:class:`BatchedSqliteDataset` adds ``__getitems__``, one ``SELECT … WHERE id IN (…)``
per batch. The query is real work (parse, plan, page reads, Python objects per
row). ``request_wait_s`` adds a modelled network round trip per query, as a
database server or object store would (time to first byte on remote
storage), and ``item_cpu_s`` the per-sample CPU work (decoding,
augmenting) that batching cannot remove. Both are stated, never hidden.

Each process opens its own connection on first use (a connection cannot be
pickled to a worker), and counts its queries in :attr:`SqliteDataset.queries`.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import torch
from torch.utils.data import Dataset

from .datasets import burn_cpu, pay


def make_sqlite_db(path: str | os.PathLike, num_rows: int, *, features: int = 64,
                   seed: int = 0) -> Path:
    """Write ``num_rows`` samples (``features`` float32 values as a BLOB, a label) to a new
    SQLite file at ``path`` (replaced if it exists). Row ``id`` runs from 0."""
    path = Path(path)
    if num_rows < 1 or features < 1:
        raise ValueError(f"num_rows and features must be >= 1, got {num_rows} and {features}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn((num_rows, features), generator=generator)
    labels = torch.randint(0, 10, (num_rows,), generator=generator)
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, features BLOB, label INTEGER)")
        connection.executemany(
            "INSERT INTO samples VALUES (?, ?, ?)",
            ((i, values[i].numpy().tobytes(), int(labels[i])) for i in range(num_rows)))
    connection.close()
    return path


class SqliteDataset(Dataset):
    """Sample ``i`` is row ``id = i``: ``(features float32 tensor, label)``, fetched with one
    query per sample (plus ``request_wait_s`` of modelled round trip and
    ``item_cpu_s`` of CPU work per sample)."""

    def __init__(self, path: str | os.PathLike, *, request_wait_s: float = 0.0,
                 item_cpu_s: float = 0.0):
        if request_wait_s < 0 or item_cpu_s < 0:
            raise ValueError("request_wait_s and item_cpu_s must be >= 0 seconds, got "
                             f"{request_wait_s} and {item_cpu_s}")
        self.path = str(path)
        if not Path(self.path).exists():
            raise FileNotFoundError(f"no database at {self.path}: create it with helpers.make_sqlite_db()")
        self.request_wait_s = request_wait_s
        self.item_cpu_s = item_cpu_s
        with sqlite3.connect(self.path) as connection:
            self.length = connection.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        connection.close()
        self.queries = 0
        self._connection: sqlite3.Connection | None = None
        self._pid: int | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_connection"], state["_pid"], state["queries"] = None, None, 0
        return state

    def _db(self) -> sqlite3.Connection:
        if self._connection is None or self._pid != os.getpid():
            self._connection = sqlite3.connect(self.path, check_same_thread=False)
            self._pid = os.getpid()
        return self._connection

    def __len__(self) -> int:
        return self.length

    @staticmethod
    def _sample(blob: bytes, label: int) -> tuple[torch.Tensor, int]:
        return torch.frombuffer(bytearray(blob), dtype=torch.float32), int(label)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        pay(self.request_wait_s)
        row = self._db().execute("SELECT features, label FROM samples WHERE id = ?",
                                 (int(index),)).fetchone()
        self.queries += 1
        if row is None:
            raise IndexError(f"no sample {index} (the database has {self.length})")
        burn_cpu(self.item_cpu_s)
        return self._sample(*row)


class BatchedSqliteDataset(SqliteDataset):
    """:class:`SqliteDataset` plus ``__getitems__``: one query (and one round trip) per batch;
    the per-sample CPU work is still paid for every sample."""

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        pay(self.request_wait_s)
        ids = [int(i) for i in indices]
        marks = ",".join("?" * len(ids))
        rows = self._db().execute(f"SELECT id, features, label FROM samples WHERE id IN ({marks})",
                                  ids).fetchall()
        self.queries += 1
        by_id = {row[0]: row[1:] for row in rows}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise IndexError(f"no samples {missing[:5]} (the database has {self.length})")
        out = []
        for i in ids:  # the sampler's order, whatever order SQLite returned
            burn_cpu(self.item_cpu_s)
            out.append(self._sample(*by_id[i]))
        return out
