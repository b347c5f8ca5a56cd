"""Running a diagnosis: :func:`diagnose` records the loader, replays the same steps on kept
batches (the cache replay), and with ``verify=True`` follows the advice (:func:`with_changes`)."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from ...cores import cpu_limits
from .. import torch_internals
from ..analysis import settled_intervals
from ..recorder import record
from ..theory import step_time
from .advice import Recommendation, describe_change, ms
from .batches import private_copy, private_copy_all, spare_descriptors, stacked_share, storages_in
from .loaders import with_changes
from .result import Diagnosis, Followed
from .rules import recommend
from .rules.context import Context


def _others_busy_cores(window_s: float = 0.25) -> float | None:
    """Cores of this process's affinity mask that other processes kept busy during ``window_s``
    (this process sleeps meanwhile; psutil's per-CPU times). None when they cannot be read. One
    window is one sample of the machine's load: :func:`diagnose` keeps the quieter of one before the
    run and one after it, so that a program that was busy only for a moment (one that had just
    written the data, say) does not cap the workers."""
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


# -- following the advice ---------------------------------------------------------------------
def _mean_and_noise(d: Diagnosis, measure: str) -> tuple[float, float]:
    """Time per step (steady or whole run) and twice its standard error (s). A whole run's time
    varies most with its start-ups: one start-up's spread (the epochs' first batches) per step.
    Steady: the mean interval between steps once every worker of the epoch was up (from the
    first step's end on: :func:`~helpers.timing.analysis.settled_intervals`), the pace a
    recommendation predicts. Under spawn and forkserver the new workers are started one after
    another and each imports torch, and a short epoch can spend a fifth of its time with some of
    them still starting (forkserver, notebook 16: 28.8 ms a step against a
    predicted 21.3 ± 5.5, workers starting for 19 % of the run)."""
    if measure == "run":
        startups = [e.first_batch_s for e in d.timeline.epochs if e.first_batch_s is not None]
        spread = statistics.stdev(startups) if len(startups) >= 2 else 0.0
        return d.step_s, 2 * spread / max(d.steps, 1)
    gaps = settled_intervals(d.timeline)
    if len(gaps) < 3:
        return d.steady_step_s, 0.0
    return statistics.fmean(gaps), 2 * statistics.stdev(gaps) / math.sqrt(len(gaps))


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
    # A batch from a worker holds one shared-memory segment per storage, each an open file descriptor
    # under the file_descriptor strategy: kept batches of hundreds of tensors would run the process out
    # of them (the loader alone frees each batch after its step). Batches are kept as they came while
    # they hold a quarter of the spare descriptors at most, and copied into private memory past that
    # (a copy is timed as part of the step: only loaders that need it pay it).
    spare = spare_descriptors()
    budget = [spare // 4 if spare is not None else 256]

    def keep_and_step(batch: Any) -> Any:
        if len(kept) < replay:
            storages = storages_in(batch)
            if storages <= budget[0]:
                budget[0] -= storages
                kept.append(batch)
            else:
                try:
                    kept.append(private_copy(batch))
                except Exception:  # noqa: BLE001 - a batch type copying does not know: keep it as it came
                    kept.append(batch)
        return None if step is None else step(batch)

    epochs = max(1, math.ceil(steps / max(per_epoch, 1)))
    label = "diagnosing" if progress is True else progress
    busy_before = _others_busy_cores()  # before any worker of ours starts
    timeline = record(loader, keep_and_step, epochs=epochs, max_batches=steps, device=device, progress=label)
    if len(timeline.batches) < 2:
        raise ValueError(f"the loader gave {len(timeline.batches)} batch(es) in {epochs} epoch(s): a "
                         "diagnosis needs at least 2 (is the dataset empty, or an iterable that yields "
                         "nothing?)")
    replayed = _replay(step, kept, steps, device) if step is not None else None
    busy_after = _others_busy_cores()  # the workers are gone: the machine's own load again
    others_busy = min((b for b in (busy_before, busy_after) if b is not None), default=None)
    d = Diagnosis(timeline, replayed, cores=cpu_limits().describe(),
                  receive_alone_s=_receive_alone(kept), others_busy=others_busy,
                  sampler_s=sampler_alone(loader), storages=storages_in(kept[0]) if kept else None,
                  stacked=stacked_share(kept[0], loader.batch_size) if kept else None,
                  device=None if device is None else str(device))
    c = Context.of(d, loader, device)  # the rules' own reading: profile where the sample rule can speak
    if step is not None and (c.input_bound or (c.waiting and c.workers_at_pace)):
        # the loop waits, and the workers' fetches are what it waits for: where a sample's time goes
        # says what to cut
        d.profile = profile_sample(loader, d)
        if d.computes():
            from .stages import time_stages

            d.stages = time_stages(loader)
    d.recommendations = recommend(d, loader, device=device)
    if step is not None:
        contention = thread_contention(loader, step, d, steps=steps, device=device)
        if contention is not None:
            d.recommendations.append(contention)
    follow_advice(loader, step, d, 2 if verify is True else int(verify), steps=steps, device=device,
                  replay=replay, progress=progress)
    return d


def profile_sample(loader: DataLoader, d: Diagnosis) -> Any:
    """The profile of a few samples built where the loader builds them (:mod:`.profile`), read against
    the run's own fetch time (:mod:`.profiled`); None when it could not be taken."""
    from .profile import _library_paths, profile_samples
    from .profiled import read

    raw = profile_samples(loader)
    if raw is None:
        return None
    try:
        return read(raw, d.fetch_mean_s, loader.batch_size or 1, _library_paths())
    except Exception:  # noqa: BLE001 - the profile is extra: it never stops a diagnosis
        return None


#: The step under load this many times its time on cached batches or more: find out why.
SLOWER_UNDER_LOAD = 1.3


def thread_contention(loader: DataLoader, step: Callable[[Any], Any], d: Diagnosis, *, steps: int,
                      device: Any = None) -> Any:
    """When the step ran clearly slower beside the workers than on cached batches, and the main process
    splits its tensor operations over several intra-op threads (``torch.get_num_threads()``), those
    threads compete with the workers for the cores. Measured, not modelled: the loader runs again with
    one intra-op thread in the main process, and the advice gives both paces. None when the step kept
    its pace, uses one thread already, or one thread did not make it faster."""
    import torch

    from ...system import torch_threads

    threads = torch.get_num_threads()
    under_load = statistics.median(b.step_s for b in d.timeline.batches)
    if (d.replay_step_s is None or loader.num_workers == 0 or threads < 2
            or under_load < SLOWER_UNDER_LOAD * d.replay_step_s):
        return None
    with torch_threads(1):
        again = record(loader, step, epochs=max(1, len(d.timeline.epochs)), max_batches=steps, device=device,
                       progress=False)
    one = Diagnosis(again, d.replay_step_s)
    before_s, after_s = _mean_and_noise(d, "steady"), _mean_and_noise(one, "steady")
    if after_s[0] >= before_s[0] - math.hypot(before_s[1], after_s[1]) or after_s[0] > 0.95 * before_s[0]:
        return None
    return Recommendation(
        "threads", "torch.set_num_threads(1) in the training process (or fewer threads than free cores): "
        "its intra-op threads compete with the workers for the cores",
        f"the step took {ms(under_load)} beside the workers against {ms(d.replay_step_s)} on cached "
        f"batches, with {threads} intra-op threads; measured again with one: {ms(after_s[0])} per step "
        f"instead of {ms(before_s[0])}")


def follow_advice(loader: DataLoader, step: Callable[[Any], Any] | None, d: Diagnosis, rounds: int = 2, *,
                  steps: int = 200, device: Any = None, replay: int = 32,
                  progress: bool | str = True) -> None:
    """``diagnose(..., verify=rounds)`` after the fact: follow ``d``'s first recommendation that is a
    loader setting with a prediction on a copy of ``loader``, diagnose the copy and measure it beside
    the prediction; then the copy's own first one, ``rounds`` times at most. Appends to
    :attr:`Diagnosis.followed` as each round ends, so that a round that raises (a copy whose new workers
    cannot receive the dataset, say) leaves the rounds before it in ``d``."""
    current = (loader, d)
    for _ in range(rounds):
        following = next_to_follow(current[1])
        if following is None:
            break
        changed = with_changes(current[0], **following.change)
        label = f"after {describe_change(following.change)}" if progress else False
        before_s, before_noise = _mean_and_noise(current[1], following.measure)
        gap = _model_gap(current[0], current[1], before_s, following)
        # whatever else the machine does only ever slows a run down (record_fastest): a run after that
        # came out slower than predicted is recorded once more, and the faster of the two kept
        runs: list[Followed] = []
        for again in ("", ", again"):
            after = diagnose(changed, step, steps=steps, device=device, replay=replay, verify=False,
                             progress=label and label + again)
            after_s, after_noise = _mean_and_noise(after, following.measure)
            # a run's prediction carries one start-up of the run before, its measurement one of its
            # own: two draws of the spread measured before (the run after has one start-up, no spread)
            noise = (math.sqrt(2) * before_noise if following.measure == "run"
                     else math.hypot(before_noise, after_noise))
            runs.append(Followed(following, before_s, after_s, noise, after, gap))
            if runs[0].after_s - runs[0].predicted_s <= runs[0].tolerance_s:
                break
        followed = min(runs, key=lambda f: f.after_s)
        if len(runs) == 2:
            followed.slower_run_s = max(f.after_s for f in runs)
        d.followed.append(followed)
        current = (changed, followed.after)


def next_to_follow(d: Diagnosis) -> Any:
    """The recommendation :func:`follow_advice` follows next on ``d``: the first that is a loader
    setting with a prediction (None when there is none)."""
    return next((r for r in d.recommendations if r.change is not None and r.predicted_s is not None), None)


def _model_gap(loader: DataLoader, d: Diagnosis, before_s: float, following: Any) -> float:
    """How much slower the loader ran (steady) than the step-time model predicts for it with its
    own n, y and m: per-step costs the model leaves out. At most 10 % of the recommendation's
    prediction, so that a model that misses the loader (stragglers the mean hides) cannot widen
    the check past it; 0 for a whole-run measure or without a step."""
    if following.measure == "run" or not d.replay_step_s or following.predicted_s is None:
        return 0.0
    model_s = step_time(d.fetch_mean_s, d.replay_step_s, loader.num_workers, main_s=d.main_s)
    return min(max(0.0, before_s - model_s), 0.1 * following.predicted_s)


def sampler_alone(loader: DataLoader, batches: int = 32, budget_s: float = 1.0) -> float | None:
    """The main process's time per batch in ``next()`` on the loader's index sampler (its batch sampler,
    or sampler), measured alone after the run: the DataLoader calls it in the loop's thread for every
    batch it asks a worker for. Up to ``batches`` batches or ``budget_s``; None for an iterable dataset
    or a sampler that fails here."""
    sampler = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    if sampler is None or isinstance(loader.dataset, IterableDataset):
        return None
    times = []
    try:
        indices = iter(sampler)
        spent = 0.0
        while len(times) < batches and spent < budget_s:
            start = time.perf_counter()
            try:
                next(indices)
            except StopIteration:
                break
            times.append(time.perf_counter() - start)
            spent += times[-1]
    except Exception:  # noqa: BLE001 - the run used it already; no number rather than a broken diagnosis
        return None
    return statistics.fmean(times) if times else None


def _receive_alone(kept: list[Any], count: int = 8) -> float | None:
    """The median time to unpickle a kept batch as the main process does when it arrives from a
    worker (its tensors rebuilt from shared memory, handles and all), with no worker running.
    Each is pickled from a fresh copy, dropped after: the kept batch stays in private memory. A batch
    whose hand-over here would need more descriptors than the process has spare (about three per
    storage: the sent segment, the one lent, the received one) is left out; None when all are."""
    from multiprocessing import resource_sharer
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions, as in the loader)

    times = []
    try:
        for batch in kept[:count]:
            spare = spare_descriptors()
            if spare is not None and 3 * storages_in(batch) + 16 > spare:
                continue
            sent = private_copy_all(batch)
            data = ForkingPickler.dumps(sent)
            start = time.perf_counter()
            received = ForkingPickler.loads(data)
            times.append(time.perf_counter() - start)
            del sent, data, received
    except Exception:  # noqa: BLE001 - a batch that does not travel so here: no number
        return None
    finally:
        resource_sharer.stop(timeout=5)  # it lent this process's descriptors to itself: done
    return statistics.median(times) if times else None


def _replay(step: Callable[[Any], Any], kept: list[Any], steps: int, device: Any) -> float:
    """The loop's time per step on batches already in hand (copied to the device as in the run)."""
    from ..device import synchronize, to_device, wait_for_step

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
