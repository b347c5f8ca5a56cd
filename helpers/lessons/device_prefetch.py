"""Notebook 07 · prefetching to the device: a thread hides a per-batch main-process transform (any
machine), a device prefetcher hides the host-to-device copy (CUDA), and neither hides slow data."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from time import perf_counter as clock
from typing import Any

from ..classroom.checks import Check, Expected, at_least, no_effect, premise_failed, timing_noise_s
from ..timing.analysis import main_cpu_per_batch_s, per_batch_s
from ..timing.timeline import Span, Timeline

#: The timeline row of the steps as the device ran them (:class:`StepTimer`).
STEP_ROW = "device (loop's stream)"


def per_batch(runs: dict[str, Timeline]) -> dict[str, float]:
    """Time per batch per run (s): the mean of the repeating cycle of intervals, one position per
    worker (a data-bound loop alternates short and long intervals, so a median would mislead)."""
    return {name: per_batch_s(tl, max(tl.config.get("num_workers") or 1, 1), cycles=1)
            for name, tl in runs.items()}


def cpu_per_batch(tl: Timeline) -> tuple[float, float]:
    """What a run without the transform spends of the CPU per batch (s): the main process's (the loop's
    own work: receiving, the step's Python) and the workers' (their fetches); 0.0 where not measured."""
    loop = main_cpu_per_batch_s(tl) or 0.0
    fetches = [b.fetch_cpu_s for b in tl.batches if b.fetch_cpu_s is not None]
    return loop, (sum(fetches) / len(fetches) if fetches else 0.0)


def cpu_needed(transform_s: float, loop_s: float, workers_s: float, every_s: float) -> float:
    """The CPUs a run needs to keep the pace ``every_s`` with the transform in a thread: the
    transform's CPU per batch, the loop's own and the workers' (measured without it), over the pace."""
    return (transform_s + loop_s + workers_s) / every_s


def _short_of_cpu(needs: float, transform_s: float, loop: float, workers: float, every_s: float,
                  cores: float) -> str:
    return (f"keeping the pace needs {needs:.2f} CPU: the transform's {transform_s * 1e3:.0f} ms of CPU, the "
            f"loop's own {loop * 1e3:.1f} ms and the workers' {workers * 1e3:.1f} ms every "
            f"{every_s * 1e3:.1f} ms; this process could get {cores:.2f} CPU (measured: a CPU quota, or "
            "other programs on the cores, take the rest)")


def checks(host: dict[str, Timeline], bound: dict[str, Timeline], transform_s: float,
           gpu: dict[str, Timeline] | None, cores: float | None = None) -> list[Check | Expected]:
    """``host``: "no transform", "transform in the loop's thread", "transform in a prefetch thread";
    ``bound``: the same two transforms on a data-bound loader; ``gpu``: :func:`gpu_runs` (or None);
    ``cores``: the CPUs this process could get (``helpers.effective_cores()``, a quota included, or less
    where ``helpers.free_cores`` measured other programs taking some); None: not measured.

    Two rows are :class:`Expected`, not checks: in the loop's thread the lab's 80 ms of CPU work adds
    itself to a sleeping step, and on the data-bound loader the workers' sleeps set the pace wherever
    the transform runs."""
    s = per_batch(host)
    # noise from the run without a transform: with one, a busy thread holds the GIL and delays the
    # loop's wake-ups (the effect the notebook's caveat is about, not machine noise)
    noise = timing_noise_s([b.step_s for b in host["no transform"].batches])
    out: list[Check | Expected] = [
        Expected("in the loop's thread the transform adds its time to every batch",
                 s["transform in the loop's thread"] - s["no transform"], transform_s,
                 note="time per batch with it in the loop's thread, less without it"),
    ]
    claim = "in a prefetch thread it is hidden: the pace is that of the run without it"
    threaded, alone = s["transform in a prefetch thread"], s["no transform"]
    # the CPU the thread must spend beside the loop, with the loop's own and the workers', in CPUs: inside
    # a quota a little under one CPU the transform alone fitted, the three together did not
    loop, workers = cpu_per_batch(host["no transform"])
    needs = cpu_needed(transform_s, loop, workers, alone)
    if cores is not None and needs > 0.9 * cores:
        out.append(premise_failed(claim, f"{threaded * 1e3:.1f} ms",
                                  _short_of_cpu(needs, transform_s, loop, workers, alone, cores),
                                  id="07.thread.hides_the_transform"))
    else:
        out.append(no_effect(claim, threaded, alone, rel=0.2, noise=noise, effect=transform_s,
                             what="with the transform in a thread vs without it",
                             id="07.thread.hides_the_transform"))
    b = per_batch(bound)
    out.append(Expected(
        "data-bound: the transform in the loop's thread ÷ in a prefetch thread (the workers set the pace "
        "either way: fix the workers first)",
        b["data-bound, transform in the loop's thread"] / b["data-bound, transform in a prefetch thread"],
        1.0, unit="×"))
    claim = ("on a GPU: DevicePrefetcher copies a batch while the device steps on an earlier one; "
             "the serialised order copied only between steps")
    if gpu is None:
        out.append(premise_failed(claim, "", "needs a CUDA GPU (torch.cuda.is_available() is False here)",
                                  id="07.gpu.copies_beside_steps"))
    else:
        out.append(overlap_check(claim, gpu["DevicePrefetcher"], gpu["serialised prefetcher"]))
    return out


def copy_overlap(tl: Timeline) -> tuple[float, int]:
    """How much of the copies ran beside a step on the device, in a recording with a copy row
    (``record(wrap=DevicePrefetcher(...))``) and the steps as the device ran them (:class:`StepTimer`).

    Only copies that had a step to overlap count: the copy of batch k that started before the step on
    batch k−1 ended (a copy that starts after it, because the loader delivered its batch late, had
    none). Returns (the time they overlapped a step ÷ the most they could have: each copy's duration,
    or the median step's when that is shorter; the number of such copies). (nan, 0) without any."""
    copies = [s for s in tl.spans if s.kind == "copy"]
    steps = [(s.start, s.end) for s in tl.spans if s.row == STEP_ROW]
    if not copies or not steps:
        return float("nan"), 0
    step_end = {(b.epoch, b.index): b.step_end for b in tl.batches}
    step_s = statistics.median(end - start for start, end in steps)
    overlapped = possible = 0.0
    count = 0
    for copy in copies:
        previous = step_end.get((copy.epoch, copy.batch - 1))
        if previous is None or copy.start >= previous:
            continue
        count += 1
        overlapped += sum(max(0.0, min(copy.end, end) - max(copy.start, start)) for start, end in steps)
        possible += min(copy.end - copy.start, step_s)
    return (overlapped / possible if possible > 0 else float("nan")), count


def overlap_check(claim: str, prefetched: Timeline, serialised: Timeline, min_copies: int = 3) -> Check:
    """The device prefetcher's copies run beside the steps, the serialised order's do not: of what the
    copies could overlap (:func:`copy_overlap`), at least half more with the prefetcher than in the
    serialised order (where every step waited for the next batch's copy: 0 %). Premise: at least
    ``min_copies`` of the prefetcher's copies started while a step was to come (in a data-bound run
    each batch arrives after the previous step ended: there is nothing to overlap)."""
    share, count = copy_overlap(prefetched)
    reference, reference_count = copy_overlap(serialised)
    reference = reference if reference_count else 0.0
    if count < min_copies:
        started = f"{count} of {len(prefetched.batches)} copies started before the previous step ended"
        return premise_failed(claim, started,
                              f"fewer than {min_copies} copies had a step to overlap: the loader delivered "
                              "the batches after the previous step had ended (data-bound)",
                              id="07.gpu.copies_beside_steps")
    # half: the two rows are CUDA events on one clock (microseconds apart), yet a copy queued in the short
    # gap between two steps runs partly beside neither
    return at_least(claim, share - reference, 0.5, unit="%",
                    what=f"of the overlap possible, prefetcher {share:.0%} of {count} copies − serialised "
                         f"order {reference:.0%} of {reference_count}", id="07.gpu.copies_beside_steps")


class StepTimer:
    """Calls ``step`` on each batch and notes when the step ran on ``device``: with CUDA events on
    the loop's stream (the first starts when the stream may run the step, i.e. after the waits the
    prefetcher queued for a copy; the step ends in a sync), on the host clock elsewhere.
    :meth:`add_spans` puts the steps on a recording's clock as its :data:`STEP_ROW` row."""

    def __init__(self, step: Callable[[Any], Any], device: Any):
        import torch

        self.step = step
        self.cuda = torch.device(device).type == "cuda"
        self._marks: list[tuple[Any, Any]] = []
        self._host_ends: list[float] = []
        self._anchor = None
        if self.cuda:  # a host time and an event taken together: the events' times on the host clock
            torch.cuda.synchronize(device)
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._anchor = (clock(), event)

    def __call__(self, batch: Any) -> None:
        if self.cuda:
            import torch

            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            self.step(batch)
            end.record()
            self._marks.append((begin, end))
        else:
            start = clock()
            self.step(batch)
            self._marks.append((start, clock()))
        self._host_ends.append(clock())

    def add_spans(self, tl: Timeline) -> Timeline:
        """Add the steps to ``tl`` (the recording this timer stepped, in its order) and return it. The
        recording's clock starts at an unknown host time: the offset is where the step's own end
        (host clock) fell against the recording's ``step_end`` of the same batch, microseconds apart."""
        if len(self._marks) != len(tl.batches):
            raise ValueError(f"this timer stepped {len(self._marks)} batches, the recording has "
                             f"{len(tl.batches)}")
        times = self._marks
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            anchor_s, anchor = self._anchor
            times = [(anchor_s + anchor.elapsed_time(b) / 1e3, anchor_s + anchor.elapsed_time(e) / 1e3)
                     for b, e in self._marks]
        offset = statistics.median(h - b.step_end for h, b in zip(self._host_ends, tl.batches, strict=True))
        tl.spans.extend(Span(STEP_ROW, "step", start - offset, end - offset, b.epoch, b.index)
                        for (start, end), b in zip(times, tl.batches, strict=True))
        return tl


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def gpu_runs(device) -> dict[str, Timeline]:
    """The tutorial's model on its images (batch 32, 4 workers, pinned), a real step with
    ``loss.item()`` each step: the loop copying each batch, the device prefetcher, its uint8
    variant, and the serialised prefetcher. Needs CUDA."""
    import torch
    from torch.utils.data import DataLoader

    from ..config import seconds, sized
    from ..data.datasets import TutorialDataset
    from ..data.prefetch import DevicePrefetcher, SerialisedDevicePrefetcher
    from ..models import TrainStep, TutorialNet
    from ..timing.recorder import record

    batch, count = 32, sized(48, 12)

    def loader(uint8: bool = False) -> DataLoader:
        dataset = TutorialDataset(batch * count, item_wait_s=seconds(0.005), uint8=uint8)
        return DataLoader(dataset, batch_size=batch, num_workers=4, pin_memory=True)

    def step() -> TrainStep:
        torch.manual_seed(0)
        return TrainStep(TutorialNet(), device, lr=0.01, sync_every_step=True)

    def run(uint8: bool = False, **how: Any) -> Timeline:
        timer = StepTimer(step(), device)  # the steps as the GPU ran them: a row beside the copies
        return timer.add_spans(record(loader(uint8), timer, **how))

    record(loader(), step(), device=device, max_batches=4, progress=False)  # warm-up: CUDA context, kernels
    return {
        "loop copies (pin_memory)": run(device=device),
        "DevicePrefetcher": run(wrap=lambda it: DevicePrefetcher(it, device)),
        "DevicePrefetcher, uint8 + normalise on device": run(
            uint8=True, wrap=lambda it: DevicePrefetcher(it, device, normalize=IMAGENET)),
        "serialised prefetcher": run(wrap=lambda it: SerialisedDevicePrefetcher(it, device)),
    }
