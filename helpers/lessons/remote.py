"""Notebook 13 · remote storage: the first byte costs a round trip, small objects are
latency-bound, concurrency (workers × threads) multiplies what one GET at a time delivers
until the CPU is spent, and a local cache takes the store out of the second epoch."""

from __future__ import annotations

import numpy as np

from ..checks import Check, at_least, at_most, holds, premise_failed
from ..remote import Requests, median_timing

#: How much longer than a local file's the first byte from remote storage takes, at least
#: (the article: "orders of magnitude").
ORDERS = 100.0
#: A run during which this share of all cores was busy was limited by the CPU, not the latency.
BUSY = 0.85


def _spread(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.percentile(values, 90) - np.percentile(values, 10)) if len(values) >= 3 else 0.0


def checks(
    timings,
    *,
    latency_s: float,
    small: int,
    large: int,
    serial: tuple[float, Requests, int],
    threaded: tuple[float, Requests, int, int],
    cache: tuple[float, float, int] | None,
) -> list[Check]:
    """``timings``: :class:`helpers.ObjectTiming` rows from a local file, the server itself
    ("server") and the proxy ("remote"), for objects of ``small`` and ``large`` bytes;
    ``serial``: (samples/s, requests, workers) of one GET at a time; ``threaded``: (samples/s,
    requests, workers, threads) with a thread pool in ``__getitems__``; ``cache``: (samples/s
    in epoch 1, in epoch 2, bytes through the proxy during epoch 2), None if not run."""
    out: list[Check] = []
    local = median_timing(timings, "local file", small)
    remote = median_timing(timings, "remote", small)
    server = median_timing(timings, "server", small)
    out.append(
        at_least(
            f"the first byte of a small object from remote storage takes orders of magnitude "
            f"longer than from a local file (at least {ORDERS:.0f}×)",
            remote / local,
            ORDERS,
            unit="×",
            what=f"remote {remote * 1e3:.1f} ms, local file {local * 1e3:.3f} ms",
        )
    )
    added = remote - server
    spread = _spread([t.first_byte_s for t in timings if t.source == "server" and t.size == small])
    # below two round trips whatever the noise: "one round trip, not two" must stay testable
    upper = latency_s + min(max(0.5 * latency_s, 3 * spread), 0.9 * latency_s)
    claim = "the proxy adds one round trip to the first byte (not less, not two)"
    text = (
        f"{added * 1e3:.1f} ms over the server's own {server * 1e3:.1f} ms "
        f"(round trip {latency_s * 1e3:.0f} ms; allowed {0.8 * latency_s * 1e3:.0f}–{upper * 1e3:.0f} ms)"
    )
    out.append(holds(claim, 0.8 * latency_s <= added <= upper, text))
    small_rate = small / median_timing(timings, "remote", small, "total_s")
    large_rate = large / median_timing(timings, "remote", large, "total_s")
    out.append(
        at_most(
            "a small object is latency-bound: its throughput is under a tenth of a large one's",
            small_rate / large_rate,
            0.1,
            unit="×",
            what=f"{small_rate / 1e6:.2f} vs {large_rate / 1e6:.1f} MB/s",
        )
    )

    serial_rate, serial_requests, serial_workers = serial
    # The same requests, alone: a worker waits a round trip plus the server's own time per sample.
    alone_s = latency_s + server
    claim = (
        f"one GET at a time: {serial_workers} workers deliver about workers / (round trip + server) "
        "samples/s — at most that, at least 70 % of it"
    )
    text = (
        f"{serial_rate:.0f} samples/s ({serial_workers} / {alone_s * 1e3:.0f} ms = "
        f"{serial_workers / alone_s:.0f}; at most {1.05 * serial_workers / latency_s:.0f}: "
        f"{serial_workers} / round trip + 5 %)"
    )
    if serial_rate > 1.05 * serial_workers / latency_s:
        out.append(holds(claim, False, text))
    elif serial_requests.cpu_busy >= BUSY:
        out.append(
            premise_failed(claim, text, f"the cores were {serial_requests.cpu_busy:.0%} busy during the run")
        )
    else:
        out.append(holds(claim, serial_rate >= 0.7 * serial_workers / alone_s, text))
    rate, requests, workers, threads = threaded
    out.append(
        holds(
            f"requests in flight: at most {serial_workers} one at a time, "
            f"{workers} × {threads} with the thread pool (at least three quarters of it at the peak)",
            serial_requests.peak_in_flight() <= serial_workers
            and 0.75 * workers * threads <= requests.peak_in_flight() <= workers * threads,
            f"peak {serial_requests.peak_in_flight()} and {requests.peak_in_flight()}",
        )
    )
    concurrency = workers * threads / serial_workers
    claim = (
        "threads in __getitems__ multiply samples/s by about the concurrency "
        f"({workers} × {threads} vs {serial_workers} in flight: at least half of {concurrency:.0f}×)"
    )
    measured = rate / serial_rate
    text = (
        f"{measured:.1f}× ({serial_rate:.0f} → {rate:.0f} samples/s; a request took "
        f"{requests.median_s() * 1e3:.0f} ms vs {serial_requests.median_s() * 1e3:.0f} ms alone)"
    )
    if measured < 0.5 * concurrency and requests.cpu_busy >= BUSY:
        out.append(
            premise_failed(
                claim,
                text,
                f"the cores were {requests.cpu_busy:.0%} busy during the threaded run: "
                "the CPU, not the latency, limited it",
            )
        )
    else:
        out.append(holds(claim, measured >= 0.5 * concurrency, text))

    claims = (
        "with a local cache, no request reaches the store in epoch 2",
        "...and epoch 2 runs at least twice as fast as epoch 1",
    )
    if cache is None:
        out += [premise_failed(c, "", "the cached runs were not made") for c in claims]
    else:
        first, second, carried = cache
        out.append(holds(claims[0], carried == 0, f"{carried:,} bytes through the proxy in epoch 2"))
        out.append(
            at_least(claims[1], second / first, 2.0, unit="×", what=f"{first:.0f} → {second:.0f} samples/s")
        )
    return out
