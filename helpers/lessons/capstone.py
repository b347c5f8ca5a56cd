"""Notebook 11 · capstone: the tutorial's chain measured stage by stage against a true compute-only
bound, and the chain's gains as a function of the step/load ratio (the model, fed with this run's
measured costs)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..classroom.checks import Check, Expected, at_least, premise_failed
from ..timing.analysis import epoch_first_batch_gaps
from ..timing.settings import LoaderSettings
from ..timing.theory import measured_main_s, measured_serial_s, simulate
from ..timing.timeline import Timeline

#: The tutorial's published speedups vs its baseline (PyTorch's "Data Loading Optimization" tutorial).
PUBLISHED = {
    "baseline": 1.0,
    "+ workers, prefetch 2": 2.7,
    "+ pin_memory": 2.8,
    "+ persistent_workers": 3.7,
    "+ device prefetcher": 3.6,
    "+ __getitems__": 10.0,
}


@dataclass(frozen=True)
class Stage:
    """One stage of the chain: the loader's settings, and whether a prefetcher and the batched
    dataset are used."""

    settings: LoaderSettings
    prefetcher: bool = False
    batched: bool = False


def stages(workers: int) -> dict[str, Stage]:
    """The tutorial's chain: each stage adds one change to the one before."""
    on = LoaderSettings(batch_size=32, shuffle=True, num_workers=workers, prefetch_factor=2)
    return {
        "baseline": Stage(LoaderSettings(batch_size=32, shuffle=True)),
        "+ workers, prefetch 2": Stage(on),
        "+ pin_memory": Stage(on.replace(pin_memory=True)),
        "+ persistent_workers": Stage(on.replace(pin_memory=True, persistent_workers=True)),
        "+ device prefetcher": Stage(on.replace(pin_memory=True, persistent_workers=True), prefetcher=True),
        "+ __getitems__": Stage(
            on.replace(pin_memory=True, persistent_workers=True), prefetcher=True, batched=True
        ),
    }


def compute_bound_s(
    step: Callable[[Any], Any], batches: Sequence[Any], count: int, device: Any = None
) -> float:
    """The true compute-only bound: ``count`` steps on batches already where the step reads them
    (moved to ``device`` first, if given): no loader, no copy, no waiting. One pass over the
    batches first, untimed (warm-up). Seconds."""
    import torch

    on_device = batches if device is None else [_to(b, device) for b in batches]
    for batch in on_device:
        step(batch)
    cuda = device is not None and torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for i in range(count):
        step(on_device[i % len(on_device)])
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _to(batch: Any, device: Any) -> Any:
    from ..timing.device import to_device

    return to_device(batch, device)


@dataclass(frozen=True)
class StageCosts:
    """What one stage's recording measured, per batch (s), for the model."""

    batch_load_s: float  #: median fetch (in the main process with 0 workers)
    #: m: the loop's own work per batch, measured as everywhere in the lab
    #: (:func:`helpers.theory.measured_main_s`: with a prefetch or pin thread the unpickling is theirs)
    main_s: float
    startup_s: float  #: worker start-up per epoch that started workers
    #: the pin thread's (or a receiving prefetch thread's) work per batch: one thread, one batch
    #: at a time (:func:`helpers.theory.measured_serial_s`). On an H200 (torch 2.11) it took about
    #: 1 ms to receive and 6-7 ms to pin each 18 MiB batch, more than the tutorial model's 6 ms
    #: step there: with __getitems__ the workers outpace it, and it sets the last stage's pace
    serial_s: float = 0.0


def stage_costs(tl: Timeline, stage: Stage) -> StageCosts:
    """n (the median fetch), m and the workers' start-up, from one stage's recording. (``stage`` is
    no longer needed: whether a prefetch or pin thread received the batches is in the recording.)"""
    fetch = statistics.median(b.fetch_s for b in tl.batches)
    main = measured_main_s(tl)
    startups = [tl.worker_startup_s(e.epoch) for e in tl.epochs if e.worker_ready]
    return StageCosts(fetch, main, statistics.fmean(startups) if startups else 0.0, measured_serial_s(tl))


def model_wall_s(
    stage: Stage, costs: StageCosts, step_s: float, batches_per_epoch: int, batches: int
) -> float:
    """The model's wall time for ``batches`` batches after a warm-up epoch: epoch by epoch, the
    schedule of :func:`helpers.simulate`, with the workers' start-up in every epoch unless they
    persist."""
    s = stage.settings
    wall, left = 0.0, batches
    while left > 0:
        n = min(left, batches_per_epoch)
        startup = costs.startup_s if s.num_workers and not s.persistent_workers else 0.0
        plan = simulate(
            n,
            costs.batch_load_s,
            step_s,
            s.num_workers,
            prefetch_factor=s.effective_prefetch_factor,
            startup_s=startup,
            main_s=costs.main_s,
            serial_s=costs.serial_s,
        )
        wall += plan[-1].step_end
        left -= n
    return wall


def speedup_curves(
    chain: dict[str, Stage],
    costs: dict[str, StageCosts],
    ratios: Sequence[float],
    batches_per_epoch: int,
    batches: int,
) -> dict[str, list[float]]:
    """Per stage, the model's speedup over the baseline at each step/load ratio (step ÷ the
    baseline's per-batch load)."""
    load = costs["baseline"].batch_load_s
    out: dict[str, list[float]] = {name: [] for name in chain}
    for ratio in ratios:
        base = model_wall_s(chain["baseline"], costs["baseline"], ratio * load, batches_per_epoch, batches)
        for name, stage in chain.items():
            out[name].append(
                base / model_wall_s(stage, costs[name], ratio * load, batches_per_epoch, batches)
            )
    return out


def checks(
    measured: dict[str, Timeline],
    chain: dict[str, Stage],
    bound_s: float,
    predicted: dict[str, float],
    modelled_step: bool,
) -> list[Check | Expected]:
    """``measured``: each stage's measured epochs; ``predicted``: the model's speedup vs baseline at
    this run's step; ``modelled_step``: the step is the lab's modelled one (CPU) rather than a
    real model on a GPU.

    Not checks: the speedups beside the model's (the lab's sleeps decide them), what persistent workers
    save each epoch's first batch (PyTorch keeps them alive:
    an :class:`Expected` row beside the start-up measured), and the final stage against the
    compute-only bound (``bound_s``: the notebook's table shows every stage's efficiency; with the
    modelled step it is the step's own arithmetic, with a real model the GPU's)."""
    names = list(measured)
    wall = {n: tl.wall_s for n, tl in measured.items()}
    out: list[Check | Expected] = []
    startup = {n: sum(tl.worker_startup_s(e.epoch) for e in tl.epochs if e.worker_ready)
               for n, tl in measured.items()}
    pinned = {n: any(b.pin_start is not None for b in tl.batches) for n, tl in measured.items()}
    for before, after in zip(names, names[1:], strict=False):
        claim = f"{after}: not slower than the stage before (by more than 20 %)"
        if chain[after].settings.pin_memory and not chain[before].settings.pin_memory and not pinned[after]:
            # Without an accelerator the DataLoader pins nothing (torch/utils/data/dataloader.py:
            # `self._pin_memory = loader.pin_memory and torch.accelerator.is_available()`): this stage
            # ran the stage before's loader, and their ratio is the run's noise (`make test` inside
            # 1 CPU on a slower machine: 0.77x between the two identical loaders).
            out.append(premise_failed(claim, f"{wall[before] / wall[after]:.2f}×",
                                      "no batch was pinned: without an accelerator PyTorch turns pin_memory "
                                      "off, so this stage ran the same loader as the one before",
                                      id="11.chain.stage_not_slower"))
            continue
        if after == "+ device prefetcher" and modelled_step:
            # On a CPU the device prefetcher copies to the CPU: a thread that hands the same batches on,
            # so this stage ran the loader of the stage before, and their ratio is the run's noise.
            out.append(premise_failed(claim, f"{wall[before] / wall[after]:.2f}×",
                                      "no device: the prefetcher's copies are to the CPU, so this stage "
                                      "ran the same loader as the one before",
                                      id="11.chain.stage_not_slower"))
            continue
        added = startup[after] - startup[before]
        if added > 0.2 * wall[before]:
            # spawn / forkserver at small sizes: starting workers every epoch costs more than they save;
            # the persistent-workers stage is the one that removes it (`make start-methods` runs this case).
            out.append(premise_failed(claim, f"{wall[before] / wall[after]:.2f}×",
                                      f"starting its workers every epoch took {startup[after]:.2f} s of its "
                                      f"{wall[after]:.2f} s: "
                                      "a later stage, persistent_workers, removes that",
                                      id="11.chain.stage_not_slower"))
            continue
        out.append(at_least(claim, wall[before] / wall[after], 0.8, unit="×", id="11.chain.stage_not_slower"))
    fresh, kept = measured["+ pin_memory"], measured["+ persistent_workers"]
    out.append(Expected(
        "persistent workers: how much sooner each epoch's first batch comes — the workers' start-up",
        statistics.fmean(epoch_first_batch_gaps(fresh) or [fresh.summary()["first_batch_s"]])
        - statistics.fmean(epoch_first_batch_gaps(kept) or [kept.summary()["first_batch_s"]]),
        statistics.fmean(fresh.worker_startup_s(e.epoch) for e in fresh.epochs if e.worker_ready),
        note="an epoch's first batch, + pin_memory against + persistent_workers"))
    for name in names[1:]:
        # the model applied to the lab's own sleeps and step: a prediction beside the measurement
        out.append(Expected(f"{name}: the speedup over the baseline, beside the model's for this "
                            "step/load ratio", wall["baseline"] / wall[name], predicted[name], unit="×"))
    return out


def run_stage(
    name: str,
    stage: Stage,
    *,
    shape: Sequence[int],
    item_wait_s: float,
    step: Callable[[Any], Any],
    device: Any,
    epochs: int,
    batches_per_epoch: int,
    batches: int,
) -> Timeline:
    """Record one stage over the tutorial's dataset (512 samples): one warm-up epoch, then up to
    ``batches`` batches over up to ``epochs`` epochs; returns the measured epochs. Until the device
    prefetcher stage the loop copies each batch to ``device`` itself; from it on,
    :class:`helpers.DevicePrefetcher` does (on a CPU: a thread that takes each batch from the
    loader — receiving it from shared memory — while the loop steps)."""
    from ..data.datasets import BatchedTutorialDataset, TutorialDataset
    from ..data.prefetch import DevicePrefetcher
    from ..timing.recorder import record

    cls = BatchedTutorialDataset if stage.batched else TutorialDataset
    loader = stage.settings.loader(cls(512, shape=shape, item_wait_s=item_wait_s))
    options = {"wrap": lambda it: DevicePrefetcher(it, device)} if stage.prefetcher else {"device": device}
    tl = record(
        loader, step, epochs=1 + epochs, max_batches=batches_per_epoch + batches, progress=name, **options
    )
    return tl.window(1)


def decision_guide(vs_previous: dict[str, float], efficiency: float, has_cuda: bool) -> list[list[str]]:
    """Rows of the decision guide: symptom on the timeline, the knob (and its notebook), and what
    that knob did in this run."""
    gain = {n: f"{v:.2f}× here" for n, v in vs_previous.items()}
    return [
        [
            "red before every step, no worker rows (0 workers)",
            "num_workers, sized with ⌈n / (y + m)⌉ (02)",
            gain["+ workers, prefetch 2"],
        ],
        [
            "red and hatched start-up at every dashed epoch line",
            "persistent_workers=True (05)",
            gain["+ persistent_workers"],
        ],
        [
            "red spikes behind one long blue bar, other workers idle",
            "in_order=False or a deeper prefetch_factor (09, 03)",
            "the p99, not the mean",
        ],
        [
            "long blue bars made of many small requests",
            "__getitems__ — if there is a per-request cost (08)",
            gain["+ __getitems__"],
        ],
        [
            "workers busy all the time, loop still waiting",
            "more workers up to the free cores (04)",
            "CPU-bound: the cores",
        ],
        [
            "cyan copy segment before each step (GPU)",
            "pin_memory + a device prefetcher (06, 07)",
            gain["+ device prefetcher"] if has_cuda else "not measured: no GPU here",
        ],
        [
            "green only, no red",
            "nothing left in the input pipeline: the model is next",
            f"final stage at {efficiency:.0%} of the bound",
        ],
    ]
