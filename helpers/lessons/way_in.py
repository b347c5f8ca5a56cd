"""Notebook 00b · my GPU is idle: a plain timing loop read on the TF profiler's scale, the lab's
diagnosis of the same loader, and its first advice followed and timed again with the plain loop."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from ..classroom.checks import Check, Expected, at_most, holds, premise_failed
from ..timing.diagnosis.thresholds import input_scale
from ..timing.plain import wait_share


def steady_wait_share(wait_s: Sequence[float], step_s: Sequence[float], skip: int = 1) -> float:
    """The share of the loop's time spent in ``next()`` after the first ``skip`` batches: the first
    batch also waits for the workers to start, which is judged on its own (notebook 05). With
    ``skip=num_workers``, each worker's first batch is left out: spawned workers start one after
    another, and each one's first batch waits for its own start (make start-methods: 24 % under
    spawn against 20 % at most, from the second batch on)."""
    skip = max(1, skip)
    if len(wait_s) != len(step_s) or len(wait_s) < skip + 1:
        raise ValueError(f"need one wait and one step time per batch, at least {skip + 1} batches; got "
                         f"{len(wait_s)} waits and {len(step_s)} steps")
    waited, stepped = sum(wait_s[skip:]), sum(step_s[skip:])
    return wait_share(wait_s, step_s, skip) if waited + stepped > 0 else 0.0


def data_wait_share(wait_s: Sequence[float], step_s: Sequence[float], main_s: float, skip: int = 1) -> float:
    """:func:`steady_wait_share` without the loop's own work on each batch: ``next()`` also takes
    ``main_s`` (m, measured by the diagnosis: receiving the batch from the workers), which no
    worker count removes. Each batch's wait counts only beyond it."""
    skip = max(1, skip)
    steady = steady_wait_share(wait_s, step_s, skip)  # checks the arguments
    waited, stepped = sum(wait_s[skip:]), sum(step_s[skip:])
    beyond = sum(max(w - main_s, 0.0) for w in wait_s[skip:])
    return beyond / (waited + stepped) if waited + stepped > 0 else steady


def advised_change(diagnosis) -> dict:
    """The loader settings the diagnosis advised, as it followed them (``verify=True``): each
    followed change on top of the one before, merged. When the first change leaves the loader
    short, the diagnosis of the changed loader advises again, and it follows that too: an H200
    (torch 2.11) was advised 14 workers, waited 24 % with them, and was then advised 17. Without
    anything followed, the first advice that is a loader setting."""
    merged: dict = {}
    for followed in diagnosis.followed:
        merged.update(followed.recommendation.change or {})
    if merged:
        return merged
    return next((dict(r.change) for r in diagnosis.recommendations if r.change), {})


def main_after(followed: Sequence) -> float:
    """m of the loader with the advice followed (s): the diagnosis of the last changed loader
    measured it (:attr:`helpers.Diagnosis.main_s`); 0 when no advice was followed."""
    after = getattr(followed[-1], "after", None) if followed else None
    return after.main_s if after is not None else 0.0


def reading(wait_s: Sequence[float], step_s: Sequence[float], skip: int = 1, main_s: float = 0.0) -> str:
    """The plain loop's numbers in one sentence: the first batch (the first ``skip``), the typical
    wait and step, the wait share and its label on the TF profiler's scale, and what that means."""
    skip = max(1, skip)
    share = steady_wait_share(wait_s, step_s, skip)
    rest = len(wait_s) - skip
    label = input_scale(share)
    meaning = {"not input-bound": "the data keeps up: make the step faster, not the loader",
               "moderately input-bound": "the data costs some time: worth a look at the loader",
               "highly input-bound": "the step waits for data most of the time: fix the loader first"}[label]
    if skip == 1:
        first = f"first batch {wait_s[0] * 1e3:.0f} ms (it includes starting any workers); after it,"
    else:
        first = (f"first {skip} batches, one per worker: {sum(wait_s[:skip]) * 1e3:.0f} ms waiting in all "
                 "(they include starting the workers); after them,")
    text = (f"{first} {rest} batches: waiting {sum(wait_s[skip:]) / rest * 1e3:.1f} ms and stepping "
            f"{sum(step_s[skip:]) / rest * 1e3:.1f} ms per batch on average — {share:.0%} of the time "
            f"waiting: {label} (TF profiler's scale: under 5 % / 5–20 % / over 20 %); {meaning}.")
    if main_s > 0:
        text += (f" Of each wait, {main_s * 1e3:.1f} ms is the loop's own work on the batch (m, measured by "
                 f"the diagnosis: receiving it from the workers), which no worker count removes: "
                 f"{data_wait_share(wait_s, step_s, main_s, skip):.0%} of the time is waiting for the data "
                 "itself (a device prefetcher takes m off the loop: notebook 07).")
    return text


def checks(before: tuple[Sequence[float], Sequence[float]], diagnosis, followed: list,
           after: tuple[Sequence[float], Sequence[float]], workers_after: int = 1, *,
           modelled_step: bool = False) -> list[Check | Expected]:
    """``before``/``after``: the plain loop's ``(wait_s, step_s)`` per batch on the loader as given
    and with the advice followed (:func:`advised_change`; ``workers_after``: its ``num_workers``;
    each worker's first batch is left out of its share); ``diagnosis``: :func:`helpers.diagnose`
    of the loader as given; ``followed``: its :attr:`~helpers.Diagnosis.followed` (``verify=True``).

    The plain loop's wait share beside the diagnosis's is an :class:`Expected` row, not a check: on
    the loader as given (0 workers, each batch 16 sleeps, a sleeping step) both instruments read the
    model's n ÷ (n + y).

    ``modelled_step``: the step is the lab's sleep (no GPU). The two claims about the advice are then
    the lab's own arithmetic, its sleeps and its model: :class:`Expected` rows (the gain measured beside
    half the predicted one, the wait after beside 20 %), judged as checks only with a real step."""
    out = _checks(before, diagnosis, followed, after, workers_after)
    if not modelled_step:
        return out
    rows: list[Check | Expected] = []
    for row in out:
        if isinstance(row, Check):
            held = {True: "as the model says", False: "not as the model says", None: row.premise}[row.passed]
            rows.append(Expected(row.claim + " (the modelled step decides it)", row.measured or "—",
                                 "at least half the predicted gain"
                                 if row.id == "00b.advice.brings_half_the_gain" else "under 20 %",
                                 unit="", note=held))
        else:
            rows.append(row)
    return rows


def _checks(before, diagnosis, followed, after, workers_after):
    share_before = steady_wait_share(*before)
    n, y = getattr(diagnosis, "fetch_mean_s", None), getattr(diagnosis, "replay_step_s", None)
    model = n / (n + y) if n is not None and y else float("nan")
    out: list[Check | Expected] = [Expected(
        "the loader as given (0 workers): the share of the loop's time spent waiting, read by 15 lines of "
        "plain PyTorch; expected n ÷ (n + y) from the diagnosis's fetch and step", share_before, model,
        unit="%", note=f"the diagnosis read {diagnosis.steady_wait_share:.0%}")]
    claims = ("the diagnosis's first advice, followed, brings at least half the gain it predicted",
              "with that advice the plain loop no longer waits for data most of the time (under 20 %, "
              "beyond its own work per batch, m)")
    if input_scale(share_before) != "highly input-bound":
        why = f"the loader as given waits only {share_before:.0%} of the time here: nothing to fix"
        return out + [premise_failed(claims[0], "", why, id="00b.advice.brings_half_the_gain"),
                      premise_failed(claims[1], "", why, id="00b.advice.loop_stops_waiting")]
    first = followed[0] if followed else None
    if first is None:
        # nothing to follow (the next check still asks whether the loop stopped waiting)
        out.append(premise_failed(claims[0], "", "the diagnosis advised no setting to follow",
                                  id="00b.advice.brings_half_the_gain"))
    else:
        out.append(holds(claims[0], gain_share(first) >= 0.5,
                         f"{first.recommendation.knob}: {first.before_s * 1e3:.1f} → "
                         f"{first.after_s * 1e3:.1f} ms per step, predicted {first.predicted_s * 1e3:.1f} "
                         f"ms: {gain_share(first):.0%} of the predicted gain",
                         id="00b.advice.brings_half_the_gain", inputs=(gain_share(first),)))
    skip = max(1, workers_after)
    # next() also takes m, the loop's own work on each batch, which no worker count removes: a
    # sliver of the modelled 25 ms step, a larger share of a real step of a few ms on a fast GPU.
    main_s = main_after(followed)
    check = at_most(claims[1], data_wait_share(*after, main_s, skip), 0.20, unit="%",
                    what=f"in next(): {steady_wait_share(*after, skip):.0%}, less m "
                         f"({main_s * 1e3:.1f} ms a batch); was {share_before:.0%} before; "
                         f"after the first {skip} batch(es)", id="00b.advice.loop_stops_waiting")
    measured_m = main_s if followed and getattr(followed[-1], "after", None) is not None else None
    spare = knee_slack(diagnosis, workers_after, measured_m)
    if spare is not None and spare < KNEE:
        loop_s = diagnosis.replay_step_s + (diagnosis.main_s if measured_m is None else measured_m)
        check = premise_failed(claims[1], check.measured, (
            f"the advice lands at the sizing rule's knee: {workers_after} workers deliver a batch every "
            f"{diagnosis.fetch_mean_s / workers_after * 1e3:.1f} ms against the loop's "
            f"{loop_s * 1e3:.1f} ms ({spare:.0%} to spare, under {KNEE:.0%}): jitter, not the rule, "
            "decides whether the loop waits"), id="00b.advice.loop_stops_waiting")
    out.append(check)
    return out


#: The least share of the loop's time per batch the advised workers must leave to spare for the "no
#: longer waits" claim to be judged: at the sizing rule's knee (n / x just under y + m) any jitter in a
#: fetch makes the loop wait (00b with 4 ms samples: 3 workers at 24 ms against a 26 ms loop, 26 % waiting
#: in 1 run of 10).
KNEE = 0.10


def knee_slack(diagnosis, workers: int, main_s: float | None = None) -> float | None:
    """How much of the loop's time per batch (y + m) the advised ``workers`` leave to spare:
    1 − (n / x) / (y + m), from the diagnosis's measured fetch n and step y, and m as measured with the
    advised workers (``main_s``; else the diagnosis's own, with the loader as given). None when it has
    none of them: no step, or no workers."""
    n, y, m = (getattr(diagnosis, name, None) for name in ("fetch_mean_s", "replay_step_s", "main_s"))
    m = main_s if main_s is not None else m
    if n is None or y is None or m is None or workers < 1 or y + m <= 0:
        return None
    return 1.0 - (n / workers) / (y + m)


def gain_share(followed) -> float:
    """How much of the predicted gain a followed recommendation brought: (before − after) ÷
    (before − predicted); 1 is as predicted, 0 no gain at all (nan: it predicted no gain)."""
    predicted_gain = followed.before_s - followed.predicted_s
    if predicted_gain <= 0:
        return float("nan")
    return (followed.before_s - followed.after_s) / predicted_gain


def step_time_s(step, batch, repeats: int = 3) -> float:
    """The median time of ``repeats`` calls of ``step(batch)`` after one warm-up call (s): the first
    call also allocates the model's buffers and the optimizer's state."""
    step(batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
