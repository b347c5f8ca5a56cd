""":class:`S3Dataset`: one GET per sample; ``__getitems__`` makes a batch's GETs from a thread pool
inside the worker; an optional local cache keeps each object on disk for the next epoch."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from time import perf_counter as clock
from typing import Any

import torch
from torch.utils.data import Dataset, get_worker_info

from .endpoint import Endpoint, check_bucket, explain

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
            # This process's CPU so far (every thread): a worker's CPU between its requests, under
            # any start method (a forkserver's workers are not the main process's children).
            "cpu": torch.tensor(time.process_time(), dtype=torch.float64),
        }

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self._get(index)

    def __getitems__(self, indices: list[int]) -> list[dict[str, torch.Tensor]]:
        _, _, pool, _ = self._process_state()
        if pool is None:
            return [self._get(i) for i in indices]
        return list(pool.map(self._get, indices))
