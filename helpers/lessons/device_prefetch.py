"""Notebook 07 · prefetching to the device: a thread hides a per-batch main-process transform (any
machine), a device prefetcher hides the host-to-device copy (CUDA), and neither hides slow data."""

from __future__ import annotations

from ..analysis import per_batch_s
from ..checks import Check, exceeds, near, premise_failed, timing_noise_s
from ..timeline import Timeline


def per_batch(runs: dict[str, Timeline]) -> dict[str, float]:
    """Time per batch per run (s): the mean of the repeating cycle of intervals, one position per
    worker (a data-bound loop alternates short and long intervals, so a median would mislead)."""
    return {name: per_batch_s(tl, max(tl.config.get("num_workers") or 1, 1), cycles=1)
            for name, tl in runs.items()}


def checks(host: dict[str, Timeline], bound: dict[str, Timeline], transform_s: float,
           gpu: dict[str, Timeline] | None) -> list[Check]:
    """``host``: "no transform", "transform in the loop's thread", "transform in a prefetch thread";
    ``bound``: the same two transforms on a data-bound loader; ``gpu``: runs on a CUDA device (or None)."""
    s = per_batch(host)
    # noise from the run without a transform: with one, a busy thread holds the GIL and delays the
    # loop's wake-ups (the effect the notebook's caveat is about, not machine noise)
    noise = timing_noise_s([b.step_s for b in host["no transform"].batches])
    out = [
        exceeds("in the loop's thread the transform adds to every batch", s["transform in the loop's thread"],
                s["no transform"], gap=transform_s, noise=noise),
        near("in a prefetch thread it is hidden: the pace is that of the run without it",
             s["transform in a prefetch thread"], s["no transform"], rel=0.2, noise_s=noise),
    ]
    b = per_batch(bound)
    ratio = b["data-bound, transform in the loop's thread"] / b["data-bound, transform in a prefetch thread"]
    out.append(near("data-bound: moving the transform to a thread changes nothing (fix the workers first)",
                    ratio, 1.0, rel=0.15, unit="×"))
    claim = "on a GPU: DevicePrefetcher is not slower than the loop copying each batch itself"
    if gpu is None:
        out.append(premise_failed(claim, "", "needs a CUDA GPU (torch.cuda.is_available() is False here)"))
    else:
        g = per_batch(gpu)
        out.append(near(claim, g["DevicePrefetcher"] / g["loop copies (pin_memory)"], 1.0, rel=0.1, unit="×")
                   if g["DevicePrefetcher"] > g["loop copies (pin_memory)"] else
                   Check(claim, f"{g['DevicePrefetcher'] / g['loop copies (pin_memory)']:.2f}×", True))
    return out


IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def gpu_runs(device) -> dict[str, Timeline]:
    """The tutorial's model on its images (batch 32, 4 workers, pinned), a real step with
    ``loss.item()`` each step: the loop copying each batch, the device prefetcher, its uint8
    variant, and the former serialised prefetcher. Needs CUDA."""
    import torch
    from torch.utils.data import DataLoader

    from ..config import seconds, sized
    from ..datasets import TutorialDataset
    from ..models import TrainStep, TutorialNet
    from ..prefetch import DevicePrefetcher, SerialisedDevicePrefetcher
    from ..recorder import record

    batch, count = 32, sized(48, 12)

    def loader(uint8: bool = False) -> DataLoader:
        dataset = TutorialDataset(batch * count, item_wait_s=seconds(0.005), uint8=uint8)
        return DataLoader(dataset, batch_size=batch, num_workers=4, pin_memory=True)

    def step() -> TrainStep:
        torch.manual_seed(0)
        return TrainStep(TutorialNet(), device, lr=0.01, sync_every_step=True)

    record(loader(), step(), device=device, max_batches=4, progress=False)  # warm-up: CUDA context, kernels
    return {
        "loop copies (pin_memory)": record(loader(), step(), device=device),
        "DevicePrefetcher": record(loader(), step(), wrap=lambda it: DevicePrefetcher(it, device)),
        "DevicePrefetcher, uint8 + normalise on device": record(
            loader(uint8=True), step(), wrap=lambda it: DevicePrefetcher(it, device, normalize=IMAGENET)),
        "former serialised prefetcher": record(loader(), step(),
                                               wrap=lambda it: SerialisedDevicePrefetcher(it, device)),
    }
