"""Notebook 18 · bugs that don't crash: a generator copied into every worker, an iterable dataset
that forgets to shard (and each worker's short last batch), and the ragged last batch that
recompiles a ``torch.compile``'d step. The generator claims are checked from the values drawn; the
ragged batch's step is compared with the same run's median step.

Every ``*_checks`` function takes all the runs of its section, in any order, and finds each run by
its settings (the dataset, ``persistent_workers``, ``worker_init_fn``, ``drop_last``, …): a run the
lesson needs and the notebook did not make is a failed premise, not a pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..classroom.checks import Check, clearly_above, holds, premise_failed
from ..data.bugs.compiled import CompiledRun
from ..data.bugs.randomness import DrawRun
from ..data.bugs.streams import StreamRun

_GENERATORS = {"numpy": "np.random.default_rng(0)", "torch": "a torch.Generator"}


def _find(runs: Iterable[Any], test) -> Any | None:
    return next((r for r in runs if test(r)), None)


def share(run: DrawRun) -> int:
    """The most draws one worker made in one epoch: what every worker's copy of one generator can
    give, and so the distinct values a run with a generator made in ``__init__`` draws."""
    return max((len(v) for v in run.shares().values()), default=0)


def fewest_draws(run: DrawRun) -> int:
    """The fewest values any worker drew in any epoch (0 when a worker drew nothing in some epoch)."""
    shares = run.shares()
    if len(shares) < run.num_workers * run.epochs:
        return 0
    return min((len(v) for v in shares.values()), default=0)


def randomness_checks(runs: Iterable[DrawRun]) -> list[Check]:
    """Section 1: the runs of ``InitGeneratorDraws`` (numpy and torch), with persistent workers, with
    ``reseed_from_worker``, and ``PerSampleDraws`` with workers and with 0 workers.

    That the copied generator then draws the first epoch's values again every epoch without persistent
    workers, and continues its own copy with them, follows from the copy by how processes work: the
    notebook counts the draws, and only the copy itself and the fix are checked."""
    runs = list(runs)
    out: list[Check] = []
    for source, name in _GENERATORS.items():
        bug = _find(runs, lambda r, s=source: r.source == s and not r.persistent and not r.reseeded)
        # A torch that reseeded every generator a dataset holds in each worker (pytorch/pytorch PR
        # #107131, reverted by #107756) would make the workers' draws differ.
        claim = (f"a generator made in __init__ ({name}) is copied into every worker: the workers draw the "
                 "same sequence")
        if bug is None or bug.num_workers < 2 or fewest_draws(bug) < 2:
            out.append(premise_failed(claim, "no run" if bug is None else bug.describe(),
                                      f"no run of a {name} generator made in __init__ with 2 or more "
                                      "workers, each drawing 2 or more values",
                                      id="18.generator.workers_draw_the_same"))
            continue
        out.append(holds(claim, bug.workers_agree(),
                         f"{bug.describe()}; one worker's share: {share(bug)} draws",
                         id="18.generator.workers_draw_the_same"))
    claim = ("reseeded in worker_init_fn from get_worker_info().seed: no value is drawn twice, by any worker "
             "or epoch")
    fixed = _find(runs, lambda r: r.reseeded and r.num_workers >= 2 and not r.persistent)
    # A repeat could show only where 2+ workers each draw 2+ values in each of 2+ epochs, every epoch
    # starting new workers (persistent ones would continue their streams whatever the seed).
    if fixed is None or fixed.epochs < 2 or fewest_draws(fixed) < 2:
        out.append(premise_failed(claim, "no run" if fixed is None else fixed.describe(),
                                  "no run with worker_init_fn=reseed_from_worker, 2+ workers without "
                                  "persistent_workers and 2+ epochs, each worker drawing 2+ values an epoch",
                                  id="18.reseed.no_repeats"))
    else:
        out.append(holds(claim, fixed.repeats.repeated == 0, fixed.describe(), id="18.reseed.no_repeats"))
    # Seeding per sample from (epoch, index) draws no value twice by how the dataset is written: the
    # notebook shows its repeats (none) and its agreement with 0 workers; it is not a check.
    return out


def stream_checks(runs: Iterable[StreamRun]) -> list[Check]:
    """Section 2: ``UnshardedStream`` and ``ShardedStream`` with workers, the latter with ``drop_last``
    off and on. No check: that every worker yields the whole unsharded stream, and that each worker
    batches (and drops) its own shard's tail, is PyTorch's documented behaviour for an
    ``IterableDataset`` and its arithmetic (:func:`helpers.data.bugs.streams.shard_tails`); the
    notebook counts the ids and the short batches."""
    return []


def compile_checks(runs: Iterable[CompiledRun], noise_s: float) -> list[Check]:
    """Section 3: the plain run, ``drop_last=True``, ``PadToBatch`` and a dynamic batch dimension;
    ``noise_s``: the timing noise of the steps (``helpers.timing_noise_s``).

    One check: the ragged batch's step is long because it compiles (warm caches or automatic dynamic
    shapes could hide that). Torch's own count of recompiles (once, not every epoch), that a batch
    dimension marked dynamic or a batch that keeps its shape never recompiles, and that the padding
    mask trains every sample once (the lab's own loss), are shown by the notebook, not checked."""
    runs = list(runs)
    plain = _find(runs, lambda r: not (r.drop_last or r.padded or r.dynamic))
    claim = "on the timeline, the ragged batch's step is suddenly long: it compiles"
    ragged = None if plain is None else plain.ragged()
    if plain is None or ragged is None or plain.epochs < 2:
        return [premise_failed(claim, "no run", "needs a plain run of 2+ epochs whose last batch is short",
                               id="18.compile.ragged_step_is_long")]
    return [clearly_above(claim, plain.steps_s[ragged], plain.typical_step_s(), noise=noise_s,
                          what=f"batch {ragged}'s step vs the median step",
                          id="18.compile.ragged_step_is_long")]
