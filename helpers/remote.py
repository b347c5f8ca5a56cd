"""Remote storage, served for real (notebook 13).

:class:`ObjectStore` starts an S3-compatible object store (``moto``'s server) in a child
process bound to 127.0.0.1, and in front of it, on request, latency proxies: TCP relays
(each in a process of its own) that hold every byte for half a round trip in each
direction and cap each connection's bandwidth (``helpers/_store_server.py``). Clients are
``boto3``, the library a user's own code would call. The store is stopped when its
``with`` block ends, when ``stop()`` is called, when the object is collected and when
Python exits; the child also exits by itself when its parent's pipe closes, so a killed
kernel leaves nothing running.

:class:`S3Dataset` reads one object per sample: ``__getitem__`` makes one GET,
``__getitems__`` (what the DataLoader calls with a batch's indices when it batches
automatically) makes the batch's GETs from a thread pool inside the worker, and an
optional local cache keeps each object on disk for the next epoch. Every sample carries
the times of its request, which :func:`measure_requests` collects into
:class:`Requests` (what was in flight, when) — with the store, also the proxy's log of
each request, which splits its time into the client's, the round trip, the server's and
the rest (:data:`PART_FIELDS`), and the CPU time each side spent.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter as clock
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

MiB = 2**20
_SERVER = Path(__file__).with_name("_store_server.py")
START_TIMEOUT_S = 60.0


class StoreError(RuntimeError):
    """The object store could not be started or used; the message names the fix."""


@dataclass(frozen=True)
class Endpoint:
    """Where a client connects (a URL on 127.0.0.1), with the credentials to sign requests.
    ``latency_s`` and ``bandwidth`` are what the proxy at this URL adds (0 and None: the
    server itself). Small and picklable: datasets carry it into their workers."""

    url: str
    access_key: str
    secret_key: str
    latency_s: float = 0.0
    bandwidth: float | None = None  #: bytes/s per connection, None = uncapped
    region: str = "us-east-1"

    def client(self, max_connections: int = 10):
        """A boto3 S3 client for this endpoint (one attempt per request: a failure shows at once)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(
                max_pool_connections=max(10, max_connections),
                connect_timeout=3,
                read_timeout=60,
                retries={"max_attempts": 1, "mode": "standard"},
            ),
        )

    def describe(self) -> str:
        extra = (
            "none added"
            if not self.latency_s and not self.bandwidth
            else (
                f"{self.latency_s * 1e3:.0f} ms round trip added"
                + (f", {self.bandwidth / 1e6:.0f} MB/s per connection" if self.bandwidth else "")
            )
        )
        return f"{self.url} ({extra})"


def explain(error: BaseException, endpoint: Endpoint, bucket: str | None = None) -> Exception:
    """The clear error for what the client raised: what went wrong and the fix."""
    from botocore.exceptions import ClientError, EndpointConnectionError

    if isinstance(error, EndpointConnectionError | ConnectionRefusedError):
        return ConnectionError(
            f"no object store answers at {endpoint.url}: it is not running (or stopped). Start one with "
            "`store = helpers.ObjectStore().start()` and use `store.endpoint(...)`, or check the port."
        )
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if code in ("NoSuchBucket", "404", "NotFound"):
            return LookupError(
                f"the object store at {endpoint.url} has no bucket {bucket!r}: create it with "
                f"`store.make_bucket({bucket!r}, ...)`, or check the bucket's name."
            )
        if code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "403"):
            return PermissionError(
                f"the object store at {endpoint.url} refused the credentials ({code}): use the access key "
                "and secret of `store.endpoint(...)` (helpers.ObjectStore creates them when it starts)."
            )
    return error if isinstance(error, Exception) else RuntimeError(str(error))


def check_bucket(endpoint: Endpoint, bucket: str) -> None:
    """Raise the clear error (:func:`explain`) unless ``bucket`` can be read at ``endpoint``."""
    if not isinstance(endpoint, Endpoint):
        raise TypeError(
            f"endpoint must be a helpers.Endpoint (from store.endpoint()), got {type(endpoint).__name__}"
        )
    try:
        endpoint.client().head_bucket(Bucket=bucket)
    except Exception as error:  # noqa: BLE001 - translated, then raised
        raise explain(error, endpoint, bucket) from None


class ObjectStore:
    """An S3-compatible object store in a child process on 127.0.0.1 (see the module docstring)::

    with helpers.ObjectStore() as store:
        keys = store.make_bucket("lab", count=1000, size=16 * 1024)
        remote = store.endpoint(latency_s=0.04)
        ...
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._proxies: dict[tuple[float, float | None], int] = {}
        self._finalizer: weakref.finalize | None = None
        self.port: int | None = None
        self.access_key = self.secret_key = ""

    # -- life cycle ---------------------------------------------------------------------
    def start(self) -> ObjectStore:
        if self.alive:
            return self
        try:
            import moto  # noqa: F401
        except ImportError:
            raise StoreError(
                "the object-store server (moto) is not installed: run `make lab`, "
                "or `pip install 'moto[server]' boto3`"
            ) from None
        self._errors = tempfile.TemporaryFile("w+")  # the child's messages (read when it fails)
        process = subprocess.Popen(
            [sys.executable, str(_SERVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
            bufsize=1,
        )
        self._process = process
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(process.stdout, self._lines), daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop_process, process, self._errors)
        atexit.register(self._finalizer)
        try:
            hello = self._read(START_TIMEOUT_S)
        except Exception:
            self.stop()
            raise
        self.port, self.access_key, self.secret_key = hello["port"], hello["access_key"], hello["secret_key"]
        return self

    def stop(self) -> None:
        """Stop the server and its proxies (waits for the child to exit). Safe to call twice."""
        if self._finalizer is not None:
            self._finalizer()
            atexit.unregister(self._finalizer)
        self._proxies.clear()

    def __enter__(self) -> ObjectStore:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def ports(self) -> list[int]:
        """The server's port and every proxy's (all on 127.0.0.1)."""
        return ([self.port] if self.port else []) + list(self._proxies.values())

    def _read(self, timeout_s: float) -> dict:
        """The child's next message (one reader thread per child feeds them in order)."""
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise StoreError(f"the object store did not answer within {timeout_s:.0f} s") from None
        if not line:
            self._process.wait(timeout=5)
            self._errors.seek(0)
            err = self._errors.read()
            raise StoreError(
                "the object store's process ended: "
                + (err.strip().splitlines() or ["?"])[-1]
                + " — run `make lab` to install its packages"
            )
        message = json.loads(line)
        if "error" in message:
            raise StoreError(message["error"])
        return message

    def _ask(self, command: dict) -> dict:
        if not self.alive:
            raise StoreError(
                "the object store is not running: call `store.start()` (or use `with "
                "helpers.ObjectStore() as store:`)"
            )
        with self._lock:
            self._process.stdin.write(json.dumps(command) + "\n")
            self._process.stdin.flush()
            return self._read(10.0)

    # -- use ----------------------------------------------------------------------------
    def endpoint(self, latency_s: float = 0.0, bandwidth: float | None = None) -> Endpoint:
        """Where to connect: the server itself (no latency, no cap), or a proxy that adds
        ``latency_s`` of round trip to every request and caps each connection at ``bandwidth``
        bytes/s. Proxies are made once per setting."""
        if not isinstance(latency_s, int | float) or not 0 <= latency_s <= 5:
            raise ValueError(f"latency_s must be seconds between 0 and 5, got {latency_s!r}")
        if bandwidth is not None and (not isinstance(bandwidth, int | float) or bandwidth <= 0):
            raise ValueError(
                f"bandwidth must be bytes per second above 0 (or None: uncapped), got {bandwidth!r}"
            )
        if not self.alive:
            raise StoreError("the object store is not running: call `store.start()` first")
        key = (float(latency_s), None if bandwidth is None else float(bandwidth))
        if key == (0.0, None):
            port = self.port
        else:
            if key not in self._proxies:  # _ask holds the lock while it talks to the child
                self._proxies[key] = self._ask({"cmd": "proxy", "latency_s": key[0], "bandwidth": key[1]})[
                    "port"
                ]
            port = self._proxies[key]
        return Endpoint(f"http://127.0.0.1:{port}", self.access_key, self.secret_key, key[0], key[1])

    def make_bucket(
        self, name: str, *, count: int, size: int, prefix: str = "obj", seed: int = 0
    ) -> list[str]:
        """Create bucket ``name`` holding ``count`` objects of ``size`` random bytes; their keys."""
        if not isinstance(count, int) or count < 1 or not isinstance(size, int) or size < 1:
            raise ValueError(f"count and size must be positive integers, got {count!r} and {size!r}")
        client = self.endpoint().client(max_connections=8)
        try:
            client.create_bucket(Bucket=name)
        except Exception as error:  # noqa: BLE001
            code = getattr(error, "response", {}).get("Error", {}).get("Code", "")
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        rng = np.random.default_rng(seed)
        keys = [f"{prefix}/{i:07d}" for i in range(count)]
        payloads = rng.integers(0, 256, size=(count, size), dtype=np.uint8)
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda i: client.put_object(Bucket=name, Key=keys[i], Body=payloads[i].tobytes()),
                    range(count),
                )
            )
        return keys

    def upload(self, bucket: str, files: Sequence[str | os.PathLike]) -> list[str]:
        """Create ``bucket`` (if needed) and put each file in it under its file name; the keys."""
        client = self.endpoint().client(max_connections=8)
        try:
            client.create_bucket(Bucket=bucket)
        except Exception as error:  # noqa: BLE001
            if getattr(error, "response", {}).get("Error", {}).get("Code", "") != "BucketAlreadyOwnedByYou":
                raise
        keys = [Path(f).name for f in files]
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda kf: client.put_object(Bucket=bucket, Key=kf[0], Body=Path(kf[1]).read_bytes()),
                    zip(keys, files, strict=True),
                )
            )
        return keys

    def stats(self) -> dict[int, dict[str, int]]:
        """Per proxy port: connections accepted, bytes carried (both directions) and CPU seconds
        used so far."""
        return {
            p["port"]: {"connections": p["connections"], "bytes": p["bytes"], "cpu_s": p["cpu_s"]}
            for p in self._ask({"cmd": "stats"})["proxies"]
        }

    def bytes_through(self, endpoint: Endpoint) -> int:
        """Bytes the proxy behind ``endpoint`` has carried so far (0 for the server itself)."""
        port = int(endpoint.url.rsplit(":", 1)[1])
        return self.stats().get(port, {}).get("bytes", 0)

    def proxy_cpu_s(self, endpoint: Endpoint) -> float:
        """CPU seconds the proxy behind ``endpoint`` (a process of its own) has used so far; 0
        for the server itself."""
        port = int(endpoint.url.rsplit(":", 1)[1])
        return self.stats().get(port, {}).get("cpu_s", 0.0)

    def proxy_log(self, endpoint: Endpoint) -> list[dict]:
        """What the proxy behind ``endpoint`` saw of each connection since the last call
        (and forgets it): its request line and when (``time.perf_counter``, the same clock
        in every process on Linux) it accepted it (``accepted``), read the request's first
        byte (``request_in``), passed it to the server (``request_out``), read the response's
        first byte (``response_in``) and passed that on (``response_out``, ``response_end``)."""
        port = int(endpoint.url.rsplit(":", 1)[1])
        return self._ask({"cmd": "log", "port": port})["log"]

    def cpu_s(self) -> float:
        """CPU seconds the store has used so far: the server's process and its proxies'."""
        import psutil

        if not self.alive:
            raise StoreError("the object store is not running")
        total = self.server_cpu_s()
        for child in psutil.Process(self.pid).children():
            try:
                times = child.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    def server_cpu_s(self) -> float:
        """CPU seconds the server's own process (moto; each proxy runs in a process of its
        own) has used so far."""
        import psutil

        if not self.alive:
            raise StoreError("the object store is not running")
        times = psutil.Process(self.pid).cpu_times()
        return times.user + times.system

    def __repr__(self) -> str:
        state = f"running (pid {self.pid}) on 127.0.0.1:{self.port}" if self.alive else "stopped"
        return f"<ObjectStore {state}, {len(self._proxies)} proxies>"


def _pump(stream: Any, lines: queue.Queue) -> None:
    """Move the child's output lines into a queue until it ends (then one empty line)."""
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put("")


def _stop_process(process: subprocess.Popen, errors: Any = None) -> None:
    """Close the child's input (it stops its server and exits), then make sure it did."""
    if process.poll() is None:
        try:
            process.stdin.close()
            process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait(timeout=5)
    for stream in (process.stdin, process.stdout, errors):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def error_of(attempt: Any) -> Exception:
    """Call ``attempt()`` and return the exception it raised; raise AssertionError if it
    raised none (a demonstration of an error that did not happen must not pass silently)."""
    try:
        attempt()
    except Exception as error:  # noqa: BLE001 - returned to be shown
        return error
    raise AssertionError(f"{attempt!r} raised no error")


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# -- the dataset ---------------------------------------------------------------------------
#: The columns of a sample's ``"request"`` row: the worker and its thread, when the request
#: started, got its first byte and ended, whether it was read from the cache, the sample's index,
#: and when boto3 had signed it and began to send it (``sent``, botocore's ``before-send`` event).
REQUEST_FIELDS = ("worker", "thread", "start", "first_byte", "end", "cached", "index", "sent")


_LANES = threading.Lock()
_SENT = threading.local()  # per thread: when boto3 began to send the current request


def _mark_sent(**_: Any) -> None:
    """botocore's ``before-send`` hook (the request is signed; the connection and the bytes
    come next). Returns None, so botocore sends the request itself."""
    _SENT.at = clock()


def cache_name(key: str) -> str:
    """The local file name for an object key (quoted: distinct keys never share a file)."""
    from urllib.parse import quote

    return quote(key, safe="")


class S3Dataset(Dataset):
    """One object per sample, read with boto3 (see the module docstring).

    Args:
        endpoint: from :meth:`ObjectStore.endpoint`.
        bucket, keys: the objects, all the same size (the default collate stacks them).
        threads: 1 = one GET at a time; more = ``__getitems__`` makes a batch's GETs from a
            pool of this many threads in each worker.
        cache_dir: keep each object in this folder; a later read (the next epoch, any worker)
            reads the file instead of the store.
        check: check the bucket can be read when the dataset is made (the clear errors of
            :func:`explain` then show in the notebook, before any worker starts).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        bucket: str,
        keys: Sequence[str],
        *,
        threads: int = 1,
        cache_dir: str | os.PathLike | None = None,
        check: bool = True,
    ):
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        if len(keys) == 0:
            raise ValueError("keys is empty: pass the keys that store.make_bucket() returned")
        if check:
            check_bucket(endpoint, bucket)
        self.endpoint, self.bucket, self.keys, self.threads = endpoint, bucket, list(keys), threads
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        if self.cache_dir is not None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._state: tuple[int, Any, Any, dict] | None = None  # (pid, client, pool, thread numbers)

    def __len__(self) -> int:
        return len(self.keys)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_state": None}  # clients and pools are made in each process

    def _process_state(self):
        if self._state is None or self._state[0] != os.getpid():
            pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
            client = self.endpoint.client(self.threads)
            client.meta.events.register("before-send.s3.GetObject", _mark_sent)
            self._state = (os.getpid(), client, pool, {})
        return self._state

    def _get(self, index: int) -> dict[str, torch.Tensor]:
        _, client, _, threads = self._process_state()
        key = self.keys[index]
        cached_file = None if self.cache_dir is None else self.cache_dir / cache_name(key)
        start = _SENT.at = clock()
        if cached_file is not None and cached_file.exists():
            body = cached_file.read_bytes()
            first = end = clock()
            cached = 1.0
        else:
            try:
                response = client.get_object(Bucket=self.bucket, Key=key)
                first = clock()
                body = response["Body"].read()
            except Exception as error:  # noqa: BLE001 - translated, then raised (in a worker too)
                raise explain(error, self.endpoint, self.bucket) from None
            end = clock()
            cached = 0.0
            if cached_file is not None:
                partial = cached_file.with_name(
                    f"{cached_file.name}.{os.getpid()}.{threading.get_ident()}.part"
                )
                try:
                    partial.write_bytes(body)
                    os.replace(partial, cached_file)  # atomic: another worker never reads half a file
                finally:
                    partial.unlink(missing_ok=True)
        info = get_worker_info()
        with _LANES:
            thread = threads.setdefault(threading.get_ident(), len(threads))
        row = torch.tensor(
            [-1 if info is None else info.id, thread, start, first, end, cached, index, _SENT.at],
            dtype=torch.float64,
        )
        return {
            "data": torch.frombuffer(bytearray(body), dtype=torch.uint8),
            "index": torch.tensor(index),
            "request": row,
        }

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self._get(index)

    def __getitems__(self, indices: list[int]) -> list[dict[str, torch.Tensor]]:
        _, _, pool, _ = self._process_state()
        if pool is None:
            return [self._get(i) for i in indices]
        return list(pool.map(self._get, indices))


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

    def samples_per_s(self, cached: bool | None = False) -> float:
        """Samples per second while every worker was making requests: from the moment the last
        worker started its first request to the moment the first worker ended its last, each
        request counted by the share of it inside that window (so the workers' staggered
        start-up does not count). When the workers overlapped for under a quarter of the
        whole span, the whole span. ``cached=None``: every sample, cached or not."""
        rows = self.rows
        if cached is not None and len(rows):
            rows = rows[rows[:, REQUEST_FIELDS.index("cached")] == float(cached)]
        if len(rows) < 2:
            return float("nan")
        start, end = rows[:, 2], rows[:, 4]
        workers = np.unique(rows[:, 0])
        firsts = [start[rows[:, 0] == w].min() for w in workers]
        lasts = [end[rows[:, 0] == w].max() for w in workers]
        lo, hi = max(firsts), min(lasts)
        if hi - lo < 0.25 * (max(lasts) - min(firsts)):
            lo, hi = min(firsts), max(lasts)
        if hi <= lo:
            return float("nan")
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
#: any wait for that process's GIL or a core; ``proxy``: the proxy accepting the connection
#: and holding the bytes *beyond* the round trip it adds; ``round_trip``: the round trip it
#: adds (the setting); ``server``: from the request reaching the server to its first byte
#: back; ``body``: the rest of the object after the first byte.
PART_FIELDS = ("client", "proxy", "round_trip", "server", "body")
_TIME_COLUMNS = [REQUEST_FIELDS.index(f) for f in ("start", "first_byte", "end", "sent")]


def client_setup_s(timeline: Any, requests: Requests) -> dict[int, float]:
    """Per worker, seconds from the start of its first fetch to the start of its first request:
    what the worker did before it could send anything (making its boto3 client, which loads
    S3's service description)."""
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


class _Collect:
    def __init__(self, step: Any, t0: float):
        self.step, self.t0, self.rows = step, t0, []

    def __call__(self, batch: Any) -> Any:
        rows = batch["request"].numpy().copy()
        rows[:, _TIME_COLUMNS] -= self.t0
        self.rows.append(rows)
        return None if self.step is None else self.step(batch)


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
                (e["request_in"] - sent) + held - latency_s,
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
    """CPU seconds so far: this process and its ended children (the DataLoader's workers, once
    joined), the store's server, the endpoint's proxy; and the clock."""
    own = os.times()
    return {
        "loader_s": own.user + own.system + own.children_user + own.children_system,
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
    from .recorder import record

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
        # the workers have ended (a non-persistent loader joins them when its epoch ends), so their
        # CPU time is in this process's children's times now
        spent_after = _cpu_now(store, endpoint)
        spent = {k: spent_after[k] - spent_before[k] for k in spent_after}
        requests.cpu = {
            "loader_s": spent["loader_s"],
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
    """Samples per second once data flows: from the first batch in hand to the last."""
    batches = [b for b in timeline.batches if epoch is None or b.epoch == epoch]
    if len(batches) < 2:
        return float("nan")
    ready = sorted(b.ready for b in batches)
    samples = sum(len(b.indices) if b.indices else 0 for b in batches[1:])
    return samples / (ready[-1] - ready[0]) if ready[-1] > ready[0] else float("nan")


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
    from .report import table

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
