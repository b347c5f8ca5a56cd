"""Remote storage, served for real (notebook 13).

:class:`ObjectStore` starts an S3-compatible object store (``moto``'s server) in a child
process bound to 127.0.0.1, and in front of it, on request, latency proxies: TCP relays
(each in a process of its own) that hold every byte for half a round trip in each
direction and cap each connection's bandwidth (``_store_server.py``, beside :mod:`.store`). Clients are
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

from .dataset import REQUEST_FIELDS, S3Dataset, cache_name
from .endpoint import Endpoint, MiB, StoreError, check_bucket, error_of, explain, port_open
from .objects import (
    ObjectTiming,
    download,
    median_timing,
    time_endpoints,
    time_files,
    time_objects,
    timing_table,
)
from .requests import (
    PART_FIELDS,
    Requests,
    client_setup_s,
    measure_requests,
    request_parts,
    request_slowdown,
    samples_per_s,
    slowdown_text,
)
from .store import START_TIMEOUT_S, ObjectStore

__all__ = [
    "Endpoint", "MiB", "StoreError", "check_bucket", "error_of", "explain", "port_open", "ObjectStore",
    "START_TIMEOUT_S", "REQUEST_FIELDS", "S3Dataset", "cache_name", "PART_FIELDS", "Requests",
    "client_setup_s", "measure_requests", "request_parts", "request_slowdown", "samples_per_s",
    "slowdown_text",
    "ObjectTiming", "download", "median_timing", "time_endpoints", "time_files", "time_objects",
    "timing_table",
]
