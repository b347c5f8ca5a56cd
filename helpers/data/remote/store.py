""":class:`ObjectStore`: an S3-compatible store (``moto``'s server) in a child process on 127.0.0.1,
with latency proxies in front (``_store_server.py``, beside this module, run as a plain script)."""

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
from pathlib import Path
from typing import Any

import numpy as np

from .endpoint import Endpoint, StoreError

_SERVER = Path(__file__).with_name("_store_server.py")
START_TIMEOUT_S = 60.0


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
        self._proxies: dict[tuple[float, float | None, int | None], int] = {}
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
    def endpoint(self, latency_s: float = 0.0, bandwidth: float | None = None,
                 concurrency: int | None = None) -> Endpoint:
        """Where to connect: the server itself (no latency, no cap, no limit), or a proxy that adds
        ``latency_s`` of round trip to every request, caps each connection at ``bandwidth``
        bytes/s and, with ``concurrency``, serves at most that many requests at once (the rest
        wait in the store, first come first served). Proxies are made once per setting."""
        if not isinstance(latency_s, int | float) or not 0 <= latency_s <= 5:
            raise ValueError(f"latency_s must be seconds between 0 and 5, got {latency_s!r}")
        if bandwidth is not None and (not isinstance(bandwidth, int | float) or bandwidth <= 0):
            raise ValueError(
                f"bandwidth must be bytes per second above 0 (or None: uncapped), got {bandwidth!r}"
            )
        if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                        or concurrency < 1):
            raise ValueError(f"concurrency must be a whole number of requests, 1 or more (or None: no "
                             f"limit), got {concurrency!r}")
        if not self.alive:
            raise StoreError("the object store is not running: call `store.start()` first")
        key = (float(latency_s), None if bandwidth is None else float(bandwidth), concurrency)
        if key == (0.0, None, None):
            port = self.port
        else:
            if key not in self._proxies:  # _ask holds the lock while it talks to the child
                self._proxies[key] = self._ask({"cmd": "proxy", "latency_s": key[0], "bandwidth": key[1],
                                                "concurrency": concurrency})["port"]
            port = self._proxies[key]
        return Endpoint(f"http://127.0.0.1:{port}", self.access_key, self.secret_key, key[0], key[1],
                        concurrency=concurrency)

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
