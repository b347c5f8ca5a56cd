"""Diagnose your own loader (notebook 16): ``helpers.diagnose(loader, step)``.

It records the loader with the lab's instrument (:func:`helpers.record`), then replays the
same steps on batches it kept from that run (the cache replay: data instantly there — the
speed limit of the loop), and reports:

- the **headspace**: how much faster the loop would run if data were free;
- the share of time the loop **waited** for data;
- **where the time goes** per batch: worker start-up, fetch (the dataset and the collate in a
  worker), the collate alone (measured once in this process), receive (unpickling in the main
  process), pin, the copy to the device;
- **recommendations** derived from the lab's models, each with the number that triggered it:
  workers from the sizing rule x = ⌈n / (y + m)⌉ (notebook 02), prefetch depth from the
  measured spread of fetch times (03), persistent workers when start-up is a large share
  (05), pinning when the copy is (06), and a cheaper collate or batched fetching (08).

One picture (:meth:`Diagnosis.plot`), one table (:meth:`Diagnosis.table`), one Perfetto trace
(:meth:`Diagnosis.trace`). From a terminal, for a script outside Jupyter::

    python -m helpers.diagnose my_module:make_loader --steps 200

:func:`profile` records the same run under ``torch.profiler`` and writes one trace with the
profiler's ``enumerate(DataLoader)#…__next__`` spans beside the lab's waits.
"""

from __future__ import annotations

import argparse
import importlib
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

from torch.utils.data import DataLoader

from .config import available_cores
from .recorder import record
from .theory import recommend_num_workers
from .timeline import Timeline

#: The loop waiting less than this share of the run is not input-bound.
INPUT_BOUND = 0.10
#: Start-up above this share of the run is worth avoiding.
STARTUP_SHARE = 0.10
#: A copy above this share of the step is worth overlapping.
COPY_SHARE = 0.10
#: Collate above this share of a worker's fetch is worth a look.
COLLATE_SHARE = 0.30
#: Fetch times whose 90th percentile is this many times their median vary.
SPREAD = 2.0


@dataclass(frozen=True)
class Recommendation:
    knob: str  #: what to change: "num_workers", "prefetch_factor", "persistent_workers", ...
    advice: str  #: the change, in words
    because: str  #: the measured number that triggered it


@dataclass(repr=False)
class Diagnosis:
    """What :func:`diagnose` measured; shows as a table in a notebook."""

    timeline: Timeline
    replay_step_s: float  #: the loop's time per step on cached batches (the speed limit)
    collate_s: float | None  #: one batch's collate_fn in this process (None: not measurable)
    recommendations: list[Recommendation] = field(default_factory=list)

    # -- what the run measured ------------------------------------------------------
    @property
    def steps(self) -> int:
        return len(self.timeline.batches)

    @property
    def step_s(self) -> float:
        """Wall time per step of the real run, start-up included."""
        return self.timeline.wall_s / max(self.steps, 1)

    @property
    def headspace(self) -> float:
        """How many times faster the loop would run if data were there instantly."""
        return self.step_s / self.replay_step_s if self.replay_step_s > 0 else float("inf")

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
    def startup_s(self) -> float:
        """Time from ``iter(loader)`` to each epoch's first batch, summed over the epochs."""
        return sum(e.first_batch_s or 0.0 for e in self.timeline.epochs)

    def breakdown(self) -> dict[str, float]:
        """Median seconds per batch of each part (start-up: per epoch)."""
        b = self.timeline.batches
        med = statistics.median
        parts = {
            "start-up (per epoch)": self.startup_s / max(len(self.timeline.epochs), 1),
            "fetch in a worker (dataset + collate)": med(x.fetch_s for x in b),
            "receive (unpickle in the main process)": med(x.receive_s for x in b),
            "copy to the device": med(x.copy_s for x in b),
            "step": med(x.step_s for x in b),
            "loop waiting": med(x.wait_s for x in b),
        }
        pins = [x.pin_end - x.pin_start for x in b if x.pin_start is not None and x.pin_end is not None]
        if pins:
            parts["pin (pin_memory thread)"] = med(pins)
        if self.collate_s is not None:
            parts["collate_fn alone (measured once here)"] = self.collate_s
        return parts

    # -- views ----------------------------------------------------------------------------
    def table(self):
        from .report import table

        rows = [
            ["steps recorded", f"{self.steps}"],
            ["time per step (real run)", f"{self.step_s * 1e3:.1f} ms"],
            ["time per step on cached batches (speed limit)", f"{self.replay_step_s * 1e3:.1f} ms"],
            ["headspace", f"{self.headspace:.2f}×"],
            ["loop waiting for data", f"{self.wait_share:.0%} of the run"],
            ["...after each epoch's first batch", f"{self.steady_wait_share:.0%}"],
        ]
        rows += [[name, f"{s * 1e3:.2f} ms"] for name, s in self.breakdown().items()]
        rows += [[f"→ {r.knob}", f"{r.advice} ({r.because})"] for r in self.recommendations]
        return table(["", "measured"], rows, caption=self.timeline.describe())

    def __str__(self) -> str:
        lines = [
            f"{self.timeline.describe()}: {self.steps} steps",
            f"  time per step {self.step_s * 1e3:.1f} ms; "
            f"on cached batches {self.replay_step_s * 1e3:.1f} ms "
            f"(the speed limit): headspace {self.headspace:.2f}×",
            f"  the loop waited {self.wait_share:.0%} of the run ({self.steady_wait_share:.0%} after each "
            "epoch's first batch)",
        ]
        lines += [f"  {name}: {s * 1e3:.2f} ms" for name, s in self.breakdown().items()]
        lines += ["recommendations:"] + [
            f"  → {r.knob}: {r.advice}\n      because {r.because}" for r in self.recommendations
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Diagnosis: headspace {self.headspace:.2f}×, recommendations {self.knobs()}>"

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def plot(self, title: str | None = None):
        """The run's timeline with the headspace and the recommendations in its title."""
        from .plots import plot_timeline

        advice = "; ".join(r.knob for r in self.recommendations) or "none"
        return plot_timeline(
            self.timeline,
            title=title
            or (
                f"headspace {self.headspace:.2f}× · waiting {self.wait_share:.0%} · recommendations: {advice}"
            ),
        )

    def trace(self, path: str | os.PathLike) -> Path:
        """A Perfetto / chrome://tracing trace of the run."""
        return self.timeline.to_chrome_trace(path)

    def knobs(self) -> list[str]:
        return [r.knob for r in self.recommendations]


def _collate_once(loader: DataLoader) -> float | None:
    """Seconds for ``collate_fn`` on one batch of samples fetched here (map-style, automatic
    batching only; None otherwise)."""
    if loader.batch_sampler is None or not hasattr(loader.dataset, "__getitem__"):
        return None
    try:
        indices = next(iter(loader.batch_sampler))
        getitems = getattr(loader.dataset, "__getitems__", None)
        samples = getitems(indices) if getitems else [loader.dataset[i] for i in indices]
        start = time.perf_counter()
        loader.collate_fn(samples)
        return time.perf_counter() - start
    except Exception:  # noqa: BLE001 - a dataset that cannot be read here: the number is left out
        return None


def recommend(d: Diagnosis, loader: DataLoader, *, device: Any = None) -> list[Recommendation]:
    """The lab's models applied to what ``d`` measured (see the module docstring)."""
    out: list[Recommendation] = []
    tl, parts = d.timeline, d.breakdown()
    workers = loader.num_workers
    fetch = parts["fetch in a worker (dataset + collate)"]
    main = parts["receive (unpickle in the main process)"] + parts["copy to the device"]
    epochs = len(tl.epochs)
    startup_share = d.startup_s / tl.wall_s if tl.wall_s > 0 else 0.0
    input_bound = d.steady_wait_share >= INPUT_BOUND
    if workers > 0 and not loader.persistent_workers and epochs > 1 and startup_share >= STARTUP_SHARE:
        out.append(
            Recommendation(
                "persistent_workers",
                "persistent_workers=True: start the workers once, not every epoch",
                f"start-up took {d.startup_s:.2f} s over {epochs} epochs, {startup_share:.0%} of the run",
            )
        )
    if d.collate_s is not None and d.collate_s >= COLLATE_SHARE * fetch and input_bound:
        out.append(
            Recommendation(
                "collate_fn",
                "a cheaper collate_fn (or build batches in __getitems__: notebook 08)",
                f"collate_fn takes {d.collate_s * 1e3:.1f} ms of the {fetch * 1e3:.1f} ms "
                "a worker spends per batch",
            )
        )
    if input_bound:
        needed = recommend_num_workers(fetch, d.replay_step_s, main_s=main)
        if needed > max(workers, 1) or (workers == 0 and fetch > d.replay_step_s):
            cores = available_cores()
            note = (
                f"; more than the {cores} cores only helps if loading waits rather than computes"
                if needed > cores
                else ""
            )
            out.append(
                Recommendation(
                    "num_workers",
                    f"num_workers={needed} (now {workers}){note}",
                    f"a batch takes {fetch * 1e3:.1f} ms to fetch, "
                    f"the loop {d.replay_step_s * 1e3:.1f} ms per step "
                    f"and {main * 1e3:.1f} ms to receive it: x = ⌈n / (y + m)⌉ = {needed}",
                )
            )
        fetches = sorted(b.fetch_s for b in tl.batches)
        if len(fetches) >= 10 and workers > 0:
            p90 = fetches[int(0.9 * (len(fetches) - 1))]
            median = statistics.median(fetches)
            if median > 0 and p90 / median >= SPREAD:
                depth = math.ceil((loader.prefetch_factor or 2) * p90 / median)
                out.append(
                    Recommendation(
                        "prefetch_factor",
                        f"prefetch_factor={depth} (now {loader.prefetch_factor}): cover the slow fetches",
                        f"fetch times vary: 90th percentile {p90 * 1e3:.1f} ms, median {median * 1e3:.1f} ms",
                    )
                )
    copy = parts["copy to the device"]
    if device is not None and not loader.pin_memory and copy >= COPY_SHARE * max(parts["step"], 1e-9):
        out.append(
            Recommendation(
                "pin_memory",
                "pin_memory=True and non_blocking copies (notebook 06)",
                f"the copy takes {copy * 1e3:.1f} ms per step, {copy / parts['step']:.0%} of the step",
            )
        )
    if not out and input_bound:
        out.append(
            Recommendation(
                "unexplained",
                "the loop waits, and no knob the lab models explains it: read the timeline "
                "(main-process work between batches, garbage collection, a slow first epoch)",
                f"after each epoch's first batch the loop waited {d.steady_wait_share:.0%} with "
                f"{workers} workers, as many as the sizing rule asks for",
            )
        )
    if not out:
        out.append(
            Recommendation(
                "none",
                "the loader keeps up: make the step faster, not the data",
                f"after each epoch's first batch the loop waited {d.steady_wait_share:.0%}; "
                f"start-up took {startup_share:.0%} of the run",
            )
        )
    return out


def diagnose(
    loader: DataLoader,
    step: Callable[[Any], Any] | None = None,
    *,
    steps: int = 200,
    device: Any = None,
    replay: int = 32,
    progress: bool | str = True,
) -> Diagnosis:
    """Diagnose ``loader`` (any ``DataLoader``) run with ``step`` for ``steps`` batches (over as
    many epochs as that takes); see the module docstring. ``step`` runs again in the replay, on
    up to ``replay`` batches kept from the run (mind a step with side effects: a real optimiser
    step would update the model again)."""
    if not isinstance(loader, DataLoader):
        raise TypeError(f"diagnose() needs a torch.utils.data.DataLoader, got {type(loader).__name__}")
    if not isinstance(steps, int) or steps < 2:
        raise ValueError(f"steps must be an integer of at least 2, got {steps!r}")
    step = step if step is not None else (lambda batch: None)
    kept: list[Any] = []

    def keep_and_step(batch: Any) -> Any:
        if len(kept) < replay:
            kept.append(batch)
        return step(batch)

    try:
        per_epoch = len(loader)
    except TypeError:
        per_epoch = steps
    epochs = max(1, math.ceil(steps / max(per_epoch, 1)))
    timeline = record(
        loader,
        keep_and_step,
        epochs=epochs,
        max_batches=steps,
        device=device,
        progress="diagnosing" if progress is True else progress,
    )
    # The replay: the same steps, each on a batch already in hand (copied to the device as in the run).
    from .transfer import synchronize, to_device

    times = []
    for i in range(min(steps, max(len(kept) * 2, 8))):
        batch = kept[i % len(kept)]
        start = time.perf_counter()
        if device is not None:
            batch = to_device(batch, device)
            synchronize(device)
        step(batch)
        times.append(time.perf_counter() - start)
    d = Diagnosis(timeline, statistics.median(times), _collate_once(loader))
    d.recommendations = recommend(d, loader, device=device)
    return d


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
def load_target(target: str) -> Any:
    """``module:function`` → what the function returns (a DataLoader, or (DataLoader, step)).
    Clear errors for each way it can be wrong."""
    if ":" not in target:
        raise SystemExit(f"expected module:function, e.g. my_module:make_loader — got {target!r}")
    module_name, function_name = target.split(":", 1)
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise SystemExit(
            f"no module named {error.name!r}: run from the folder that holds {module_name}.py, "
            "or add that folder to PYTHONPATH"
        ) from None
    function = getattr(module, function_name, None)
    if function is None or not callable(function):
        raise SystemExit(
            f"module {module_name!r} has no function {function_name!r} "
            f"(it has: {', '.join(n for n in dir(module) if not n.startswith('_')) or 'nothing'})"
        )
    made = function()
    loader = made[0] if isinstance(made, tuple) else made
    if not isinstance(loader, DataLoader):
        raise SystemExit(
            f"{target}() returned {type(loader).__name__}, not a torch.utils.data.DataLoader "
            "(return the loader, or (loader, step))"
        )
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.diagnose",
        description="Diagnose a DataLoader: headspace, waiting, where the time goes, recommendations.",
    )
    parser.add_argument("target", help="module:function returning a DataLoader, or (DataLoader, step)")
    parser.add_argument("--steps", type=int, default=200, help="batches to record (default 200)")
    parser.add_argument(
        "--step-ms",
        type=float,
        default=None,
        help="model the training step as this many ms of waiting (when the function gives none)",
    )
    parser.add_argument(
        "--trace", default="dataloader_diagnosis.json", help="where to write the Perfetto trace"
    )
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2")
    made = load_target(args.target)
    loader, step = made if isinstance(made, tuple) else (made, None)
    if step is None and args.step_ms is not None:
        from .models import ModelledStep

        step = ModelledStep(args.step_ms / 1e3)
    result = diagnose(loader, step, steps=args.steps)
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
