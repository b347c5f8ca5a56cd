"""One object at a time: :func:`time_objects`, :func:`time_endpoints`, :func:`time_files`,
:func:`download` and their table (:class:`ObjectTiming`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter as clock

import numpy as np

from .endpoint import Endpoint, MiB, explain


# -- first byte vs throughput ---------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectTiming:
    source: str  #: "local file", "server" or "remote"
    size: int
    first_byte_s: float
    total_s: float

    @property
    def throughput(self) -> float:
        """Bytes per second for the whole read, first byte included."""
        return self.size / self.total_s


def time_objects(endpoint: Endpoint, bucket: str, keys: Sequence[str], *, source: str) -> list[ObjectTiming]:
    """GET each key once, one after another, on one client (after one warm-up GET of the
    first key, which loads what the client loads on first use): time to the response's
    headers and to the last byte. (The lab's server opens a new connection per request.)"""
    client = endpoint.client()
    out = []
    try:
        client.get_object(Bucket=bucket, Key=keys[0])["Body"].read()
        for key in keys:
            start = clock()
            response = client.get_object(Bucket=bucket, Key=key)
            first = clock()
            body = response["Body"].read()
            out.append(ObjectTiming(source, len(body), first - start, clock() - start))
    except Exception as error:  # noqa: BLE001
        raise explain(error, endpoint, bucket) from None
    return out


def time_endpoints(
    endpoints: dict[str, Endpoint], bucket: str, keys: Sequence[str]
) -> list[ObjectTiming]:
    """:func:`time_objects` for several endpoints side by side: each key is read from every
    endpoint in turn (one client each, warmed up once), so that a moment when the machine is
    busy touches every source alike. ``endpoints``: source name → endpoint."""
    clients = {source: endpoint.client() for source, endpoint in endpoints.items()}
    out = []
    try:
        for client in clients.values():
            client.get_object(Bucket=bucket, Key=keys[0])["Body"].read()
        for key in keys:
            for source, client in clients.items():
                start = clock()
                response = client.get_object(Bucket=bucket, Key=key)
                first = clock()
                body = response["Body"].read()
                out.append(ObjectTiming(source, len(body), first - start, clock() - start))
    except Exception as error:  # noqa: BLE001
        raise explain(error, endpoints[source], bucket) from None
    return out


def time_files(paths: Sequence[str | os.PathLike]) -> list[ObjectTiming]:
    """Open and read each local file: time to its first byte and to its last (the files were
    just written, so they come from the page cache, as a hot local dataset does)."""
    out = []
    for path in paths:
        start = clock()
        with open(path, "rb", buffering=0) as f:
            head = f.read(1)
            first = clock()
            rest = f.read()
        out.append(ObjectTiming("local file", len(head) + len(rest), first - start, clock() - start))
    return out


def download(endpoint: Endpoint, bucket: str, keys: Sequence[str], folder: str | os.PathLike) -> list[Path]:
    """Copy objects into local files (to compare the same bytes read locally)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    client = endpoint.client()
    paths = []
    for key in keys:
        path = folder / key.replace("/", "_")
        path.write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        paths.append(path)
    return paths


def timing_table(timings: Sequence[ObjectTiming]):
    """Median first byte, whole read and throughput per source and object size."""
    from ...timing.report import table

    groups: dict[tuple[str, int], list[ObjectTiming]] = {}
    for t in timings:
        groups.setdefault((t.source, t.size), []).append(t)
    rows = []
    for (source, size), ts in groups.items():
        first = float(np.median([t.first_byte_s for t in ts]))
        total = float(np.median([t.total_s for t in ts]))
        rows.append(
            [source, _size(size), f"{first * 1e3:.2f}", f"{total * 1e3:.2f}", f"{size / total / 1e6:.1f}"]
        )
    return table(["read from", "object", "first byte (ms)", "whole object (ms)", "MB/s"], rows)


def median_timing(
    timings: Sequence[ObjectTiming], source: str, size: int | None = None, what: str = "first_byte_s"
) -> float:
    values = [getattr(t, what) for t in timings if t.source == source and (size is None or t.size == size)]
    return float(np.median(values)) if values else float("nan")


def _size(size: int) -> str:
    return f"{size / MiB:.0f} MiB" if size >= MiB else f"{size / 1024:.0f} KiB"
