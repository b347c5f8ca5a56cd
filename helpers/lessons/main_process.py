"""Notebook 19 · when the main process is the limit: the main process's own work per batch (m),
the ceiling 1/(y + m) that more workers cannot lift, and what lifts it."""

from __future__ import annotations

import math
import statistics

from ..classroom.checks import Check, at_least, clearly_above, premise_failed, spread_s, timing_noise_s
from ..timing.analysis import main_cpu_per_batch_s, per_batch_s  # noqa: F401 (the first: notebook 19 reads it here)
from ..timing.theory import main_shares, measured_main_s, step_time
from ..timing.timeline import Timeline

#: Measured on one NVIDIA H100 with torch 2.11: the tutorial's model and data, the capstone's final
#: stage (notebook 11). Batches per second, shares of the compute-only bound, and seconds per stage.
#: Notebook 19's text quotes these numbers; tests/test_facts.py keeps it equal to them.
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
           cores: float | None = None, held_cpu_s: float | None = None) -> list[Check]:
    """``m``: m (s) for "many tensors" and "one stacked tensor", ``m_noise_s`` the spread of the
    latter's; ``lifts``: time per batch of "baseline", "one stacked tensor", "threads, GIL released",
    "threads, GIL held"; ``gil_work_s``: each batch's GIL-holding work in the last run, ``gil_held_s``
    that run's time per batch over the whole run (:func:`run_per_batch_s`: threads finish their first
    batches together, so the steady-state intervals after the first understate it); ``cores``: the
    CPUs this process may use (``helpers.effective_cores()``); ``held_cpu_s``: the main process's CPU
    per batch in the GIL-holding run (``Timeline.main_cpu_per_batch_s``: the threads' work and the
    loop's own).

    Not checks: the sweep against the model (``sweep``, ``predicted``, ``top_wait_share``: max(n/x, y + m)
    on the lab's sleeps, its n chosen as 2.4 (y + m)), and the lifts against their expected times
    (``expected``, ``step_noise_s``: a step that syncs every batch adds m to y by design, and threads in
    the main process hand nothing over). The notebook plots both beside the model, with each lift's m.
    That a transform in the loop's thread, uint8 batches and reading the loss every 8 steps cannot come
    out otherwise on a CPU is why they are shown, not checked, too."""
    out = [clearly_above("many small tensors cost the main process more than one stacked tensor of the "
                         "same bytes", m["many tensors"], m["one stacked tensor"], noise=m_noise_s,
                         what="m per batch", id="19.main.many_tensors_cost_more")]
    # One batch at a time: at least most of the work, and clearly slower than the loop's own pace (one
    # stacked tensor from processes): threads running in parallel would keep that pace, and on a slow
    # machine the pace alone can pass 80 % of the work.
    pace_s = lifts["one stacked tensor"]
    claim = ("threads for work that holds the GIL: one batch at a time — a batch takes at least 80 % of its "
             "work, and a quarter of it more than the loop's own pace")
    least_s = max(0.8 * gil_work_s, pace_s + 0.25 * gil_work_s)
    # the CPU a batch needs in the main process: the threads' work, and the loop's own beside it
    cpu_s = max(gil_work_s, held_cpu_s or 0.0)
    if cores is not None and cpu_s / cores >= least_s:
        # Inside a 1-CPU quota the work alone takes that long on the CPU there is, whether the threads take
        # turns for the GIL or not (a free-threaded Python would be as slow): the run cannot tell them apart.
        out.append(premise_failed(
            claim, f"{gil_held_s * 1e3:.1f} ms a batch",
            f"on {cores:g} CPU the {cpu_s * 1e3:.0f} ms of CPU per batch (the {gil_work_s * 1e3:.0f} ms of "
            f"work and the loop's own) takes at least {cpu_s / cores * 1e3:.0f} ms taking turns or not, no "
            f"less than the {least_s * 1e3:.1f} ms this check asks for: it cannot tell them apart here",
            id="19.gil.threads_take_turns"))
    else:
        out.append(at_least(claim, gil_held_s, least_s,
                            what=f"80 % of the work per batch, or the loop's own {pace_s * 1e3:.1f} ms + a "
                            "quarter of the work, the larger", id="19.gil.threads_take_turns"))
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
