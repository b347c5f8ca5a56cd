"""The diagnosis's rules: the TF profiler's scale, its thresholds, and :func:`recommend` (what to
change, each recommendation with the number that triggered it)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader, IterableDataset

from ...cores import cpu_limits
from ..settings import HAS_IN_ORDER
from ..theory import recommend_num_workers
from ..timeline import BatchRecord, Timeline

if TYPE_CHECKING:  # annotations only: result imports this module
    from .result import Diagnosis

#: The TF profiler's scale: the share of step time spent waiting for input, and its label.
SCALE = ((0.05, "not input-bound"), (0.20, "moderately input-bound"), (math.inf, "highly input-bound"))
#: The loop waiting at least this share (after each worker's first batch of an epoch) gets data advice.
INPUT_BOUND = 0.05
#: More workers are advised when the model predicts they save at least this share of each step.
WORTH = 0.10
#: Start-up above this share of the run is worth avoiding.
STARTUP_SHARE = 0.10
#: A copy above this share of the step is worth overlapping.
COPY_SHARE = 0.10
#: Collate above this share of a worker's fetch is worth a look.
COLLATE_SHARE = 0.30
#: Fetch times whose 90th percentile is this many times their median vary.
SPREAD = 2.0
#: A fetch that keeps its process's CPU busy this share of its time computes (is CPU-bound).
CPU_BOUND = 0.5
#: The main process's own share m above this share of the loop's time per step bounds it.
MAIN_SHARE = 0.25
#: Workers count as busy (what the loop waits for) when their fetches take at least this share of the
#: loop's time per step between them; computing workers fill the cores at this share of them.
BUSY_WORKERS = 0.5
#: Slow fetches count as landing on one worker when this share of them did.
CONCENTRATED = 0.7


def input_scale(share: float) -> str:
    """The TF profiler's label for a wait share (``SCALE``)."""
    return next(label for bound, label in SCALE if share < bound)


@dataclass(frozen=True)
class Recommendation:
    knob: str  #: what to change: "num_workers", "prefetch_factor", "persistent_workers", ...
    advice: str  #: the change, in words
    because: str  #: the measured number that triggered it
    #: the DataLoader arguments that follow it (None: a change to code, not to a setting)
    change: dict[str, Any] | None = None
    #: the time per step the lab's model predicts after the change (s; None: no prediction)
    predicted_s: float | None = None
    #: what the prediction is about: "steady" (time per step once each epoch's first batch is in
    #: hand and every worker is up) or "run" (the whole run's wall time per step, start-up included)
    measure: str = "steady"


def _shard_caveat(loader: DataLoader, workers: int) -> str:
    """For an IterableDataset, more than one worker repeats the stream unless it shards itself."""
    if workers < 2 or not isinstance(loader.dataset, IterableDataset):
        return ""
    return ("; your IterableDataset must shard itself by torch.utils.data.get_worker_info() (id, "
            "num_workers), or each worker yields the whole stream: every sample num_workers times")


def _describe_change(change: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (change or {}).items())


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _persistent_run_s(d: Diagnosis, workers: int) -> float:
    """The run's time with workers kept between epochs: the first epoch as measured (start-up
    included, up to its last step: its end shut the workers down), then each later epoch one
    fetch for its first batch and the steady pace for the rest — no start-up, a worker still
    starting never holds a batch back, and no shutdown (notebook 05)."""
    tl = d.timeline
    first = tl.epochs[0]
    last_step = max((b.step_end for b in tl.batches if b.epoch == first.epoch), default=first.end)
    pace = max(d.fetch_mean_s / max(workers, 1), (d.replay_step_s or 0.0) + d.main_s)
    later = [sum(b.epoch == e.epoch for b in tl.batches) for e in tl.epochs[1:]]
    return (last_step - first.iter_start) + sum(d.fetch_mean_s + (k - 1) * pace for k in later if k)


def _epoch_ends_s(tl: Timeline) -> float:
    """Seconds after each epoch's last step (the last ``next()``, which shuts the workers down
    when they are not persistent) and between epochs (the old iterator going)."""
    last: dict[int, float] = {}
    for b in tl.batches:
        last[b.epoch] = max(last.get(b.epoch, 0.0), b.step_end)
    tails = sum(max(e.end - last.get(e.epoch, e.end), 0.0) for e in tl.epochs)
    gaps = sum(max(nxt.iter_start - e.end, 0.0) for e, nxt in zip(tl.epochs[:-1], tl.epochs[1:], strict=True))
    return tails + gaps


def _slow_batches(tl: Timeline) -> tuple[float, float, dict[int, int]]:
    """(median, 90th percentile of the fetch times, slow fetches per worker): a fetch is slow
    when it took at least ``SPREAD`` times the median."""
    fetches = sorted(b.fetch_s for b in tl.batches)
    median = statistics.median(fetches)
    p90 = fetches[int(0.9 * (len(fetches) - 1))]
    per_worker: dict[int, int] = {}
    for b in tl.batches:
        if median > 0 and b.fetch_s >= SPREAD * median:
            per_worker[b.worker] = per_worker.get(b.worker, 0) + 1
    return median, p90, per_worker


def _slowest_worker_mean(tl: Timeline) -> float:
    """The longest mean fetch time of one process's batches."""
    per: dict[int, list[float]] = {}
    for b in tl.batches:
        per.setdefault(b.worker, []).append(b.fetch_s)
    return max((statistics.fmean(v) for v in per.values()), default=0.0)


def longest_burst(tl: Timeline, turn_s: float) -> tuple[float, int]:
    """How far one worker fell behind its turn at most, over a run of consecutive fetches (s), and
    which worker: each fetch adds what it took beyond ``turn_s`` (the time between the loop's visits
    to that worker) and a fast fetch pays it back, never below zero. Fetches each within the queue's
    lead, and a mean within the turn, can still add up, in a burst, past the lead."""
    worst, who = 0.0, -1
    per: dict[tuple[int, int], list[BatchRecord]] = {}
    for b in tl.batches:
        per.setdefault((b.epoch, b.worker), []).append(b)
    for (_, worker), batches in per.items():
        behind = 0.0
        for b in sorted(batches, key=lambda x: x.fetch_start):
            behind = max(0.0, behind + b.fetch_s - turn_s)
            if behind > worst:
                worst, who = behind, worker
    return worst, who


def recommend(d: Diagnosis, loader: DataLoader, *, device: Any = None) -> list[Recommendation]:
    """The lab's models applied to what ``d`` measured (see the module docstring)."""
    out: list[Recommendation] = []
    tl, parts = d.timeline, d.breakdown()
    workers = loader.num_workers
    epochs = len(tl.epochs)
    startup_share = d.startup_s / tl.wall_s if tl.wall_s > 0 else 0.0
    if workers > 0 and not loader.persistent_workers and epochs > 1 and startup_share >= STARTUP_SHARE:
        ends = _epoch_ends_s(tl)
        out.append(Recommendation(
            "persistent_workers", "persistent_workers=True: start the workers once, not every epoch",
            f"start-up took {d.startup_s:.2f} s over {epochs} epochs, {startup_share:.0%} of the run, and "
            f"each epoch's end (its workers shutting down) {ends:.2f} s in all",
            {"persistent_workers": True}, _persistent_run_s(d, workers) / d.steps, "run"))
    if d.replay_step_s is None:
        rate = 1 / d.steady_step_s if d.steady_step_s > 0 else float("nan")
        out.append(Recommendation(
            "step", "diagnose again with your training step (a function, or --step-ms with its time): "
            "whether the loader keeps up depends on it",
            f"without a step the loader alone delivered {rate:.1f} batches/s ({_ms(d.steady_step_s)} per "
            f"batch) after start-up, a fetch taking {_ms(d.fetch_mean_s)} on average"))
        return out

    n, y, m = d.fetch_mean_s, d.replay_step_s, d.main_s
    if workers == 0 and d.receive_alone_s is not None:
        # With workers every batch also travels: the main process unpickles it from shared memory,
        # which a run without workers never did (measured alone here; more beside busy workers).
        m += d.receive_alone_s
    loop_s = y + m
    limits = cpu_limits()
    cores = d.free_cores(limits)
    busy = ("" if cores >= limits.whole else
            f", of which other processes kept {d.others_busy:.1f} busy (about {cores} free)")
    input_bound = d.steady_data_wait_share >= INPUT_BOUND  # waiting for batches not yet built
    needed = recommend_num_workers(n, y, main_s=m)
    cpu_bound = d.computes(limits)  # against the CPU each worker could get (a quota, busy cores)
    rule = (f"a batch takes {_ms(n)} to fetch on average (median {_ms(d.fetch_median_s)}), the loop "
            f"{_ms(y)} per step and {_ms(m)} of its own per batch: x = ⌈n / (y + m)⌉ = {needed}")
    # The workers' own pace: how long they need per batch between them, against the loop's pace. A
    # cheaper fetch (collate) or sample only helps when the workers are what the loop waits for.
    workers_pace = n / max(workers, 1)
    workers_busy = workers_pace >= BUSY_WORKERS * loop_s
    waiting = d.steady_wait_share >= INPUT_BOUND
    # How many workers the cores can take: a computing fetch, one per free core; a fetch that mostly
    # waits still computes for its CPU share of the time, and workers fetching at once want that share
    # of a core each: past ⌊free cores / share⌋ of them they wait for a core too (a fetch at 40 % CPU:
    # 5 on 2 cores, not the rule's 8).
    capacity = min(limits.cores, float(cores))
    share = d.cpu_share
    if cpu_bound:
        target = max(min(needed, cores), 1)
    else:
        fits = math.floor(capacity / share) if share else needed
        target = max(min(needed, fits), min(needed, workers + 1), 1)
    # More workers only when the model's gain is worth a change (beats the run's own noise). Computing
    # workers share the CPU a quota allows: under 1.5 CPUs two deliver 1.5 fetches' worth, not 2 (below
    # one CPU the run's own fetches were already stopped alike: n holds it).
    more_s = max(n / (min(target, max(capacity, 1.0)) if cpu_bound else target), loop_s)
    worth = more_s <= (1 - WORTH) * d.steady_step_s
    # Filling the cores: as many computing workers as free cores, and busy (CPU used per second of run).
    workers_cpu = (d.cpu_share or 0.0) * n / d.steady_step_s if d.steady_step_s > 0 else 0.0
    saturated = cpu_bound and workers >= cores and workers_cpu >= BUSY_WORKERS * max(capacity, 1.0)
    # The main process's own share, without workers competing for its core: when the cores are
    # full, m swells with waiting for one, and only the share measured alone says what is its own.
    own_m = m if d.receive_alone_s is None else min(m, d.receive_alone_s + max(m - parts[
        "receive (unpickle in the main process)"], 0.0))
    # It bounds the loop only where the workers could keep its pace: workers slower than y + m are
    # the bound, and a smaller m gains nothing (two CPU-bound workers on two cores: 1.8 ms of own m
    # against a 5.1 ms step reads 26 %, while the workers need 18.8 ms per batch).
    main_bound = (waiting and own_m >= 0.001 and own_m >= MAIN_SHARE * (y + own_m)
                  and workers_pace < y + own_m)
    # A collate_fn that is most of the fetch is the cost to cut when the loop waits for the workers,
    # or when their computing fills the cores (the main process then waits for a core: its m swells).
    collate_heavy = d.collate_s is not None and d.collate_s >= COLLATE_SHARE * n
    if collate_heavy and ((input_bound and workers_busy) or (waiting and saturated and not main_bound)):
        starved = (f"; the workers' computing fills the {limits.describe()}{busy} and the main process, "
                   f"short of a core, takes {_ms(m)} to take each batch in ({_ms(own_m)} alone)"
                   if not (input_bound and workers_busy) else "")
        out.append(Recommendation(
            "collate_fn", "a cheaper collate_fn (or build batches in __getitems__: notebook 08)",
            f"collate_fn takes {_ms(d.collate_s)} of the {_ms(n)} a worker spends per batch" + starved,
            None, max((n - d.collate_s) / max(workers, 1), y + own_m if starved else loop_s)))
    if main_bound:
        from .main_share import main_process_advice

        out.append(main_process_advice(d, loader, own_m, y, workers_pace, m))
    if waiting and saturated and not main_bound:
        # The workers' computing fills the cores; the main process waits for one too (its m swells).
        if not collate_heavy:
            out.append(Recommendation(
                "sample_cost", "make each sample cheaper to load (decode less or smaller, resize earlier"
                + (", augment on the device" if d.device is not None else "")
                + ": notebooks 04 and 14); more workers cannot help here",
                f"the fetch computes (the CPU {d.cpu_share:.0%} of its time) and the {workers} workers "
                f"already fill the {limits.describe()}{busy}: the main process, short of a core, takes "
                f"{_ms(m)} to take each batch in ({_ms(own_m)} alone); the sizing rule would ask for "
                f"{needed}"))
    elif input_bound and workers < needed and not main_bound and not worth:
        out.append(Recommendation(
            "none", "the loader nearly keeps up: more workers would gain little; make the step faster",
            f"{rule}, which predicts {_ms(more_s)} per step against {_ms(d.steady_step_s)} now: under "
            f"{WORTH:.0%} saved"))
    elif input_bound and workers < needed and not main_bound:
        if not cpu_bound:
            cpu = "" if share is None else f" (the fetch used the CPU {share:.0%} of its time)"
            if target < needed:
                beyond = (f"; the fetch used the CPU {share:.0%} of its time: {target} workers fetching at "
                          f"once keep about {target * share:.1f} of the {capacity:g} free cores computing, "
                          f"and more would wait for a core; past {target} make each sample cheaper to load "
                          "(notebooks 04, 14)")
            elif needed > cores:
                beyond = (f"; more workers than the {capacity:g} effective cores is fine: the fetches wait "
                          "rather than compute" + cpu)
            else:
                beyond = cpu
            out.append(Recommendation("num_workers", f"num_workers={target} (now {workers})"
                                      + _shard_caveat(loader, target), rule + beyond,
                                      {"num_workers": target}, more_s))
        else:
            past = (f"; the rule asks for {needed}, but past the cores make each sample cheaper to load "
                    "(notebooks 04, 14)") if needed > cores else ""
            out.append(Recommendation(
                "num_workers", f"num_workers={target} (now {workers})" + _shard_caveat(loader, target),
                f"{rule}; the fetch computes (the CPU {d.cpu_share:.0%} of its time), so workers beyond the "
                f"{limits.describe()}{busy} add nothing{past}",
                {"num_workers": target}, more_s))
    elif input_bound and workers > 0 and len(tl.batches) >= 10 and not main_bound:
        median, p90, slow = _slow_batches(tl)
        # Slow fetches make the loop wait only when one outlasts the lead the queue gives it, or when
        # a worker's fetches, slow ones among them, take longer on average than its turn comes round
        # (every `workers` steps). The lead: a batch's index is sent when the batch workers ×
        # prefetch_factor places before it is handed to the loop (_process_data → _try_put_index),
        # that many steps before the loop asks for it. Otherwise they are hidden already: a 2.1 ms
        # 90th percentile against 80 ms of lead is a spread, but a deeper prefetch would not shorten a
        # wait of the machine's own beside it (tests/test_diagnose.py).
        depth = loader.prefetch_factor or 2
        outlasts = p90 > workers * depth * loop_s
        behind = _slowest_worker_mean(tl) > workers * loop_s
        if median > 0 and p90 / median >= SPREAD and slow and (outlasts or behind):
            worker, count = max(slow.items(), key=lambda kv: kv[1])
            total = sum(slow.values())
            spread = f"fetch times vary: 90th percentile {_ms(p90)}, median {_ms(median)}"
            in_order = HAS_IN_ORDER and getattr(loader, "in_order", True)
            if workers >= 2 and count >= CONCENTRATED * total and in_order:
                out.append(Recommendation(
                    "in_order", "in_order=False: let the other workers' batches overtake the slow ones "
                    "(costs a fixed order: notebooks 09, 15)",
                    f"{spread}; {count} of the {total} slow batches came from worker {worker}: in order the "
                    "loop waits behind each, and a deeper prefetch cannot help a worker that gets every "
                    "slow batch",
                    {"in_order": False}, max(n / workers, loop_s)))
            elif workers == 1:
                out.append(Recommendation(
                    "num_workers", "num_workers=2 (now 1): a second worker builds the next batch while the "
                    "first is on a slow one" + _shard_caveat(loader, 2),
                    f"{spread}; one worker gets every slow batch",
                    {"num_workers": 2}, max(n / 2, loop_s)))
            elif outlasts:
                # deep enough that the lead covers the 90th percentile (a worker behind on average is
                # not helped by a deeper queue: it is capacity, not order)
                depth = math.ceil(p90 / (workers * loop_s))
                out.append(Recommendation(
                    "prefetch_factor", f"prefetch_factor={depth} (now {loader.prefetch_factor}): start the "
                    "slow fetches earlier", f"{spread}, spread over {len(slow)} workers; on average the "
                    f"workers keep up ({workers} ≥ the rule's {needed})",
                    {"prefetch_factor": depth}, max(n / workers, loop_s)))
        elif not behind:
            # A burst: one worker's fetches, each within the lead and on average within its turn, fall
            # behind together, past the lead the queue gives (a run of slow files, a cache that cools)
            # A worker's own batches queued ahead of the one it fetches: prefetch_factor − 1 turns of
            # slack (the model: 2 workers, a 20 ms turn, four 38 ms fetches 72 ms behind: the loop waits
            # 52 ms with 2, 12 with 4, none with 1 + ⌈72 / 20⌉ = 5)
            turn = workers * loop_s
            burst, worker = longest_burst(tl, turn)
            lead = (depth - 1) * turn
            if burst > lead:
                deeper = 1 + math.ceil(burst / turn)
                out.append(Recommendation(
                    "prefetch_factor", f"prefetch_factor={deeper} (now {loader.prefetch_factor}): a lead "
                    "that covers the burst (notebook 03)",
                    f"worker {worker}'s fetches came in a burst: each within the queue's lead of {_ms(lead)} "
                    f"and on average within its turn of {_ms(turn)}, yet together {_ms(burst)} behind it",
                    {"prefetch_factor": deeper}, max(n / workers, loop_s)))
    copy = parts["copy to the device"]
    if device is not None and not loader.pin_memory and copy >= COPY_SHARE * max(parts["step"], 1e-9):
        out.append(Recommendation(
            "pin_memory", "pin_memory=True and non_blocking copies (notebook 06)",
            f"the copy takes {_ms(copy)} per step, {copy / parts['step']:.0%} of the step",
            {"pin_memory": True}))
    if not out and input_bound and d.steady_wait_share < WORTH:
        out.append(Recommendation(
            "none", "the loader nearly keeps up: no knob the lab models is worth turning; make the step "
            "faster",
            f"after each worker's first batch the loop waited {d.steady_wait_share:.0%} ({d.scale}), "
            f"{d.steady_data_wait_share:.0%} for batches not yet built, with {workers} workers (the sizing "
            f"rule's {needed}): under {WORTH:.0%}, within what a batch's hand-over from a worker costs"))
    if not out and input_bound:
        out.append(Recommendation(
            "unexplained", "the loop waits, and no knob the lab models explains it: read the timeline "
            "(the loop's own work between batches, a slow first epoch)",
            f"after each worker's first batch the loop waited {d.steady_data_wait_share:.0%} for batches not "
            f"yet built ({input_scale(d.steady_data_wait_share)}) with {workers} workers (the sizing rule "
            f"asks for {needed})"))
    if not out:
        # The workers keep up. A wait left over is the loop's own work on batches already built (m:
        # receiving each from a worker, pinning): no worker knob shortens it, and "the loader keeps
        # up" would read as if the loop did not wait (a dict loader can wait 57 %, only 2 % of it for
        # batches not yet built).
        taking_in = d.steady_wait_share - d.steady_data_wait_share
        advice = ("the loader keeps up: make the step faster, not the data" if taking_in < WORTH else
                  "the workers build each batch in time, and the loop's wait is its own work taking the "
                  f"batches in (m, {_ms(m)} per batch): no worker knob shortens it; make m smaller (fewer "
                  "and larger tensors per batch, uint8: notebooks 19, 11 and 14) or take it off the loop (a "
                  "device prefetcher: notebook 07), and make the step faster")
        out.append(Recommendation(
            "none", advice,
            f"after each worker's first batch the loop waited {d.steady_wait_share:.0%} ({d.scale}), "
            f"{d.steady_data_wait_share:.0%} for batches not yet built; start-up took {startup_share:.0%} of "
            "the run"))
    return out
