"""Notebook 14 · a real image pipeline: JPEG decoding and augmentation are CPU-bound, so
worker processes scale with the free cores and stop at the core count; threads help only as
far as the decoder releases the GIL (large images) and lose for tiny ones; one packed shard
beats a GET per file on remote storage. (That uint8 batches are a quarter of float32's is
shown, not checked: it is dtype arithmetic.)"""

from __future__ import annotations

from ..checks import Check, at_least, at_most, premise_failed

#: The least speedup that counts as "scales" on two free cores (perfect is 2×; batching,
#: collate and the main process take some of the second core).
SCALES = 1.5


def _startup_lag(
    lags: dict[int, float], rates: dict[int, float], spans: dict[int, float], workers: int
) -> str:
    lag = lags.get(workers, 0.0)
    if lag > 0.25 * spans.get(workers, float("inf")):
        return (
            f"the {workers} workers came up {lag:.2f} s apart, over a quarter of the run "
            f"({spans[workers]:.2f} s): start-up, not decoding, shaped it (use more images)"
        )
    return ""


def checks(
    rates: dict[int, float],
    *,
    cores: int,
    cores_free: float,
    lags: dict[int, float],
    spans: dict[int, float],
    threads: dict[str, dict[str, float]],
    shard: tuple[float, float] | None,
    machine_cores: int | None = None,
    thread_lags: dict[str, float] | None = None,
) -> list[Check]:
    """``rates``: images/s with 0.. workers; ``cores``: the cores the sweep went to (the
    machine's, at most 8; ``machine_cores``: the machine's, when more); ``cores_free``: the
    cores measured free (:func:`helpers.free_cores`); ``lags``/``spans``: per worker count, how
    far apart its workers came up and how long its run lasted (s); ``threads``: per image size
    ("large", "tiny") images/s of "1 worker", "2 threads" (one worker, a pool in
    ``__getitems__``) and "2 workers";
    ``shard``: seconds to read the same images from the store as one GET per file and as one
    GET of the shard (None: not run); ``thread_lags``: per image size, how far apart the two
    workers of the "2 workers" run came up, as a share of that run."""
    thread_lags = thread_lags or {}
    out: list[Check] = []
    need_free = min(2, cores) - 0.3
    claim = f"decoding is CPU-bound: 2 workers deliver at least {SCALES}× the images/s of 1"
    ratio = rates.get(2, float("nan")) / rates.get(1, float("nan"))
    why = _startup_lag(lags, rates, spans, 2)
    if cores < 2 or cores_free < need_free:
        out.append(
            premise_failed(
                claim,
                f"{ratio:.2f}×",
                f"{cores_free:.2f} cores measured free "
                f"({cores} on the machine): two workers cannot run side by side",
            )
        )
    elif why:
        out.append(premise_failed(claim, f"{ratio:.2f}×", why))
    else:
        out.append(at_least(claim, ratio, SCALES, unit="×", what=f"{rates[1]:.0f} → {rates[2]:.0f} images/s"))
    beyond = cores + 1
    claim = f"workers beyond the cores add nothing: {beyond} workers at most 1.15× the images/s of {cores}"
    if machine_cores is not None and machine_cores > cores:
        out.append(
            premise_failed(
                claim,
                "",
                f"this machine has {machine_cores} cores; the notebook's sweep stops at {beyond} workers",
            )
        )
    elif beyond not in rates or cores not in rates:
        out.append(premise_failed(claim, "", f"no run with {beyond} workers"))
    else:
        ratio = rates[beyond] / rates[cores]
        why = _startup_lag(lags, rates, spans, beyond) or _startup_lag(lags, rates, spans, cores)
        if cores_free < cores - 0.3:
            # with other programs busy, more processes win a larger share of the cores (notebook 04)
            out.append(
                premise_failed(
                    claim,
                    f"{ratio:.2f}×",
                    f"only {cores_free:.2f} of {cores} cores were "
                    "free: more processes then win a larger share of them",
                )
            )
        elif why:
            out.append(premise_failed(claim, f"{ratio:.2f}×", why))
        else:
            out.append(
                at_most(claim, ratio, 1.15, unit="×", what=f"{rates[cores]:.0f} → {rates[beyond]:.0f}")
            )
    large, tiny = threads.get("large", {}), threads.get("tiny", {})
    claim = (
        "large images: decode_jpeg and the v2 transforms release the GIL — 2 threads in one worker ≥ 1.25× 1"
    )
    ratio = large.get("2 threads", float("nan")) / large.get("1 worker", float("nan"))
    if cores_free < need_free:
        out.append(premise_failed(claim, f"{ratio:.2f}×", f"{cores_free:.2f} cores measured free"))
    else:
        out.append(at_least(claim, ratio, 1.25, unit="×", what="1 thread"))
    claim = (
        "tiny images: Python per image dominates and threads contend for the GIL — "
        "2 worker processes ≥ 1.5× 2 threads"
    )
    ratio = tiny.get("2 workers", float("nan")) / tiny.get("2 threads", float("nan"))
    if cores_free < need_free:
        out.append(premise_failed(claim, f"{ratio:.2f}×", f"{cores_free:.2f} cores measured free"))
    elif thread_lags.get("tiny", 0.0) > 0.25:
        out.append(
            premise_failed(
                claim,
                f"{ratio:.2f}×",
                f"the 2 workers came up apart by "
                f"{thread_lags['tiny']:.0%} of their run: start-up, not decoding, "
                "shaped it (use more images)",
            )
        )
    else:
        out.append(at_least(claim, ratio, 1.5, unit="×", what="2 threads"))
    claim = (
        "from remote storage, one GET of the shard reads the images at least 3× faster than a GET per file"
    )
    if shard is None:
        out.append(premise_failed(claim, "", "the store was not used"))
    else:
        files_s, shard_s = shard
        out.append(
            at_least(claim, files_s / shard_s, 3.0, unit="×", what=f"{files_s:.2f} s vs {shard_s:.3f} s")
        )
    return out
