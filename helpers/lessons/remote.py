"""Notebook 13 · remote storage: the round trip dwarfs a local file's first byte, one GET at a
time delivers one sample per request time and worker, a thread pool in ``__getitems__`` keeps a
batch's requests in flight together (each waiting thread releases the GIL), so threads multiply
samples/s while each request keeps its time alone — and when requests slow down under concurrency,
they wait in the store; a local cache takes the store out of the second epoch."""

from __future__ import annotations

from ..classroom.checks import Check, Expected, at_least, holds
from ..data.remote.objects import median_timing
from ..data.remote.requests import Requests

#: One GET at a time delivers at least this share of workers ÷ the time of a request: a worker's
#: own work between its requests, and the batch's hand-over, take the rest (measured 0.97–0.99 on
#: 2 cores with batches of 32).
LITTLE = 0.7
#: A thread pool keeps at least this share of the requests it was set (workers × threads) in flight
#: on average while every worker is requesting: a batch's requests start together, the batch waits
#: for its slowest, and the worker's own work sits between batches, so the pool runs part-empty at
#: each batch's end (2 workers × 8 threads, batches of 32: samples/s reached 81–89 % of workers ×
#: threads ÷ the mean request). Threads that took turns for the GIL while waiting would keep one
#: request in flight per worker: 1/threads of it.
POOL_FULL = 0.5


def _first_byte(timings, latency_s: float, small: int) -> Expected:
    local = median_timing(timings, "local file", small)
    remote = median_timing(timings, "remote", small)
    server = median_timing(timings, "server", small)
    added = remote - server  # what the proxy adds: the server's own time is the same both ways
    return Expected("what the lab's proxy adds to a small object's first byte: the round trip it is set to",
                    added, latency_s,
                    note=f"over the server's own {server * 1e3:.1f} ms; a local file's first byte "
                         f"{local * 1e3:.3f} ms ({added / local:.0f}× less than what the proxy adds)")


def thread_checks(
    serial: tuple[float, Requests, int],
    threaded: tuple[float, Requests, int, int],
    *,
    latency_s: float,
) -> list[Check]:
    """One GET at a time, and the thread pool — see :func:`checks`."""
    out: list[Check] = []
    serial_rate, serial_requests, serial_workers = serial
    alone_s = serial_requests.median_s()
    claim = (
        f"one GET at a time: each worker delivers at least {LITTLE:.0%} of one sample per request time — "
        f"{serial_workers} workers, {serial_workers} / request time samples/s — and never more than "
        f"{serial_workers} / round trip"
    )
    ceiling = 1.05 * serial_workers / latency_s
    out.append(
        holds(
            claim,
            LITTLE * serial_workers / alone_s <= serial_rate <= ceiling,
            f"{serial_rate:.0f} samples/s; {serial_workers} / {alone_s * 1e3:.0f} ms = "
            f"{serial_workers / alone_s:.0f} (at least {LITTLE:.0%} of it), at most {ceiling:.0f} "
            "(the round trip + 5 %)",
            id="13.serial.one_sample_per_request",
            inputs=(serial_rate, alone_s),
        )
    )
    rate, requests, workers, threads = threaded
    in_flight = requests.mean_in_flight()
    out.append(
        at_least(
            f"a pool of {threads} threads per worker keeps a batch's requests in flight together (a thread "
            "waiting on its socket releases the GIL): on average at least half of workers × threads",
            in_flight / (workers * threads),
            POOL_FULL,
            unit="%",
            what=f"{in_flight:.1f} of {workers} × {threads} in flight on average, at most "
                 f"{requests.peak_in_flight()}; {rate:.0f} samples/s against {serial_rate:.0f} one at a time",
            id="13.threads.requests_overlap",
        )
    )
    return out


def grid_reading(grid: dict[tuple[int, int], Requests], cores: float) -> str:
    """Notebook 13's workers × threads sweep in two lines: samples/s (and the median request) per
    configuration, then the CPU each side spent per request at 2 workers × 8 threads."""
    rates = "; ".join(f"{w}×{t}: {r.samples_per_s():.0f} ({r.median_s() * 1e3:.0f} ms)"
                      for (w, t), r in grid.items())
    cpu = grid[2, 8].cpu_per_request()
    return (f"samples/s (median request): {rates}\n"
            f"CPU per request at 2 × 8: loader {cpu['loader'] * 1e3:.1f} ms, "
            f"server {cpu['server'] * 1e3:.1f} ms, proxy {cpu['proxy'] * 1e3:.1f} ms; "
            f"loader and store used {grid[2, 8].cpus_used():.2f} of {cores:g} CPUs.")


def checks(
    timings,
    *,
    latency_s: float,
    small: int,
    large: int,
    serial: tuple[float, Requests, int],
    threaded: tuple[float, Requests, int, int],
    cache: tuple[float, float, int] | None,
    grid: dict[tuple[int, int], Requests] | None = None,
    cores: float | None = None,
) -> list[Check | Expected]:
    """``timings``: :class:`helpers.ObjectTiming` rows from a local file, the server itself
    ("server") and the proxy ("remote"), for objects of ``small`` and ``large`` bytes;
    ``serial``: (samples/s, requests, workers) of one GET at a time; ``threaded``: (samples/s,
    requests, workers, threads) with a thread pool in ``__getitems__``.

    Not checks: what the proxy adds to the first byte (the lab's round trip: an :class:`Expected` row),
    a small object's throughput against a large one's (the lab's round trip and bandwidth; the
    notebook's table shows it), where the pool's extra time went (the store's limit of 8 against 16 in
    flight; the notebook prints the split), the workers × threads sweep (``grid``: in flight ÷ the time
    of a request is Little's law, and how full the pool stays is checked on the pool's run; the
    notebook draws it, with ``cores``), and the cache (``cache``: the lab's own code and its round
    trip; the notebook prints the bytes and the rates)."""
    out: list[Check | Expected] = [_first_byte(timings, latency_s, small)]
    out += thread_checks(serial, threaded, latency_s=latency_s)
    return out
