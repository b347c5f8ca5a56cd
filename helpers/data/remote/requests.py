"""What was in flight, when: :class:`Requests` from :func:`measure_requests`, each request split into
the client's, the sending's, the proxy's, the round trip's, the server's and the body's time
(:data:`PART_FIELDS`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter as clock
from typing import Any

import numpy as np

from .dataset import REQUEST_FIELDS, S3Dataset
from .endpoint import Endpoint
from .store import ObjectStore


# -- what was in flight ------------------------------------------------------------------------
@dataclass
class Requests:
    """Every request of a recording: one row per sample (:data:`REQUEST_FIELDS`), times in
    seconds on the recording's clock."""

    rows: np.ndarray  #: shape (n, len(REQUEST_FIELDS))
    #: bytes the endpoint's proxy carried during each epoch (when measured with ``store=``)
    carried: list[int] | None = None
    #: per request that reached the store, in the order of :attr:`remote`, where its time went
    #: (:data:`PART_FIELDS`, seconds; from the proxy's log, when measured with ``store=``)
    parts: np.ndarray | None = None
    #: CPU seconds used during the recording by the loader (main process and workers:
    #: "loader_s"), the store's server ("server_s") and its proxy ("proxy_s"), and the
    #: recording's wall time ("wall_s"); when measured with ``store=``
    cpu: dict[str, float] | None = None

    def mean_parts(self) -> dict[str, float]:
        """Where a request's time went, on average (seconds per part of :data:`PART_FIELDS`;
        means, so that the parts add up to the mean request). Empty without ``parts``."""
        if self.parts is None or not len(self.parts):
            return {}
        return {name: float(self.parts[:, i].mean()) for i, name in enumerate(PART_FIELDS)}

    def cpu_per_request(self) -> dict[str, float]:
        """CPU seconds per request that reached the store: the loader's, the server's, the
        proxy's. Empty without ``cpu``."""
        count = len(self.remote)
        if not self.cpu or not count:
            return {}
        return {name: self.cpu[f"{name}_s"] / count for name in ("loader", "server", "proxy")}

    def cpus_used(self) -> float:
        """CPUs the loader and the store used together during the recording, on average
        (CPU seconds ÷ wall seconds); nan without ``cpu``."""
        if not self.cpu or self.cpu["wall_s"] <= 0:
            return float("nan")
        return (self.cpu["loader_s"] + self.cpu["server_s"] + self.cpu["proxy_s"]) / self.cpu["wall_s"]

    def column(self, name: str) -> np.ndarray:
        return self.rows[:, REQUEST_FIELDS.index(name)] if len(self.rows) else np.zeros(0)

    @property
    def remote(self) -> np.ndarray:
        """The rows that went to the store (not read from the cache)."""
        return self.rows[self.column("cached") == 0] if len(self.rows) else self.rows

    def median_s(self, what: str = "total", cached: bool = False) -> float:
        rows = self.rows[self.column("cached") == float(cached)] if len(self.rows) else self.rows
        if not len(rows):
            return float("nan")
        start, first, end = (rows[:, REQUEST_FIELDS.index(f)] for f in ("start", "first_byte", "end"))
        return float(np.median((first if what == "first_byte" else end) - start))

    def in_flight(self) -> tuple[np.ndarray, np.ndarray]:
        """A step curve: times and how many requests were open just after each."""
        rows = self.remote
        if not len(rows):
            return np.zeros(1), np.zeros(1)
        events = np.concatenate(
            [np.stack([rows[:, 2], np.ones(len(rows))], 1), np.stack([rows[:, 4], -np.ones(len(rows))], 1)]
        )
        events = events[np.lexsort((events[:, 1], events[:, 0]))]  # an end before a start at the same time
        return events[:, 0], np.cumsum(events[:, 1])

    def _rows(self, cached: bool | None) -> np.ndarray:
        rows = self.rows
        if cached is not None and len(rows):
            rows = rows[rows[:, REQUEST_FIELDS.index("cached")] == float(cached)]
        return rows

    def window(self, cached: bool | None = False) -> tuple[float, float] | None:
        """The span :meth:`samples_per_s` measures over: from the moment the last worker started
        its first request to the moment the first worker ended its last; the whole span when the
        workers overlapped for under a quarter of it. None with fewer than 2 requests."""
        rows = self._rows(cached)
        if len(rows) < 2:
            return None
        start, end = rows[:, 2], rows[:, 4]
        workers = np.unique(rows[:, 0])
        firsts = [start[rows[:, 0] == w].min() for w in workers]
        lasts = [end[rows[:, 0] == w].max() for w in workers]
        lo, hi = max(firsts), min(lasts)
        if hi - lo < 0.25 * (max(lasts) - min(firsts)):
            lo, hi = min(firsts), max(lasts)
        return (float(lo), float(hi)) if hi > lo else None

    def mean_s(self, cached: bool = False) -> float:
        """The mean time of a request that started inside :meth:`window` — Little's W for the rate
        :meth:`samples_per_s` measures (a median misses the slow tail, and requests outside the
        window ran with fewer workers beside them: faster)."""
        span = self.window(cached)
        rows = self._rows(cached)
        if span is None:
            return float("nan")
        start, end = rows[:, 2], rows[:, 4]
        inside = (start >= span[0]) & (start <= span[1])
        return float(np.mean((end - start)[inside])) if inside.any() else float("nan")

    def mean_in_flight(self) -> float:
        """Requests open on average (time-weighted) over :meth:`window`: Little's L."""
        span = self.window()
        if span is None:
            return float("nan")
        t, n = self.in_flight()
        clipped = np.clip(t, *span)
        return float(np.sum(np.diff(clipped) * n[:-1]) / (span[1] - span[0]))

    def samples_per_s(self, cached: bool | None = False) -> float:
        """Samples per second while every worker was making requests (:meth:`window`), each
        request counted by the share of it inside that window (so the workers' staggered
        start-up does not count). ``cached=None``: every sample, cached or not."""
        rows = self._rows(cached)
        span = self.window(cached)
        if span is None:
            return float("nan")
        lo, hi = span
        start, end = rows[:, 2], rows[:, 4]
        duration = end - start
        inside = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0, None)
        safe = np.where(duration > 0, duration, 1.0)
        share = np.where(duration > 0, inside / safe, ((start >= lo) & (start <= hi)).astype(float))
        return float(share.sum() / (hi - lo))

    def peak_in_flight(self) -> int:
        return int(self.in_flight()[1].max()) if len(self.rows) else 0

    def median_in_flight(self) -> float:
        """The time-weighted median of requests open, while any request was open."""
        t, n = self.in_flight()
        if len(t) < 2:
            return 0.0
        durations, counts = np.diff(t), n[:-1]
        keep = counts > 0
        durations, counts = durations[keep], counts[keep]
        if durations.sum() <= 0:
            return 0.0
        order = np.argsort(counts)
        cumulative = np.cumsum(durations[order])
        return float(counts[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


#: Where a request's time went (seconds), from the client's times and the proxy's log:
#: ``client``: in the worker, before its bytes left (boto3 signs the request) and after the
#: response's first byte was passed on to it (boto3 reads and parses the headers) — including
#: any wait for that process's GIL or a core; ``send``: from boto3's ``before-send`` to the
#: request's first byte reaching the proxy — urllib3 opening a connection and writing the
#: request in the worker (Python, under its GIL) and the proxy accepting it (these stamps cannot
#: tell the two apart, so it counts as neither the client's nor the store's); ``proxy``: the
#: proxy holding the bytes *beyond* the round trip it adds; ``round_trip``: the round trip it
#: adds (the setting); ``server``: from the request reaching the server to its first byte
#: back; ``body``: the rest of the object after the first byte.
PART_FIELDS = ("client", "send", "proxy", "round_trip", "server", "body")
_TIME_COLUMNS = [REQUEST_FIELDS.index(f) for f in ("start", "first_byte", "end", "sent")]


def client_setup_s(timeline: Any, requests: Requests) -> dict[int, float]:
    """Per worker, seconds from the start of its first fetch to the start of its first request:
    what the worker did before it could send anything (making its boto3 client; under spawn and
    forkserver that includes loading S3's service description, which a forked worker inherits from
    the parent's default boto3 session)."""
    out = {}
    workers, starts = requests.column("worker"), requests.column("start")
    for worker in sorted({int(w) for w in workers}):
        fetches = [b.fetch_start for b in timeline.batches if b.worker == worker]
        if fetches:
            out[worker] = float(starts[workers == worker].min() - min(fetches))
    return out


def request_slowdown(alone: Requests, loaded: Requests) -> dict[str, float]:
    """Where a request's extra time under load went: the mean of each part of
    :data:`PART_FIELDS` in ``loaded`` minus in ``alone`` (seconds), with "total" (their
    sum: the mean request's extra time) and "store" (the server's and the proxy's parts).
    Empty when either has no proxy log."""
    before, after = alone.mean_parts(), loaded.mean_parts()
    if not before or not after:
        return {}
    out = {name: after[name] - before[name] for name in PART_FIELDS}
    out["store"] = out["server"] + out["proxy"]
    out["total"] = sum(out[name] for name in PART_FIELDS)
    return out


def slowdown_text(extra: dict[str, float]) -> str:
    """:func:`request_slowdown`'s parts as text (ms), the store's first; the round trip is the
    proxy's setting and adds nothing."""
    names = ("server", "proxy") + tuple(n for n in PART_FIELDS if n not in ("server", "proxy", "round_trip"))
    return ", ".join(f"{name} {extra[name] * 1e3:+.1f} ms" for name in names)


class _Collect:
    def __init__(self, step: Any, t0: float):
        self.step, self.t0, self.rows = step, t0, []
        self.cpu: dict[int, list[float]] = {}  #: worker id -> its process CPU at each of its samples

    def __call__(self, batch: Any) -> Any:
        rows = batch["request"].numpy().copy()
        rows[:, _TIME_COLUMNS] -= self.t0
        self.rows.append(rows)
        if "cpu" in batch:
            for worker, cpu in zip(rows[:, 0].tolist(), batch["cpu"].tolist(), strict=True):
                self.cpu.setdefault(int(worker), []).append(cpu)
        return None if self.step is None else self.step(batch)

    def workers_cpu_s(self) -> float:
        """The DataLoader workers' CPU seconds for their requests: per worker, its process CPU from
        its first sample to its last, scaled by n ÷ (n − 1) to count the first sample's share too;
        its start-up (imports, under spawn) and shut-down are left out. Samples fetched in the main
        process (``num_workers=0``) are in its own CPU time instead."""
        total = 0.0
        for worker, stamps in self.cpu.items():
            if worker >= 0 and len(stamps) >= 2:
                total += (max(stamps) - min(stamps)) * len(stamps) / (len(stamps) - 1)
        return total


def _key_of(line: str, bucket: str) -> str | None:
    """The object key in a request line ``GET /bucket/key HTTP/1.1`` (path-style), or None."""
    from urllib.parse import unquote

    parts = line.split(" ")
    prefix = f"/{bucket}/"
    if len(parts) < 2 or parts[0] != "GET" or not parts[1].startswith(prefix):
        return None
    return unquote(parts[1][len(prefix) :].split("?", 1)[0])


def request_parts(
    rows: np.ndarray, log: list[dict], keys: Sequence[str], bucket: str, latency_s: float, t0: float
) -> np.ndarray | None:
    """Match each request that reached the store (``rows``, uncached, on the recording's clock
    that starts at ``t0``) with the proxy's log of it (by its key, in order) and split its time
    into :data:`PART_FIELDS`. None if some request has no complete log entry."""
    by_key: dict[str, list[dict]] = {}
    for entry in sorted(log, key=lambda e: e.get("request_in", float("inf"))):
        key = _key_of(entry.get("line", ""), bucket)
        if key is not None and all(
            m in entry for m in ("request_in", "request_out", "response_in", "response_out")
        ):
            by_key.setdefault(key, []).append(entry)
    col = {f: REQUEST_FIELDS.index(f) for f in REQUEST_FIELDS}
    out = []
    for row in rows[np.argsort(rows[:, col["start"]], kind="stable")] if len(rows) else rows:
        entries = by_key.get(keys[int(row[col["index"]])])
        if not entries:
            return None
        e = {k: v - t0 for k, v in entries.pop(0).items() if k != "line"}
        start, sent, first, end = (row[col[f]] for f in ("start", "sent", "first_byte", "end"))
        held = (e["request_out"] - e["request_in"]) + (e["response_out"] - e["response_in"])
        out.append(
            [
                (sent - start) + (first - e["response_out"]),
                e["request_in"] - sent,
                held - latency_s,
                latency_s,
                e["response_in"] - e["request_out"],
                end - first,
            ]
        )
    if len(rows):
        order = np.argsort(np.argsort(rows[:, col["start"]], kind="stable"), kind="stable")
        return np.asarray(out, dtype=float)[order]
    return np.zeros((0, len(PART_FIELDS)))


def _cpu_now(store: ObjectStore, endpoint: Endpoint) -> dict[str, float]:
    """CPU seconds so far: this process (its workers' are added from the samples' own stamps:
    :meth:`_Collect.workers_cpu_s`), the store's server, the endpoint's proxy; and the clock."""
    own = os.times()
    return {
        "loader_s": own.user + own.system,
        "server_s": store.server_cpu_s(),
        "proxy_s": store.proxy_cpu_s(endpoint),
        "wall_s": clock(),
    }


def measure_requests(
    loader: Any,
    step: Any = None,
    *,
    epochs: int = 1,
    progress: bool | str = True,
    store: ObjectStore | None = None,
):
    """Record ``loader`` (:func:`helpers.record`) over an :class:`S3Dataset` and collect every
    sample's request; returns ``(Timeline, Requests)``. Request times are on the recording's
    clock (its start is taken a few microseconds before ``record`` takes its own). With
    ``store``: ``Requests.carried`` holds the bytes its proxy carried in each epoch (read
    before the recording and after each epoch's last batch, when that epoch's requests
    have all returned), ``Requests.cpu`` the CPU seconds the loader, the server and the
    proxy used, and ``Requests.parts`` where each request's time went (from the proxy's
    log; only through a proxy)."""
    from ...timing.recorder import record

    dataset = getattr(loader, "dataset", None)
    if not isinstance(dataset, S3Dataset):
        raise TypeError(
            f"measure_requests needs a DataLoader over a helpers.S3Dataset, got {type(dataset).__name__}"
        )
    marks: list[int] = []
    on_batch = None
    endpoint = dataset.endpoint
    if store is not None:
        last = len(loader) - 1
        store.proxy_log(endpoint)  # forget earlier connections
        marks.append(store.bytes_through(endpoint))

        def on_batch(batch) -> None:
            if batch.index == last:
                marks.append(store.bytes_through(endpoint))

        spent_before = _cpu_now(store, endpoint)
    collect = _Collect(step, clock())
    timeline = record(loader, collect, epochs=epochs, progress=progress, on_batch=on_batch)
    rows = np.concatenate(collect.rows) if collect.rows else np.zeros((0, len(REQUEST_FIELDS)))
    requests = Requests(rows)
    if store is not None:
        # The workers' CPU from their samples' stamps, not from this process's children's times:
        # a forkserver's workers are the server's children (their CPU was never counted here), and
        # a spawned worker's start-up (importing torch, ~1.5 s) is not the requests' work.
        spent_after = _cpu_now(store, endpoint)
        spent = {k: spent_after[k] - spent_before[k] for k in spent_after}
        requests.cpu = {
            "loader_s": spent["loader_s"] + collect.workers_cpu_s(),
            "server_s": spent["server_s"],
            "proxy_s": spent["proxy_s"],
            "wall_s": spent["wall_s"],
        }
        requests.carried = [int(b - a) for a, b in zip(marks, marks[1:], strict=False)]
        if endpoint.latency_s or endpoint.bandwidth:
            requests.parts = request_parts(
                requests.remote, store.proxy_log(endpoint), dataset.keys, dataset.bucket,
                endpoint.latency_s, collect.t0,
            )
    return timeline, requests


def samples_per_s(timeline: Any, epoch: int | None = None) -> float:
    """Samples per second once data flows: from the moment every worker has handed the loop its
    first batch to the last batch in hand, counting the batches after that moment. Workers start
    one after another (under spawn each imports torch first: notebook 05), and a loader without
    ``persistent_workers`` starts new ones every epoch: from the first batch alone, a short epoch
    that reads fast would measure how late the last worker started."""
    chosen = (b for b in timeline.batches if epoch is None or b.epoch == epoch)
    batches = sorted(chosen, key=lambda b: b.ready)
    first: dict[int, float] = {}
    for b in batches:
        first.setdefault(b.worker, b.ready)
    if not first:
        return float("nan")
    start = max(first.values())
    later = [b for b in batches if b.ready > start]
    if not later:
        return float("nan")
    samples = sum(len(b.indices) if b.indices else 0 for b in later)
    return samples / (later[-1].ready - start)
