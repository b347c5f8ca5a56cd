"""What a diagnosis reports: :class:`Diagnosis` (headroom, waiting, where the time goes, the
recommendations; its table and trace) and :class:`Followed` (a recommendation applied and measured).
``Diagnosis.plot`` draws through :data:`draw`, which :mod:`helpers` connects to :mod:`helpers.plots`
(the instrument imports no plots)."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...cores import cpu_limits
from ..theory import main_shares, measured_main_s
from ..timeline import Timeline
from .advice import Recommendation
from .profiled import SampleProfile
from .thresholds import CPU_BOUND, input_scale

#: Draws a Diagnosis, ``draw(diagnosis, title) -> Axes``: set by :mod:`helpers` (its ``__init__``) to
#: :func:`helpers.plots.plot_diagnosis`, loaded on first use. The instrument imports no plots.
draw: Callable[[Diagnosis, str | None], Any] | None = None
#: Draws a Diagnosis's profile, ``draw_profile(diagnosis) -> Axes``: :func:`helpers.plots.plot_profile`.
draw_profile: Callable[[Diagnosis], Any] | None = None


def ramp_share(timeline: Timeline) -> float | None:
    """The share of a run's steady time (after each epoch's first batch) in which some of its
    workers were still starting. Near 0 under fork; under spawn or forkserver each new worker
    imports torch first (seconds on a slow machine), and a short epoch can end before the last is
    ready: the loop then waits for workers that are not there yet, which no loader setting of the
    steady state explains. None without a first batch."""
    ramp = steady = 0.0
    for epoch in timeline.epochs:
        if epoch.first_ready is None:
            continue
        steady += epoch.end - epoch.first_ready
        if epoch.worker_ready:
            last = min(max(epoch.worker_ready.values()), epoch.end)
            ramp += max(0.0, last - epoch.first_ready)
    return ramp / steady if steady > 0 else None


@dataclass
class Followed:
    """One recommendation followed by :func:`diagnose` (``verify=True``)."""

    recommendation: Recommendation
    before_s: float  #: time per step before (``recommendation.measure``)
    after_s: float  #: ...and after the change, measured
    noise_s: float  #: the measurement's noise: twice the standard error of the two means, added
    after: Diagnosis  #: the diagnosis of the changed loader
    #: How much slower the loader ran before the change than the same model predicts for it (its
    #: per-step costs the model leaves out: the hand-over, the recorder), at most 10 % of the
    #: prediction; 0 for whole-run measures
    model_gap_s: float = 0.0
    #: the slower of two runs after, when the first came out slower than predicted and was recorded
    #: again (the faster is ``after``); None: measured once
    slower_run_s: float | None = None

    @property
    def predicted_s(self) -> float:
        return self.recommendation.predicted_s

    @property
    def tolerance_s(self) -> float:
        """How far the measurement may land from the prediction: 15 % of it, or the noise, plus the
        model's miss measured before the change: a loader the model misses by a millisecond before the
        change misses by about as much after it, and a busy machine adds its noise."""
        return max(0.15 * self.predicted_s, self.noise_s) + self.model_gap_s

    @property
    def as_predicted(self) -> bool:
        return abs(self.after_s - self.predicted_s) <= self.tolerance_s

    def ramp_share(self) -> float | None:
        """:func:`ramp_share` of the changed run: the advice predicts the pace of all its workers.
        None when the run after is not at hand."""
        timeline = getattr(self.after, "timeline", None)
        return None if timeline is None else ramp_share(timeline)

    def describe(self) -> str:
        r = self.recommendation
        verdict = "as predicted" if self.as_predicted else "NOT as predicted"
        gap = (f" (with the {self.model_gap_s * 1e3:.1f} ms a step the model missed before the change)"
               if self.model_gap_s > 0 else "")
        when = " once every worker was up" if r.measure == "steady" else ", start-up included"
        twice = ("" if self.slower_run_s is None else
                 f"; the faster of two runs after (the other {self.slower_run_s * 1e3:.1f} ms)")
        return (f"{r.knob}: {self.before_s * 1e3:.1f} → {self.after_s * 1e3:.1f} ms per step{when} "
                f"({self.before_s / self.after_s:.2f}×); predicted {self.predicted_s * 1e3:.1f} ms "
                f"± {self.tolerance_s * 1e3:.1f}{gap}{twice}: {verdict}")


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
    #: cores of the affinity mask other processes kept busy during the run (a browser, another
    #: notebook, a classmate on a shared server): the machine's busy time less this process tree's own
    #: CPU; None when it could not be read
    others_busy: float | None = None
    #: the main process's time per batch in ``next()`` on the loader's sampler, measured alone after the
    #: run (s); None: an iterable dataset, or not measured
    sampler_s: float | None = None
    #: tensor storages in a batch (each handed over from a worker on its own); None: not measured
    storages: int | None = None
    #: the share of a batch's tensors stacked across its samples (first dimension the batch size)
    stacked: float | None = None
    #: the device each batch was copied to (``diagnose(device=...)``); None: the step runs on the CPU
    device: str | None = None
    #: seconds per sample of each stage of ``__getitem__`` timed in a worker (:mod:`.stages`); None: not
    #: timed (the fetch waits rather than computes, or the dataset exposes no stage)
    stages: dict[str, float] | None = None
    #: where a sample's time goes, function by function, profiled where the loader runs its samples
    #: (:mod:`.profile`); None: not profiled (the loop did not wait for batches not yet built)
    profile: SampleProfile | None = None

    def free_cores(self, limits: Any = None) -> int:
        """Whole cores the workers can compute on: the effective cores (quota included) as a count
        of busy processes (2 under 1.5 CPUs: :attr:`helpers.cores.CpuLimits.whole`), less what other
        processes kept busy, rounded to the nearest core, at least 1."""
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
    def headroom(self) -> float:
        """How many times faster the loop would run if data were there instantly."""
        if not self.replay_step_s:
            return float("nan")
        return self.step_s / self.replay_step_s

    @property
    def wait_share(self) -> float:
        return self.timeline.wait_s() / self.timeline.wall_s if self.timeline.wall_s > 0 else 0.0

    def _steady_waits(self) -> tuple[float, float, float]:
        """The loop's waits after each worker's first batch of each epoch: all of it and the part for
        batches not yet built, each less the main process's garbage collection within it, and that
        collection. Those first batches are start-up: the workers start one after another (forked in
        turn from the main process; under spawn each imports torch first); on a slow machine the
        second worker's first batch alone can put a 12-step run's wait over the 5 % line for a loader
        that keeps up. A full collection in a notebook's kernel (100–150 ms) stops the loop's own
        process: in a 24-step run one inside a wait reads as 15–20 % of waiting on a loader that keeps up."""
        tl = self.timeline
        seen: set[tuple[int, int]] = set()
        waits = data_waits = collected = 0.0
        for b, (data, _) in zip(tl.batches, main_shares(tl), strict=True):
            if (b.epoch, b.worker) in seen:
                gc_s = tl.gc_pause_s(b.wait_start, b.ready)
                collected += gc_s
                waits += b.wait_s - gc_s
                data_waits += max(0.0, data - tl.gc_pause_s(b.wait_start, b.wait_start + data))
            seen.add((b.epoch, b.worker))
        return waits, data_waits, collected

    @property
    def steady_wait_share(self) -> float:
        """The loop's waiting once each worker's first batch of the epoch was in hand, as a share
        of the time after each epoch's first batch (start-up is judged on its own), less the main
        process's garbage collection (:attr:`steady_gc_wait_share`)."""
        rest = self.timeline.wall_s - self.startup_s
        return self._steady_waits()[0] / rest if rest > 0 else 0.0

    @property
    def steady_data_wait_share(self) -> float:
        """The part of :attr:`steady_wait_share` the loop spent waiting for a batch that was not
        yet ready to take (a worker still building it): what more workers, in order or a deeper
        prefetch can shorten. The rest is m, the main process taking the batch in."""
        rest = self.timeline.wall_s - self.startup_s
        return self._steady_waits()[1] / rest if rest > 0 else 0.0

    @property
    def steady_gc_wait_share(self) -> float:
        """The loop's waits after each worker's first batch that the main process spent collecting
        garbage, as a share of the time after each epoch's first batch: left out of
        :attr:`steady_wait_share` (no loader setting shortens them; ``gc.freeze()``, notebook 02, does)."""
        rest = self.timeline.wall_s - self.startup_s
        return self._steady_waits()[2] / rest if rest > 0 else 0.0

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

    def cpu_each(self, limits: Any = None) -> float:
        """The most CPU each fetching process could get during the run, as a share of a core: 1,
        or less with more workers than free cores or a CPU quota (1 CPU, 2 workers: 0.5)."""
        limits = cpu_limits() if limits is None else limits
        fetchers = max(len({b.worker for b in self.timeline.batches}), 1)
        return min(1.0, min(limits.cores, float(self.free_cores(limits))) / fetchers)

    def computes(self, limits: Any = None) -> bool:
        """Whether a fetch is CPU-bound: its process used the CPU at least ``CPU_BOUND`` of the
        CPU it could get (:meth:`cpu_each`). Beside more workers than cores, or inside a quota, a
        computing fetch waits for the CPU, and its share of the wall time falls: inside 1 CPU
        mystery B's two workers, computing their collate, read 42 %."""
        return self.cpu_share is not None and self.cpu_share >= CPU_BOUND * self.cpu_each(limits)

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
            **({} if self.sampler_s is None else
               {"...of it the sampler's next() (measured alone)": self.sampler_s}),
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
            ["headroom", "—" if self.replay_step_s is None else f"{self.headroom:.2f}×"],
            ["loop waiting for data", f"{self.wait_share:.0%} of the run"],
            ["...after each worker's first batch", f"{self.steady_wait_share:.0%}: {self.scale} "
             "(TF profiler's scale: under 5 % / 5–20 % / over 20 %)"],
            ["...of it waiting for a batch not yet built",
             f"{self.steady_data_wait_share:.0%} (the rest: the main process taking batches in)"],
        ]
        if self.steady_gc_wait_share >= 0.005:
            rows.append(["...left out: the main process collecting garbage while the loop waited",
                         f"{self.steady_gc_wait_share:.0%} more (gc.freeze() after setup shortens it: "
                         "notebook 02)"])
        if self.cpu_share is not None:
            each = self.cpu_each()
            most = "" if each >= 1 else f"; each fetching process could get at most {each:.0%} of a core"
            rows.append(["CPU used by a fetch", f"{self.cpu_share:.0%} of its time "
                         f"({'computing' if self.computes() else 'waiting'}{most})"])
        if self.cores:
            load = ("" if self.others_busy is None else
                    f"; other processes kept {self.others_busy:.1f} of them busy during the run"
                    + (f": about {self.free_cores()} free for computing workers"
                       if self.free_cores() < cpu_limits().whole else ""))
            rows.append(["cores", self.cores + load])
        rows += [[name, f"{s * 1e3:.2f} ms"] for name, s in self.breakdown().items()]
        if self.stages is not None:
            rows += [[f"a sample: {name} (timed in a worker)", f"{s * 1e3:.2f} ms"]
                     for name, s in self.stages.items()]
        rows += self.profile_rows()
        if self.storages is not None:
            rows.append(["tensor storages in a batch", f"{self.storages} (each handed over from a worker on "
                         "its own)"])
        rows += [[f"→ {r.knob}", f"{r.advice} ({r.because})"] for r in self.recommendations]
        rows += [["followed", f.describe()] for f in self.followed]
        return rows

    def profile_rows(self, most: int = 5) -> list[list[str]]:
        """The profile's rows: the functions of the learner's code that cost most per sample (file:line,
        ms per sample, share), and the call inside the costliest one."""
        p = self.profile
        if p is None:
            return []
        rows = [[f"a sample: {f} (profiled)", f"{f.seconds * 1e3:.2f} ms, {f.share:.0%}"]
                for f in p.functions[:most]]
        if p.call is not None:
            rows.append([f"...inside {p.culprit}",
                         f"{p.call}: {p.call.seconds * 1e3:.2f} ms, {p.call.share:.0%}"])
        if p.lines:
            rows.append(["...the line seen most (sampled)", f"{p.lines[0]}: {p.lines[0].share:.0%} of the "
                         "samples"])
        return rows

    def profile_table(self, most: int = 8):
        """The profile as a table: each of the learner's functions that cost most per sample, with its
        place in the code, its time per sample (scaled to the run's own fetch time) and its share."""
        from ..report import table

        if self.profile is None:
            raise ValueError("this diagnosis has no profile: it profiles samples only when the loop waits "
                             "for batches not yet built")
        p = self.profile
        rows = [[f.name, f.where, f"{f.seconds * 1e3:.2f}", f"{f.share:.0%}"] for f in p.functions[:most]]
        if p.call is not None:
            rows.append([f"↳ inside {p.culprit.name}: {p.call.name}", "", f"{p.call.seconds * 1e3:.2f}",
                         f"{p.call.share:.0%}"])
        rows += [[f"line: {line.text}", line.where, "", f"{line.share:.0%} of the line samples"]
                 for line in p.lines[:3]]
        return table(["function", "where", "ms per sample", "share of a sample"], rows,
                     caption=f"where a sample's time goes ({p.samples} samples profiled where the loader "
                             "runs them)")

    def table(self):
        from ..report import table

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
        return f"<Diagnosis: headroom {self.headroom:.2f}×, recommendations {self.knobs()}>"

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def plot(self, title: str | None = None):
        """The run's timeline with the headroom and the recommendations in its title; with
        ``verify=True``, the timelines before and after each followed recommendation
        (:func:`helpers.plots.plot_diagnosis`, through :data:`draw`)."""
        if draw is None:
            raise RuntimeError("Diagnosis.plot draws with helpers.plots: import helpers first, "
                               "which connects them")
        return draw(self, title)

    def plot_profile(self):
        """Where a sample's time goes: a bar per function of the learner's code, ms per sample
        (:func:`helpers.plots.plot_profile`, through :data:`draw_profile`)."""
        if draw_profile is None:
            raise RuntimeError("Diagnosis.plot_profile draws with helpers.plots: import helpers first")
        return draw_profile(self)

    def trace(self, path: str | os.PathLike) -> Path:
        """A Perfetto / chrome://tracing trace of the run."""
        return self.timeline.to_chrome_trace(path)

    def knobs(self) -> list[str]:
        return [r.knob for r in self.recommendations]
