"""Notebook 08 · batched fetching with __getitems__: it saves per-request costs, not per-sample work."""

from __future__ import annotations

from ..classroom.checks import Check, at_least
from ..timing.analysis import time_per_batch_after_startup
from ..timing.timeline import Timeline


def rates(runs: dict[str, Timeline]) -> dict[str, float]:
    """Batches per second once the workers were up, per run."""
    return {name: 1.0 / time_per_batch_after_startup(tl) for name, tl in runs.items()}


def workers_reading(rate: dict[str, float], batched_fetch_ms: float) -> str:
    """One sentence on what adding workers to the batched fetch did, on this machine."""
    gain = rate["__getitems__, 2 workers"] / rate["__getitems__, 0 workers"]
    if gain > 1.1:
        return f"Adding workers to the batched fetch helped further ({gain:.1f}×)."
    if gain > 0.9:
        return (
            f"Adding workers to the batched fetch made no real difference ({gain:.2f}×): once a batch costs "
            f"{batched_fetch_ms:.1f} ms to fetch, there is little left for workers to hide."
        )
    return (
        f"Adding workers to the batched fetch made it slower here ({gain:.2f}×): a batch costs "
        f"{batched_fetch_ms:.1f} ms to fetch, yet from the workers the loop got one every "
        f"{1e3 / rate['__getitems__, 2 workers']:.1f} ms — handing batches over between processes (and "
        "starting them, in a run this short) costs more than the fetch it would parallelise."
    )


#: Below this share of its time on a CPU, a CPU-bound fetch's time measures the stops, not the work.
ON_CPU_SHARE = 0.75


def on_cpu_share(timelines) -> float:
    """Of the fetches' time in these runs, the share spent on a CPU (the fetching process's CPU
    time over the fetches' wall time): about 1 for CPU work with a core to itself."""
    batches = [b for tl in timelines for b in tl.batches if b.fetch_cpu_s is not None]
    wall = sum(b.fetch_s for b in batches)
    return sum(b.fetch_cpu_s for b in batches) / wall if wall > 0 else float("nan")


def checks(
    speedup: dict[str, float],
    predicted: dict[str, float],
    rate: dict[str, float],
    tutorial_speedup: float,
    sleep_arithmetic: float,
    cores: float | None = None,
    cores_free: float | None = None,
    cpu_case_on_cpu: float | None = None,
) -> list[Check]:
    """``speedup`` per workload (the notebook's; "local SQLite" is judged here).

    That the DataLoader calls ``__getitems__`` once per batch (and ``Subset`` forwards it) is
    PyTorch's code (``_MapDatasetFetcher.fetch``, ``Subset.__getitems__``), not a lesson to check:
    the notebook shows the query counts. What the saved requests buy where the lab's own sleeps
    and CPU work set the costs — the remote case and the CPU case against the arithmetic of their
    stated costs (``predicted``), workers on per-sample requests (``rate``), the tutorial's speedup
    against its sleeps (``tutorial_speedup``, ``sleep_arithmetic``) — cannot come out otherwise:
    the notebook shows each beside its arithmetic, and they are not judged here (nor are
    ``cores``, ``cores_free`` and ``cpu_case_on_cpu``, which set their premises). A local database's
    queries are the one cost the lab does not set."""
    return [
        at_least(
            "even on a local database, fewer queries and Python calls pay (at least 1.2×)",
            speedup["local SQLite"],
            1.2,
            unit="×",
            id="08.local.fewer_queries_pay",
        ),
    ]
