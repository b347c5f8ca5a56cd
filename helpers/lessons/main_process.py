"""Notebook 19 · when the main process is the limit: the main process's own work per batch (m),
the ceiling 1/(y + m) that more workers cannot lift, and what lifts it."""

from __future__ import annotations

import math
import statistics

from ..classroom.checks import (
    Check,
    at_least,
    clearly_above,
    exceeds,
    near,
    premise_failed,
    spread_s,
    timing_noise_s,
)
from ..timing.analysis import per_batch_s, stops_per_batch_s  # noqa: F401 (the second: notebook 19 reads it here)
from ..timing.theory import main_shares, measured_main_s, step_time
from ..timing.timeline import Timeline

#: Measured on one NVIDIA H100 with torch 2.11 while this lab was built (issue 22 of this lab): the
#: tutorial's model and data, the capstone's final stage. Batches per second.
H100 = {"needed": 123.0, "loader float32 pinned": 72.0, "loader uint8 pinned": 121.0,
        "reached share of the bound": 0.37, "4 workers s": 3.59, "12 workers s": 3.62}


def h100_model() -> dict[str, float]:
    """The step-time model on the H100 figures: y = 1/123 s (the compute-only bound), m = 1/72 s (what
    the loader alone delivered: the main process receiving and pinning each float32 batch), and
    ``loss.item()`` every step, so nothing the host does overlaps the device: y + m per batch."""
    y, m = 1 / H100["needed"], 1 / H100["loader float32 pinned"]
    m_uint8 = 1 / H100["loader uint8 pinned"]
    return {"y_s": y, "m_s": m, "per_batch_s": y + m, "share_of_bound": y / (y + m),
            "uint8_share_of_bound": y / (y + m_uint8)}


def per_batch(runs: dict[str, Timeline], every: dict[str, int] | None = None) -> dict[str, float]:
    """Time per batch per run (s): the mean of the repeating cycle, one position per worker — and,
    for a run whose step syncs only every k steps (``every``: run name → k), a cycle as long as both
    repeat (4 workers, every 8 steps: 8 positions). With 4 positions the one long interval of each 8
    would share its position with as many short ones, and the median of that position would be the
    long one or a short one as the settled intervals happen to start."""
    every = every or {}
    return {name: per_batch_s(tl, math.lcm(max(tl.config.get("num_workers") or 1, 1), every.get(name, 1)),
                              cycles=1)
            for name, tl in runs.items()}


def main_s(runs: dict[str, Timeline]) -> dict[str, float]:
    """m per run (s): the median time the loop's thread spent in ``next()`` on a batch it could take."""
    return {name: measured_main_s(tl) for name, tl in runs.items()}


def main_noise_s(tl: Timeline) -> float:
    """The spread of m over a run's batches (s)."""
    return spread_s([m for _, m in main_shares(tl)])


def data_wait_share(tl: Timeline) -> float:
    """Of a run's time once every worker has delivered its first batch, the share the loop waited for
    a batch that was not there yet (the workers did not keep up), from
    :func:`helpers.timing.theory.main_shares`. The first round is left out: there the loop waits for
    start-up and the first n whatever the steady state."""
    skip = (tl.config.get("num_workers") or 0) + 1
    shares, batches = main_shares(tl)[skip:], tl.batches[skip:]
    total = batches[-1].step_end - batches[0].wait_start if batches else 0.0
    return sum(wait for wait, _ in shares) / total if total > 0 else 0.0


def predicted_sweep(batch_load_s: float, step_s: float, m_s: float, counts: list[int]) -> dict[int, float]:
    """max(n/x, y + m) per worker count (s): the workers' pace, or the loop's floor."""
    return {x: step_time(batch_load_s, step_s, x, main_s=m_s) for x in counts}


def expected_lifts(step_s: float, device_s: float, m_many_s: float, m_stacked_s: float) -> dict[str, float]:
    """The model's time per batch (s) for each lift, from y (``step_s``: host part + device part, as
    measured), the device part, and m measured for many tensors and one stacked tensor. ``loss.item()``
    every step: y + m. Every 8 steps: the host's m + host part overlaps the device part, max(m + h, d).
    Threads: no hand-over from a worker, m ≈ 0: y. uint8: the same as float32 here (shared memory is
    not copied on a CPU; bytes cost where the pin thread and the device copy them)."""
    host_s = max(step_s - device_s, 0.0)
    return {"baseline": step_s + m_many_s, "one stacked tensor": step_s + m_stacked_s,
            "uint8": step_s + m_stacked_s, "loss every 8 steps": max(m_stacked_s + host_s, device_s),
            "threads, GIL released": step_s}


def checks(m: dict[str, float], m_noise_s: float, sweep: dict[int, float], predicted: dict[int, float],
           top_wait_share: float, lifts: dict[str, float], expected: dict[str, float],
           step_noise_s: float, gil_work_s: float, gil_held_s: float,
           cores: float | None = None, transform: tuple[float, float, float] | None = None,
           overlap_stops_s: float | None = None) -> list[Check]:
    """``m``: m (s) for "many tensors" and "one stacked tensor", ``m_noise_s`` the spread of the
    latter's; ``sweep``/``predicted``: time per batch per worker count, measured and
    :func:`predicted_sweep`; ``top_wait_share``: :func:`data_wait_share` at the largest count;
    ``lifts``: time per batch of "baseline", "one stacked tensor", "loss every 8 steps",
    "threads, GIL released", "threads, GIL held"; ``expected``: :func:`expected_lifts`;
    ``gil_work_s``: each batch's GIL-holding work in the last run, ``gil_held_s`` that run's time per
    batch over the whole run (:func:`run_per_batch_s`: threads finish their first batches together,
    so the steady-state intervals after the first understate it); ``cores``: the CPUs this
    process may use (``helpers.effective_cores()``); ``transform``: the time per batch with a per-batch
    transform in the loop, without it, and the transform's own time (s); ``overlap_stops_s``: how long
    a CPU quota stopped the group per batch in the "loss every 8 steps" run (``stops_per_batch_s``;
    None: no quota)."""
    out = [clearly_above("many small tensors cost the main process more than one stacked tensor of the "
                         "same bytes", m["many tensors"], m["one stacked tensor"], noise=m_noise_s,
                         what="m per batch")]
    if transform is not None:
        with_it, without, transform_s = transform
        out.append(exceeds("a per-batch transform in the loop's thread is part of m: it adds its time to "
                           "every batch", with_it, without, gap=transform_s, noise=step_noise_s))
    counts = sorted(sweep)
    top, below = counts[-1], counts[-2]
    claim = f"{top} workers: the time per batch is the model's floor y + m, not n/{top}"
    if top_wait_share > 0.25:
        # in a 1-CPU quota the workers' pickling, m and the step's host part share one CPU
        out.append(premise_failed(claim, f"{sweep[top] * 1e3:.1f} ms",
                                  f"the loop waited for data {top_wait_share:.0%} of the time at {top} "
                                  f"workers: they did not keep up (CPUs for this process: {cores})"))
    else:
        out.append(near(claim, sweep[top], predicted[top], rel=0.25, noise_s=step_noise_s))
    out.append(near("one worker: the workers set the pace, n", sweep[counts[0]], predicted[counts[0]],
                    rel=0.25, noise_s=step_noise_s))
    out.append(near(f"{below} → {top} workers: no gain once at the floor", sweep[below] / sweep[top], 1.0,
                    rel=0.2, unit="×"))
    saved = expected["baseline"] - expected["one stacked tensor"]
    out.append(exceeds("one stacked tensor instead of many: faster by the m it saves", lifts["baseline"],
                       lifts["one stacked tensor"], gap=saved, noise=step_noise_s))
    # The lab cannot pin or copy to a device on a CPU, where a quarter of the bytes pays (the H100's 72 → 121
    # batches/s): what it can test is that the hand-over itself is not where bytes cost.
    out.append(near("uint8 on a CPU: about the time per batch of float32 — the main process maps shared "
                    "memory, it copies no bytes itself", lifts["uint8"], lifts["one stacked tensor"],
                    rel=0.15, noise_s=step_noise_s))
    overlap = expected["one stacked tensor"] - expected["loss every 8 steps"]
    claim = "reading the loss every 8 steps: the host's work overlaps the device's"
    overlapped = exceeds(claim, lifts["one stacked tensor"], lifts["loss every 8 steps"], gap=overlap,
                         noise=step_noise_s)
    short_s = lifts["loss every 8 steps"] + overlap / 2 - lifts["one stacked tensor"]
    if overlapped.passed is False and overlap_stops_s is not None and overlap_stops_s >= short_s:
        # make quota QUOTA=0.5: 21.2 ms against 20.3 with the loss read every step. Run ahead, the host
        # spends its CPU in bursts (8 steps' launches and hand-overs back to back), and a quota stops the
        # group once it has spent its share of a period: the pace is the quota's, not max(m + h, d).
        # Set aside only when the stops measured in that run cover what the overlap missed by.
        stops_ms, short_ms = overlap_stops_s * 1e3, short_s * 1e3
        out.append(premise_failed(claim, overlapped.measured,
                                  f"a CPU quota stopped this process's group for {stops_ms:.1f} ms a batch "
                                  "in that run (cgroup cpu.stat, summed over the cores), at least the "
                                  f"{short_ms:.1f} ms a batch the overlap fell short by: the host could not "
                                  "run ahead of the device at a core's pace"))
    else:
        out.append(overlapped)
    out.append(near("threads for GIL-releasing work: no hand-over, the pace is the step's",
                    lifts["threads, GIL released"], expected["threads, GIL released"], rel=0.25,
                    noise_s=step_noise_s))
    # One batch at a time: at least most of the work, and clearly slower than the loop's own pace (one
    # stacked tensor from processes): threads running in parallel would keep that pace, and on a slow
    # machine the pace alone can pass 80 % of the work.
    pace_s = lifts["one stacked tensor"]
    claim = "threads for work that holds the GIL: one batch at a time, at least its work"
    least_s = max(0.8 * gil_work_s, pace_s + 0.25 * gil_work_s)
    if cores is not None and gil_work_s / cores >= least_s:
        # Inside a 1-CPU quota the work alone takes that long on the CPU there is, whether the threads take
        # turns for the GIL or not (a free-threaded Python would be as slow): the run cannot tell them apart.
        out.append(premise_failed(
            claim, f"{gil_held_s * 1e3:.1f} ms a batch",
            f"on {cores:g} CPU the {gil_work_s * 1e3:.0f} ms of work per batch takes at least "
            f"{gil_work_s / cores * 1e3:.0f} ms taking turns or not, no less than the {least_s * 1e3:.1f} ms "
            "this check asks for: it cannot tell them apart here"))
    else:
        out.append(at_least(claim, gil_held_s, least_s,
                            what=f"80 % of the work per batch, or the loop's own {pace_s * 1e3:.1f} ms + a "
                            "quarter of the work, the larger"))
    return out


def run_per_batch_s(tl: Timeline) -> float:
    """A run's time per batch over the whole run (s): from ``iter()`` to the end of the last step."""
    return (tl.batches[-1].step_end - tl.epochs[0].iter_start) / len(tl.batches)


def step_noise(tl: Timeline) -> float:
    """The timing noise of a time per batch averaged over a run (s): the spread of its steps (which
    should all take one time) over the square root of their number — the noise of a mean."""
    return timing_noise_s([b.step_s for b in tl.batches]) / max(len(tl.batches), 1) ** 0.5


def median_step_s(tl: Timeline) -> float:
    """The median step of a run (s)."""
    return statistics.median(b.step_s for b in tl.batches)
