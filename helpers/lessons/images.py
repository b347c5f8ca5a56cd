"""Notebook 14 · a real image pipeline: JPEG decoding and augmentation are CPU-bound, so
worker processes scale with the free cores and stop at the effective cores; threads help only as
far as the decoder releases the GIL (large images) and lose for tiny ones. (That one packed shard
beats a GET per file on the lab's store, and that uint8 batches are a quarter of float32's, are
shown, not checked: the lab's round trips and dtype arithmetic.)"""

from __future__ import annotations

import math

from ..classroom.checks import Check, at_least, at_most, premise_failed
from .limits import effective_cpus

#: The least speedup that counts as "scales" on two free cores (perfect is 2×; batching,
#: collate and the main process take some of the second core).
SCALES = 1.5


def _too_few_cores(capacity: float, cores_free: float, need_free: float) -> str:
    if capacity < need_free:
        return (f"{capacity:g} effective core{'s' if capacity != 1 else ''} (helpers.cpu_limits: the "
                "affinity mask capped by any CPU quota): two workers cannot each decode on a core of "
                "their own")
    if cores_free < need_free:
        return (f"{cores_free:.2f} cores measured free ({capacity:g} effective): "
                "two workers cannot decode side by side")
    return ""


def checks(
    rates: dict[int, float],
    *,
    cores: int,
    cores_free: float,
    threads: dict[str, dict[str, float]],
    shard: tuple[float, float] | None,
    cpu_per_image: dict[int, float] | None = None,
    effective: float | None = None,
) -> list[Check]:
    """``rates``: decoding rates (:func:`helpers.decode_rate`, images/s) with 0.. workers;
    ``cores``: the effective cores as a count of busy processes (:func:`helpers.available_cores`),
    where the sweep went to ``cores + 1``; ``effective``: the CPUs themselves
    (:func:`helpers.effective_cores`: 1.5 under a quota of 1.5, where ``cores`` is 2; default
    ``cores``); ``cores_free``: the cores measured free (:func:`helpers.free_cores`);
    ``threads``: per image size ("large", "tiny") decoding rates of "1 worker", "2 threads" (one
    worker, a pool in ``__getitems__``) and "2 workers"; ``shard``: seconds to read the same
    images from the store as one GET per file and as one GET of the shard (None: not run);
    ``cpu_per_image``: per worker count, the fetching processes' CPU seconds per image
    (:func:`helpers.cpu_per_image`); "beyond the cores" then compares images/s × CPU per image
    (at one CPU speed), and without it the images/s alone. ``shard``: the notebook's to show (one GET
    instead of one per image saves the lab's own round trips: not a check).

    Decoding rates leave worker start-up out (spawned workers import torch and come up seconds
    apart on a slow machine), so no check needs a start-up premise."""
    out: list[Check] = []
    capacity = effective_cpus(cores, effective)
    need_free = 2 - 0.3  # two workers, a core each
    too_few = _too_few_cores(capacity, cores_free, need_free)
    claim = f"2 workers decode side by side: at least {SCALES}× the images/s of 1"
    ratio = rates.get(2, float("nan")) / rates.get(1, float("nan"))
    if too_few:
        out.append(premise_failed(claim, f"{ratio:.2f}×", too_few, id="14.decode.workers_scale"))
    else:
        out.append(at_least(claim, ratio, SCALES, unit="×", what=f"{rates[1]:.0f} → {rates[2]:.0f} images/s",
                            id="14.decode.workers_scale"))
    beyond = cores + 1
    cpu = cpu_per_image or {}
    at_one_speed = all(math.isfinite(cpu.get(w, float("nan"))) and cpu[w] > 0 for w in (cores, beyond))
    claim = (f"workers beyond the cores add nothing: {beyond} workers decode at most 1.15× "
             f"the images/s of {cores}" + (" at one CPU speed" if at_one_speed else ""))
    if beyond not in rates or cores not in rates:
        out.append(premise_failed(claim, "", f"no run with {beyond} workers",
                                  id="14.decode.little_gain_beyond_the_cores"))
    else:
        ratio = rates[beyond] / rates[cores]
        what = f"{rates[cores]:.0f} → {rates[beyond]:.0f}"
        if at_one_speed:
            # The machine's speed can change between two sub-second runs (a virtual machine beside busy
            # neighbours), enough to read 826 → 1007 images/s (1.22×) for a worker that adds nothing; the
            # workers' CPU per image moves with it. images/s × CPU per image is the cores' worth of
            # decoding, whatever the speed.
            what = (f"{what} images/s, {ratio:.2f}× as measured; CPU per image {cpu[cores] * 1e3:.2f} → "
                    f"{cpu[beyond] * 1e3:.2f} ms")
            ratio *= cpu[beyond] / cpu[cores]
        if cores_free < max(1.0, capacity) - 0.3:  # below one CPU: every run stopped alike (notebook 04)
            # with other programs busy, more processes win a larger share of the cores (notebook 04)
            out.append(
                premise_failed(
                    claim,
                    f"{ratio:.2f}× ({what})",
                    f"only {cores_free:.2f} of {max(1.0, capacity):g} effective cores were "
                    "free: more processes then win a larger share of them",
                    id="14.decode.little_gain_beyond_the_cores",
                )
            )
        else:
            out.append(at_most(claim, ratio, 1.15, unit="×", what=what,
                               id="14.decode.little_gain_beyond_the_cores"))
    large, tiny = threads.get("large", {}), threads.get("tiny", {})
    claim = (
        "large images: the C++ operators (decoding most of all) release the GIL — "
        "2 threads in one worker ≥ 1.25× 1"
    )
    ratio = large.get("2 threads", float("nan")) / large.get("1 worker", float("nan"))
    if too_few:
        out.append(premise_failed(claim, f"{ratio:.2f}×", too_few,
                                  id="14.threads.large_images_release_the_gil"))
    else:
        out.append(at_least(claim, ratio, 1.25, unit="×", what="1 thread",
                            id="14.threads.large_images_release_the_gil"))
    claim = (
        "tiny images: Python per image dominates and threads contend for the GIL — "
        "2 worker processes ≥ 1.5× 2 threads"
    )
    ratio = tiny.get("2 workers", float("nan")) / tiny.get("2 threads", float("nan"))
    if too_few:
        out.append(premise_failed(claim, f"{ratio:.2f}×", too_few, id="14.threads.tiny_images_hold_the_gil"))
    else:
        out.append(at_least(claim, ratio, 1.5, unit="×", what="2 threads",
                            id="14.threads.tiny_images_hold_the_gil"))
    return out
