"""Diagnose your own loader (notebook 16): ``helpers.diagnose(loader, step)``.

It records the loader with the lab's instrument (:func:`helpers.record`), then replays the
same steps on batches it kept from that run (the cache replay: data instantly there — the
speed limit of the loop), and reports:

- the **headspace**: how much faster the loop would run if data were free, and the share of
  time the loop **waited** for data on the TF profiler's scale (under 5 % of step time: not
  input-bound; 5–20 %: moderately; over 20 %: highly input-bound);
- **where the time goes** per batch: worker start-up, fetch (mean and median; of it, the
  ``collate_fn``, timed in the worker where it runs, and the CPU the fetch used — computing
  or waiting), the main process's own share m (receive, pin, the loop's hand-over), the copy to
  the device, the step;
- **recommendations** derived from the lab's models, each with the number that triggered it:
  workers from the sizing rule x = ⌈n / (y + m)⌉ with the *mean* fetch (notebook 02), capped by
  the effective cores, less what other processes keep busy, when the fetch computes (04, 14);
  ``in_order=False`` when slow batches land on one worker and a deeper prefetch when they are
  spread (03, 09); persistent workers when start-up is a large share (05); pinning when the copy
  is (06); a cheaper collate when busy workers spend their time there (08); the main process's
  share when it, not the workers, bounds the step (11). More workers only when the model saves at
  least ``WORTH`` of a step; an ``IterableDataset`` is told the sharding more workers need.

``verify=True`` then follows the advice: it applies the first recommendation that is a
``DataLoader`` setting to a copy of the loader, runs again, reports the measured time per step
beside the prediction (and the noise of the measurement), then the next one.

One picture (:meth:`Diagnosis.plot`), one table (:meth:`Diagnosis.table`), one Perfetto trace
(:meth:`Diagnosis.trace`). From a terminal, for a script outside Jupyter::

    python -m helpers.diagnose my_module:make_loader --steps 200 --step-ms 30 --verify

:func:`profile` records the same run under ``torch.profiler`` and writes one trace with the
profiler's ``enumerate(DataLoader)#…__next__`` spans beside the lab's waits.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from . import torch_internals
from .cores import cpu_limits
from .recorder import record
from .settings import HAS_IN_ORDER
from .theory import main_shares, measured_main_s, recommend_num_workers
from .timeline import Timeline

#: The TF profiler's scale: the share of step time spent waiting for input, and its label.
SCALE = ((0.05, "not input-bound"), (0.20, "moderately input-bound"), (math.inf, "highly input-bound"))
#: The loop waiting at least this share (after each epoch's first batch) gets data advice.
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
    #: hand) or "run" (the whole run's wall time per step, start-up included)
    measure: str = "steady"


@dataclass
class Followed:
    """One recommendation followed by :func:`diagnose` (``verify=True``)."""

    recommendation: Recommendation
    before_s: float  #: time per step before (``recommendation.measure``)
    after_s: float  #: ...and after the change, measured
    noise_s: float  #: the measurement's noise: twice the standard error of the two means, added
    after: Diagnosis  #: the diagnosis of the changed loader

    @property
    def predicted_s(self) -> float:
        return self.recommendation.predicted_s

    @property
    def tolerance_s(self) -> float:
        """How far the measurement may land from the prediction: 15 % of it, or the noise."""
        return max(0.15 * self.predicted_s, self.noise_s)

    @property
    def as_predicted(self) -> bool:
        return abs(self.after_s - self.predicted_s) <= self.tolerance_s

    def describe(self) -> str:
        r = self.recommendation
        verdict = "as predicted" if self.as_predicted else "NOT as predicted"
        return (f"{r.knob}: {self.before_s * 1e3:.1f} → {self.after_s * 1e3:.1f} ms per step "
                f"({self.before_s / self.after_s:.2f}×); predicted {self.predicted_s * 1e3:.1f} ms "
                f"± {self.tolerance_s * 1e3:.1f}: {verdict}")


@dataclass(repr=False)
class Diagnosis:
    """What :func:`diagnose` measured; shows as a table in a notebook."""

    timeline: Timeline
    #: the loop's time per step on cached batches (the speed limit); None when no step was given
    replay_step_s: float | None
    recommendations: list[Recommendation] = field(default_factory=list)
    followed: list[Followed] = field(default_factory=list)  #: with ``verify=True``
    cores: str = ""  #: the effective cores and where they came from (:func:`helpers.cpu_limits`)
    #: the main process's time to take a batch in, measured alone after the run (s): unpickling a
    #: kept batch as it arrived from a worker, with no worker competing for a core. None: 0 workers
    receive_alone_s: float | None = None
    #: cores of the affinity mask other processes kept busy just before the run (a browser, another
    #: notebook, a classmate on a shared server); None when it could not be read
    others_busy: float | None = None

    def free_cores(self, limits: Any = None) -> int:
        """Whole cores the workers can compute on: the effective cores (quota included), less
        what other processes kept busy, rounded to the nearest core, at least 1."""
        limits = cpu_limits() if limits is None else limits
        if self.others_busy is None:
            return limits.whole
        return max(1, min(limits.whole, math.floor(limits.affinity - self.others_busy + 0.5)))

    # -- what the run measured ------------------------------------------------------
    @property
    def steps(self) -> int:
        return len(self.timeline.batches)

    @property
    def step_s(self) -> float:
        """Wall time per step of the real run, start-up included."""
        return self.timeline.wall_s / max(self.steps, 1)

    @property
    def steady_step_s(self) -> float:
        """Time per step once each epoch's first batch was in hand (start-up left out): the mean
        interval between steps, which throughput follows."""
        later = self.steps - len(self.timeline.epochs)
        return (self.timeline.wall_s - self.startup_s) / later if later > 0 else self.step_s

    @property
    def headspace(self) -> float:
        """How many times faster the loop would run if data were there instantly."""
        if not self.replay_step_s:
            return float("nan")
        return self.step_s / self.replay_step_s

    @property
    def wait_share(self) -> float:
        return self.timeline.wait_s() / self.timeline.wall_s if self.timeline.wall_s > 0 else 0.0

    @property
    def steady_wait_share(self) -> float:
        """The loop's waiting once each epoch's first batch was in hand, as a share of that
        time (start-up is judged on its own)."""
        firsts = {e.epoch: e.first_ready for e in self.timeline.epochs}
        waits = sum(b.wait_s for b in self.timeline.batches if b.ready != firsts.get(b.epoch))
        rest = self.timeline.wall_s - self.startup_s
        return waits / rest if rest > 0 else 0.0

    @property
    def steady_data_wait_share(self) -> float:
        """The part of :attr:`steady_wait_share` the loop spent waiting for a batch that was not
        yet ready to take (a worker still building it): what more workers, in order or a deeper
        prefetch can shorten. The rest is m, the main process taking the batch in."""
        firsts = {e.epoch: e.first_ready for e in self.timeline.epochs}
        split = zip(self.timeline.batches, main_shares(self.timeline), strict=True)
        waits = sum(data for b, (data, _) in split if b.ready != firsts.get(b.epoch))
        rest = self.timeline.wall_s - self.startup_s
        return waits / rest if rest > 0 else 0.0

    @property
    def scale(self) -> str:
        """The TF profiler's label for :attr:`steady_wait_share`."""
        return input_scale(self.steady_wait_share)

    @property
    def startup_s(self) -> float:
        """Time from ``iter(loader)`` to each epoch's first batch, summed over the epochs."""
        return sum(e.first_batch_s or 0.0 for e in self.timeline.epochs)

    @property
    def fetch_mean_s(self) -> float:
        return statistics.fmean(b.fetch_s for b in self.timeline.batches)

    @property
    def fetch_median_s(self) -> float:
        return statistics.median(b.fetch_s for b in self.timeline.batches)

    @property
    def cpu_share(self) -> float | None:
        """The median share of a fetch's time its process spent on the CPU: near 1 when loading
        computes (decoding, augmenting), near 0 when it waits (disk, network). None: unknown."""
        shares = [b.fetch_cpu_s / b.fetch_s for b in self.timeline.batches
                  if b.fetch_cpu_s is not None and b.fetch_s > 0]
        return statistics.median(shares) if shares else None

    @property
    def collate_s(self) -> float | None:
        """The median time of ``collate_fn`` per batch, where it ran (a worker)."""
        values = [b.collate_s for b in self.timeline.batches if b.collate_s is not None]
        return statistics.median(values) if values else None

    @property
    def main_s(self) -> float:
        """m: the main process's own time per batch once the batch was its to take
        (:func:`helpers.theory.measured_main_s`)."""
        return measured_main_s(self.timeline)

    def breakdown(self) -> dict[str, float]:
        """Seconds per batch of each part (medians; start-up per epoch; the fetch's mean too)."""
        b = self.timeline.batches
        med = statistics.median
        parts = {
            "start-up (per epoch)": self.startup_s / max(len(self.timeline.epochs), 1),
            "fetch in a worker (dataset + collate), mean": self.fetch_mean_s,
            "fetch in a worker (dataset + collate), median": self.fetch_median_s,
        }
        if self.collate_s is not None:
            parts["...of it collate_fn (timed in the worker)"] = self.collate_s
        parts.update({
            "receive (unpickle in the main process)": med(x.receive_s for x in b),
            **({} if self.receive_alone_s is None else
               {("...the same alone, after the run" if any(x.worker >= 0 for x in b) else
                 "...what receiving it from a worker costs, measured alone"): self.receive_alone_s}),
            "main process per batch (m)": self.main_s,
            "copy to the device": med(x.copy_s for x in b),
            "step": med(x.step_s for x in b),
            "loop waiting": med(x.wait_s for x in b),
        })
        pins = [x.pin_end - x.pin_start for x in b if x.pin_start is not None and x.pin_end is not None]
        if pins:
            parts["pin (pin_memory thread)"] = med(pins)
        return parts

    # -- views ----------------------------------------------------------------------------
    def rows(self) -> list[list[str]]:
        replay = "no step given" if self.replay_step_s is None else f"{self.replay_step_s * 1e3:.1f} ms"
        rows = [
            ["steps recorded", f"{self.steps}"],
            ["time per step (real run)", f"{self.step_s * 1e3:.1f} ms"],
            ["time per step on cached batches (speed limit)", replay],
            ["headspace", "—" if self.replay_step_s is None else f"{self.headspace:.2f}×"],
            ["loop waiting for data", f"{self.wait_share:.0%} of the run"],
            ["...after each epoch's first batch", f"{self.steady_wait_share:.0%}: {self.scale} "
             "(TF profiler's scale: under 5 % / 5–20 % / over 20 %)"],
            ["...of it waiting for a batch not yet built",
             f"{self.steady_data_wait_share:.0%} (the rest: the main process taking batches in)"],
        ]
        if self.cpu_share is not None:
            rows.append(["CPU used by a fetch", f"{self.cpu_share:.0%} of its time "
                         f"({'computing' if self.cpu_share >= CPU_BOUND else 'waiting'})"])
        if self.cores:
            load = ("" if self.others_busy is None else
                    f"; other processes kept {self.others_busy:.1f} of them busy just before the run"
                    + (f": about {self.free_cores()} free for computing workers"
                       if self.free_cores() < cpu_limits().whole else ""))
            rows.append(["cores", self.cores + load])
        rows += [[name, f"{s * 1e3:.2f} ms"] for name, s in self.breakdown().items()]
        rows += [[f"→ {r.knob}", f"{r.advice} ({r.because})"] for r in self.recommendations]
        rows += [["followed", f.describe()] for f in self.followed]
        return rows

    def table(self):
        from .report import table

        return table(["", "measured"], self.rows(), caption=self.timeline.describe())

    def __str__(self) -> str:
        lines = [f"{self.timeline.describe()}: {self.steps} steps"]
        lines += [f"  {name}: {value}" for name, value in self.rows() if not name.startswith("→")
                  and name != "followed"]
        lines += ["recommendations:"] + [
            f"  → {r.knob}: {r.advice}\n      because {r.because}" for r in self.recommendations
        ]
        if self.followed:
            lines += ["followed (verify):"] + [f"  {f.describe()}" for f in self.followed]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Diagnosis: headspace {self.headspace:.2f}×, recommendations {self.knobs()}>"

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def plot(self, title: str | None = None):
        """The run's timeline with the headspace and the recommendations in its title; with
        ``verify=True``, the timelines before and after each followed recommendation."""
        advice = "; ".join(r.knob for r in self.recommendations) or "none"
        headline = title or (f"headspace {self.headspace:.2f}× · waiting {self.steady_wait_share:.0%} "
                             f"({self.scale}) · recommendations: {advice}")
        if self.followed:
            from .plots import plot_timelines

            titles = [f"before: {headline}"] + [
                f"after {f.recommendation.knob} ({_describe_change(f.recommendation.change)}): "
                f"{f.before_s * 1e3:.1f} → {f.after_s * 1e3:.1f} ms per step, "
                f"predicted {f.predicted_s * 1e3:.1f}"
                for f in self.followed]
            return plot_timelines([self.timeline] + [f.after.timeline for f in self.followed], titles=titles)
        from .plots import plot_timeline

        return plot_timeline(self.timeline, title=headline)

    def trace(self, path: str | os.PathLike) -> Path:
        """A Perfetto / chrome://tracing trace of the run."""
        return self.timeline.to_chrome_trace(path)

    def knobs(self) -> list[str]:
        return [r.knob for r in self.recommendations]


def _shard_caveat(loader: DataLoader, workers: int) -> str:
    """For an IterableDataset, more than one worker repeats the stream unless it shards itself."""
    if workers < 2 or not isinstance(loader.dataset, IterableDataset):
        return ""
    return ("; your IterableDataset must shard itself by torch.utils.data.get_worker_info() (id, "
            "num_workers), or each worker yields the whole stream: every sample num_workers times")


def _others_busy_cores(window_s: float = 0.25) -> float | None:
    """Cores of this process's affinity mask that other processes kept busy during ``window_s``
    (this process sleeps meanwhile; psutil's per-CPU times). None when they cannot be read."""
    try:
        import psutil

        mask = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        before = psutil.cpu_times(percpu=True)
        time.sleep(window_s)
        after = psutil.cpu_times(percpu=True)
    except Exception:  # noqa: BLE001 - a missing psutil or /proc: the load is unknown, not an error
        return None
    busy = 0.0
    for cpu in mask if mask is not None else range(len(after)):
        if cpu >= len(after) or cpu >= len(before):
            continue
        total = sum(after[cpu]) - sum(before[cpu])
        idle = (after[cpu].idle - before[cpu].idle) + (getattr(after[cpu], "iowait", 0)
                                                       - getattr(before[cpu], "iowait", 0))
        busy += max(0.0, 1 - idle / total) if total > 0 else 0.0
    return busy


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
    cpu_bound = d.cpu_share is not None and d.cpu_share >= CPU_BOUND
    rule = (f"a batch takes {_ms(n)} to fetch on average (median {_ms(d.fetch_median_s)}), the loop "
            f"{_ms(y)} per step and {_ms(m)} of its own per batch: x = ⌈n / (y + m)⌉ = {needed}")
    # The workers' own pace: how long they need per batch between them, against the loop's pace. A
    # cheaper fetch (collate) or sample only helps when the workers are what the loop waits for.
    workers_pace = n / max(workers, 1)
    workers_busy = workers_pace >= BUSY_WORKERS * loop_s
    if input_bound and workers_busy and d.collate_s is not None and d.collate_s >= COLLATE_SHARE * n:
        out.append(Recommendation(
            "collate_fn", "a cheaper collate_fn (or build batches in __getitems__: notebook 08)",
            f"collate_fn takes {_ms(d.collate_s)} of the {_ms(n)} a worker spends per batch",
            None, max((n - d.collate_s) / max(workers, 1), loop_s)))
    waiting = d.steady_wait_share >= INPUT_BOUND
    # More workers only when the model's gain is worth a change (beats the run's own noise).
    more_s = max(n / (needed if not cpu_bound else max(min(needed, cores), 1)), loop_s)
    worth = more_s <= (1 - WORTH) * d.steady_step_s
    # Filling the cores: as many computing workers as free cores, and busy (CPU used per second of run).
    workers_cpu = (d.cpu_share or 0.0) * n / d.steady_step_s if d.steady_step_s > 0 else 0.0
    saturated = cpu_bound and workers >= cores and workers_cpu >= BUSY_WORKERS * cores
    # The main process's own share, without workers competing for its core: when the cores are
    # full, m swells with waiting for one, and only the share measured alone says what is its own.
    own_m = m if d.receive_alone_s is None else min(m, d.receive_alone_s + max(m - parts[
        "receive (unpickle in the main process)"], 0.0))
    main_bound = waiting and own_m >= 0.001 and own_m >= MAIN_SHARE * (y + own_m)
    if main_bound:
        out.append(Recommendation(
            "main_process", "make the main process's share per batch smaller: fewer and smaller tensors per "
            "batch (uint8, one stacked tensor), normalise on the device (notebooks 11, 14)",
            f"the main process spends {_ms(own_m)} per batch taking it in (measured alone), "
            f"{own_m / (y + own_m):.0%} of the loop's {_ms(y + own_m)} per step: no number of workers makes "
            "a step shorter than y + m"))
    if waiting and saturated and not main_bound:
        # The workers' computing fills the cores; the main process waits for one too (its m swells).
        out.append(Recommendation(
            "sample_cost", "make each sample cheaper to load (decode less or smaller, resize earlier, "
            "augment on the GPU: notebooks 04 and 14); more workers cannot help here",
            f"the fetch computes (the CPU {d.cpu_share:.0%} of its time) and the {workers} workers already "
            f"fill the {limits.describe()}{busy}: the main process, short of a core, takes {_ms(m)} to "
            f"take each batch in ({_ms(own_m)} alone); the sizing rule would ask for {needed}"))
    elif input_bound and workers < needed and not main_bound and not worth:
        out.append(Recommendation(
            "none", "the loader nearly keeps up: more workers would gain little; make the step faster",
            f"{rule}, which predicts {_ms(more_s)} per step against {_ms(d.steady_step_s)} now: under "
            f"{WORTH:.0%} saved"))
    elif input_bound and workers < needed and not main_bound:
        if not cpu_bound:
            cpu = "" if d.cpu_share is None else f" (the fetch used the CPU {d.cpu_share:.0%} of its time)"
            beyond = (f"; more workers than the {cores} effective cores is fine: the fetches wait rather "
                      "than compute" + cpu) if needed > cores else cpu
            out.append(Recommendation("num_workers", f"num_workers={needed} (now {workers})"
                                      + _shard_caveat(loader, needed), rule + beyond,
                                      {"num_workers": needed}, max(n / needed, loop_s)))
        else:
            target = min(needed, cores)
            past = (f"; the rule asks for {needed}, but past the cores make each sample cheaper to load "
                    "(notebooks 04, 14)") if needed > cores else ""
            out.append(Recommendation(
                "num_workers", f"num_workers={target} (now {workers})" + _shard_caveat(loader, target),
                f"{rule}; the fetch computes (the CPU {d.cpu_share:.0%} of its time), so workers beyond the "
                f"{limits.describe()}{busy} add nothing{past}",
                {"num_workers": target}, max(n / target, loop_s)))
    elif input_bound and workers > 0 and len(tl.batches) >= 10 and not main_bound:
        median, p90, slow = _slow_batches(tl)
        if median > 0 and p90 / median >= SPREAD and slow:
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
            else:
                depth = math.ceil((loader.prefetch_factor or 2) * p90 / median)
                out.append(Recommendation(
                    "prefetch_factor", f"prefetch_factor={depth} (now {loader.prefetch_factor}): start the "
                    "slow fetches earlier", f"{spread}, spread over {len(slow)} workers; on average the "
                    f"workers keep up ({workers} ≥ the rule's {needed})",
                    {"prefetch_factor": depth}, max(n / workers, loop_s)))
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
            f"after each epoch's first batch the loop waited {d.steady_wait_share:.0%} ({d.scale}), "
            f"{d.steady_data_wait_share:.0%} for batches not yet built, with {workers} workers (the sizing "
            f"rule's {needed}): under {WORTH:.0%}, within what a batch's hand-over from a worker costs"))
    if not out and input_bound:
        out.append(Recommendation(
            "unexplained", "the loop waits, and no knob the lab models explains it: read the timeline "
            "(the loop's own work between batches, garbage collection, a slow first epoch)",
            f"after each epoch's first batch the loop waited {d.steady_data_wait_share:.0%} for batches not "
            f"yet built ({d.scale}) with {workers} workers (the sizing rule asks for {needed})"))
    if not out:
        out.append(Recommendation(
            "none", "the loader keeps up: make the step faster, not the data",
            f"after each epoch's first batch the loop waited {d.steady_wait_share:.0%} ({d.scale}), "
            f"{d.steady_data_wait_share:.0%} for batches not yet built; start-up took {startup_share:.0%} of "
            "the run"))
    return out


# -- following the advice ---------------------------------------------------------------------
def with_changes(loader: DataLoader, **changes: Any) -> DataLoader:
    """A new ``DataLoader`` like ``loader`` (the same dataset, sampler or batch sampler, collate_fn,
    worker_init_fn, generator, start method, …) with some arguments changed. Keeps what PyTorch
    requires consistent: ``prefetch_factor`` back to its default and ``persistent_workers`` off
    with 0 workers."""
    params = inspect.signature(DataLoader).parameters
    unknown = set(changes) - set(params)
    if unknown:
        raise TypeError(f"DataLoader has no argument {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers, "collate_fn": loader.collate_fn, "pin_memory": loader.pin_memory,
        "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor, "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
    }
    if "in_order" in params:
        kwargs["in_order"] = getattr(loader, "in_order", True)
    if isinstance(loader.dataset, IterableDataset):
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is None and loader.batch_sampler is not None:  # the user's batch_sampler
        kwargs["batch_sampler"] = loader.batch_sampler
    else:
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last, sampler=loader.sampler)
    kwargs.update(changes)
    if kwargs["num_workers"] == 0:
        kwargs.update(prefetch_factor=None, persistent_workers=False, multiprocessing_context=None)
    elif "num_workers" in changes and loader.num_workers == 0 and "prefetch_factor" not in changes:
        kwargs["prefetch_factor"] = None  # the default (2) for the new workers
    return DataLoader(loader.dataset, **kwargs)


def _mean_and_noise(d: Diagnosis, measure: str) -> tuple[float, float]:
    """Time per step (steady or whole run) and twice its standard error (s). A whole run's time
    varies most with its start-ups: one start-up's spread (the epochs' first batches) per step."""
    if measure == "run":
        startups = [e.first_batch_s for e in d.timeline.epochs if e.first_batch_s is not None]
        spread = statistics.stdev(startups) if len(startups) >= 2 else 0.0
        return d.step_s, 2 * spread / max(d.steps, 1)
    firsts = {e.epoch: e.first_ready for e in d.timeline.epochs}
    steady = sorted((b for b in d.timeline.batches if b.ready != firsts.get(b.epoch)),
                    key=lambda b: b.step_end)
    gaps = [later.step_end - earlier.step_end for earlier, later in zip(steady, steady[1:], strict=False)
            if later.epoch == earlier.epoch]
    if len(gaps) < 3:
        return d.steady_step_s, 0.0
    return d.steady_step_s, 2 * statistics.stdev(gaps) / math.sqrt(len(gaps))


# -- the diagnosis ---------------------------------------------------------------------------------
_SELF_CHECKED = False


def diagnose(
    loader: DataLoader,
    step: Callable[[Any], Any] | None = None,
    *,
    steps: int = 200,
    device: Any = None,
    replay: int = 32,
    verify: bool | int = False,
    progress: bool | str = True,
) -> Diagnosis:
    """Diagnose ``loader`` (any ``DataLoader``) run with ``step`` for ``steps`` batches (over as
    many epochs as that takes); see the module docstring. ``step`` runs again in the replay, on
    up to ``replay`` batches kept from the run (mind a step with side effects: a real optimiser
    step would update the model again); a CUDA step is waited for before each clock reading.
    Without a step the loader is timed alone and no worker count is derived. ``verify=True``
    (or a number of rounds, default 2) follows the recommendations that are loader settings,
    one at a time, and measures each (:attr:`Diagnosis.followed`)."""
    global _SELF_CHECKED
    if not isinstance(loader, DataLoader):
        raise TypeError(f"diagnose() needs a torch.utils.data.DataLoader, got {type(loader).__name__}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 2:
        raise ValueError(f"steps must be an integer of at least 2, got {steps!r}")
    if step is not None and not callable(step):
        raise TypeError(f"step must be a function that takes a batch, got {type(step).__name__}")
    if not _SELF_CHECKED:  # the instrument's private torch parts, against this torch (names what moved)
        torch_internals.self_check()
        _SELF_CHECKED = True
    try:
        per_epoch = len(loader)
    except TypeError:
        per_epoch = steps
    if per_epoch == 0:
        raise ValueError("the loader has no batches (len(loader) is 0): its dataset is empty, or "
                         "drop_last=True with fewer samples than batch_size")
    kept: list[Any] = []

    def keep_and_step(batch: Any) -> Any:
        if len(kept) < replay:
            kept.append(batch)
        return None if step is None else step(batch)

    epochs = max(1, math.ceil(steps / max(per_epoch, 1)))
    label = "diagnosing" if progress is True else progress
    others_busy = _others_busy_cores()  # before any worker of ours starts
    timeline = record(loader, keep_and_step, epochs=epochs, max_batches=steps, device=device, progress=label)
    if len(timeline.batches) < 2:
        raise ValueError(f"the loader gave {len(timeline.batches)} batch(es) in {epochs} epoch(s): a "
                         "diagnosis needs at least 2 (is the dataset empty, or an iterable that yields "
                         "nothing?)")
    d = Diagnosis(timeline, _replay(step, kept, steps, device) if step is not None else None,
                  cores=cpu_limits().describe(),
                  receive_alone_s=_receive_alone(kept), others_busy=others_busy)
    d.recommendations = recommend(d, loader, device=device)
    rounds = 2 if verify is True else int(verify)
    current = (loader, d)
    for _ in range(rounds):
        following = next((r for r in current[1].recommendations
                          if r.change is not None and r.predicted_s is not None), None)
        if following is None:
            break
        changed = with_changes(current[0], **following.change)
        after = diagnose(changed, step, steps=steps, device=device, replay=replay, verify=False,
                         progress=f"after {_describe_change(following.change)}" if progress else False)
        before_s, before_noise = _mean_and_noise(current[1], following.measure)
        after_s, after_noise = _mean_and_noise(after, following.measure)
        # a run's prediction carries one start-up of the run before, its measurement one of its
        # own: two draws of the spread measured before (the run after has one start-up, no spread)
        noise = (math.sqrt(2) * before_noise if following.measure == "run"
                 else math.hypot(before_noise, after_noise))
        d.followed.append(Followed(following, before_s, after_s, noise, after))
        current = (changed, after)
    return d


def _receive_alone(kept: list[Any], count: int = 8) -> float | None:
    """The median time to unpickle a kept batch as the main process does when it arrives from a
    worker (its tensors rebuilt from shared memory, handles and all), with no worker running."""
    from multiprocessing import resource_sharer
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions, as in the loader)

    times = []
    try:
        for batch in kept[:count]:
            data = ForkingPickler.dumps(batch)
            start = time.perf_counter()
            ForkingPickler.loads(data)
            times.append(time.perf_counter() - start)
    except Exception:  # noqa: BLE001 - a batch that does not travel so here: no number
        return None
    finally:
        resource_sharer.stop(timeout=5)  # it lent this process's descriptors to itself: done
    return statistics.median(times) if times else None


def _replay(step: Callable[[Any], Any], kept: list[Any], steps: int, device: Any) -> float:
    """The loop's time per step on batches already in hand (copied to the device as in the run)."""
    from .transfer import synchronize, to_device, wait_for_step

    times = []
    for i in range(min(steps, max(len(kept) * 2, 8))):
        batch = kept[i % len(kept)]
        start = time.perf_counter()
        if device is not None:
            batch = to_device(batch, device)
            synchronize(device)
        step(batch)
        wait_for_step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- torch.profiler interop ----------------------------------------------------------------------
def profile(
    loader: DataLoader,
    step: Callable[[Any], Any] | None = None,
    *,
    steps: int = 50,
    path: str | os.PathLike = "dataloader_trace.json",
) -> tuple[Timeline, list[dict], Path]:
    """Record ``loader`` under ``torch.profiler`` and write one trace with the profiler's events
    and the lab's (shifted onto the profiler's clock by the first DataLoader span). Returns the
    timeline, the profiler's DataLoader spans (``enumerate(DataLoader)#…__next__``) and the path."""
    import tempfile

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        timeline = record(loader, step, max_batches=steps, progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "profiler.json"
        prof.export_chrome_trace(str(raw))
        profiler_trace = json.loads(raw.read_text())
        ours = Path(tmp) / "lab.json"
        timeline.to_chrome_trace(ours)
        lab_trace = json.loads(ours.read_text())
    events = profiler_trace["traceEvents"] if isinstance(profiler_trace, dict) else profiler_trace
    spans = sorted(
        (
            e
            for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("enumerate(DataLoader)#")
        ),
        key=lambda e: e["ts"],
    )
    waits = sorted(
        (e for e in lab_trace["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("wait ")),
        key=lambda e: e["ts"],
    )
    offset = spans[0]["ts"] - waits[0]["ts"] if spans and waits else 0.0
    for e in lab_trace["traceEvents"]:
        if "ts" in e:
            e["ts"] += offset
        e["pid"] = "DataLoader Lab"
    merged = {"traceEvents": events + lab_trace["traceEvents"], "displayTimeUnit": "ms"}
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged))
    return timeline, spans, out


def profiler_agreement(timeline: Timeline, spans: list[dict]) -> list[float]:
    """Per batch, the profiler's ``__next__`` span minus the lab's wait for it (seconds)."""
    waits = [b.wait_s for b in sorted(timeline.batches, key=lambda b: b.wait_start)]
    return [s["dur"] / 1e6 - w for s, w in zip(spans, waits, strict=False)]


# -- command line ---------------------------------------------------------------------------------
def load_target(target: str) -> tuple[DataLoader, Callable[[Any], Any] | None]:
    """``module:function`` → ``(loader, step or None)`` from what the function returns (a
    DataLoader, or ``(DataLoader, step)``). Clear errors for each way it can be wrong."""
    if target.count(":") != 1 or not all(target.split(":")):
        raise SystemExit(f"expected module:function, e.g. my_module:make_loader — got {target!r}")
    module_name, function_name = target.split(":")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.split(".")[0] == error.name.split(".")[0]:
            raise SystemExit(
                f"no module named {module_name!r} here: run from the folder that holds "
                f"{module_name.replace('.', '/')}.py, or add that folder to PYTHONPATH") from None
        raise SystemExit(
            f"{module_name} was found, but importing it failed: {error}. Install what it needs into this "
            f"Python ({sys.executable}), the one that runs the diagnosis") from None
    except Exception as error:  # noqa: BLE001 - the user's module raised while importing
        raise SystemExit(f"importing {module_name} raised {type(error).__name__}: {error}") from None
    function = getattr(module, function_name, None)
    if function is None or not callable(function):
        raise SystemExit(
            f"module {module_name!r} has no function {function_name!r} "
            f"(it has: {', '.join(n for n in dir(module) if not n.startswith('_')) or 'nothing'})"
        )
    made = function()
    if isinstance(made, DataLoader):
        return made, None
    if (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], DataLoader)
            and (made[1] is None or callable(made[1]))):
        return made
    shape = (f"a tuple of {len(made)}: ({', '.join(type(x).__name__ for x in made)})"
             if isinstance(made, tuple) else type(made).__name__)
    raise SystemExit(f"{target}() returned {shape}, not a torch.utils.data.DataLoader: return the loader, "
                     "or (loader, step) where step is a function that takes a batch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.diagnose",
        description="Diagnose a DataLoader: headspace, waiting, where the time goes, recommendations.",
    )
    parser.add_argument("target", help="module:function returning a DataLoader, or (DataLoader, step)")
    parser.add_argument("--steps", type=int, default=200, help="batches to record (default 200)")
    parser.add_argument(
        "--step-ms", type=float, default=None,
        help="model the training step as this many ms of waiting (when the function gives none)")
    parser.add_argument("--device", default=None,
                        help="copy each batch to this device before the step, e.g. cuda (advises pinning)")
    parser.add_argument("--verify", action="store_true",
                        help="follow the recommendations that are loader settings, and measure each")
    parser.add_argument("--trace", default="dataloader_diagnosis.json",
                        help="where to write the Perfetto trace")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps must be at least 2, got {args.steps}")
    if args.step_ms is not None and not (args.step_ms > 0 and math.isfinite(args.step_ms)):
        parser.error(f"--step-ms is the step's time in milliseconds, above 0 (e.g. 30), got {args.step_ms}")
    device = None
    if args.device is not None:
        import torch

        try:
            device = torch.device(args.device)
        except RuntimeError as error:
            parser.error(f"--device {args.device!r} is not a device torch knows ({error}): try cpu or cuda")
        if device.type == "cuda" and not torch.cuda.is_available():
            parser.error("--device cuda, but this torch sees no CUDA GPU "
                         "(torch.cuda.is_available() is False)")
    loader, step = load_target(args.target)
    if step is not None and args.step_ms is not None:
        parser.error(f"{args.target}() gave a step already: drop --step-ms, or return only the loader")
    if step is None and args.step_ms is not None:
        from .models import ModelledStep

        step = ModelledStep(args.step_ms / 1e3)
    try:
        result = diagnose(loader, step, steps=args.steps, device=device, verify=args.verify)
    except (ValueError, TypeError) as error:  # the diagnosis's own clear errors
        raise SystemExit(f"{type(error).__name__}: {error}") from None
    except torch_internals.TorchInternalsChanged as error:  # a learner's own torch, newer or older
        raise SystemExit(
            f"the diagnosis cannot time this torch: {error}\nIn your own environment: run it with a "
            "torch the lab was tried with (README, 'Diagnose your own loader, in your own environment': "
            f"2.10 to {torch_internals.PINNED_TORCH}), or point the lab's own environment at your module "
            "(.venv/bin/python -m helpers.diagnose, run from your project's folder).") from None
    print(result)
    print(f"trace: {result.trace(args.trace)} (open it in https://ui.perfetto.dev)")
    return 0


# -- three loaders with a planted problem (notebook 16) -------------------------------------------
class SlowCollate:
    """``default_collate`` plus ``cpu_s`` of CPU work per batch (a collate that decodes, pads
    or augments in Python)."""

    def __init__(self, cpu_s: float):
        self.cpu_s = cpu_s

    def __call__(self, samples: list[Any]) -> Any:
        from torch.utils.data import default_collate

        from .datasets import burn_cpu

        burn_cpu(self.cpu_s)
        return default_collate(samples)


#: The mystery loaders' planted causes, for the tests (the notebook does not print them first).
PLANTED = {"A": "num_workers", "B": "collate_fn", "C": "persistent_workers"}


def mystery_loader(name: str, *, smoke: bool | None = None) -> tuple[DataLoader, Callable[[Any], Any], int]:
    """One of three loaders with a planted problem: ``(loader, step, steps to diagnose)``."""
    from .config import is_smoke
    from .datasets import WorkDataset
    from .models import ModelledStep

    smoke = is_smoke() if smoke is None else smoke
    if name == "A":
        loader = DataLoader(WorkDataset(1024, item_wait_s=0.004), batch_size=16, shuffle=True, num_workers=1)
        return loader, ModelledStep(0.02), 24 if smoke else 48
    if name == "B":
        loader = DataLoader(
            WorkDataset(1024, item_wait_s=0.0005),
            batch_size=16,
            shuffle=True,
            num_workers=2,
            collate_fn=SlowCollate(0.03),
        )
        return loader, ModelledStep(0.01), 24 if smoke else 48
    if name == "C":
        loader = DataLoader(
            WorkDataset(64, item_wait_s=0.001),
            batch_size=16,
            shuffle=True,
            num_workers=2,
            multiprocessing_context="spawn",
            persistent_workers=False,
        )
        return loader, ModelledStep(0.01), 12 if smoke else 20
    raise ValueError(f"mystery loaders are 'A', 'B' and 'C', got {name!r}")
