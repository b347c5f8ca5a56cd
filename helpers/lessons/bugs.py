"""Notebook 18 · bugs that don't crash: a generator copied into every worker, an iterable dataset
that forgets to shard (and each worker's short last batch), and the ragged last batch that
recompiles a ``torch.compile``'d step. Each claim is checked from sample ids and values (and
torch's own count of recompiles); the timing claims compare the ragged batch's step with the same
run's median step and with each fix's step at the same place.

Every ``*_checks`` function takes all the runs of its section, in any order, and finds each run by
its settings (the dataset, ``persistent_workers``, ``worker_init_fn``, ``drop_last``, …): a run the
lesson needs and the notebook did not make is a failed premise, not a pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..classroom.checks import Check, clearly_above, holds, premise_failed
from ..data.bugs.compiled import CompiledRun
from ..data.bugs.randomness import DrawRun
from ..data.bugs.streams import StreamRun, shard_tails

_GENERATORS = {"numpy": "np.random.default_rng(0)", "torch": "a torch.Generator"}


def _find(runs: Iterable[Any], test) -> Any | None:
    return next((r for r in runs if test(r)), None)


def share(run: DrawRun) -> int:
    """The most draws one worker made in one epoch: what every worker's copy of one generator can
    give, and so the distinct values a run with a generator made in ``__init__`` draws."""
    return max((len(v) for v in run.shares().values()), default=0)


def randomness_checks(runs: Iterable[DrawRun]) -> list[Check]:
    """Section 1: the runs of ``InitGeneratorDraws`` (numpy and torch), with persistent workers, with
    ``reseed_from_worker``, and ``PerSampleDraws`` with workers and with 0 workers."""
    runs = list(runs)
    out: list[Check] = []
    for source, name in _GENERATORS.items():
        bug = _find(runs, lambda r, s=source: r.source == s and not r.persistent and not r.reseeded)
        claims = (f"a generator made in __init__ ({name}) is copied into every worker: the workers draw the "
                  "same sequence",
                  f"without persistent workers every epoch starts from that copy ({name}): each epoch draws "
                  "the first epoch's values again")
        if bug is None or bug.num_workers < 2 or bug.epochs < 2:
            out += [premise_failed(c, "no run", f"no run of a {name} generator made in __init__ with 2 or "
                                   "more workers and 2 or more epochs") for c in claims]
            continue
        measured = f"{bug.describe()}; one worker's share: {share(bug)} draws"
        out.append(holds(claims[0], bug.workers_agree(), measured))
        out.append(holds(claims[1], bug.epochs_repeat(), measured))
    out += _fix_checks(runs)
    return out


def _fix_checks(runs: list[DrawRun]) -> list[Check]:
    out: list[Check] = []
    claim = ("persistent_workers=True: no epoch draws an earlier epoch's values again, yet the workers still "
             "draw the same sequence")
    kept = _find(runs, lambda r: r.source in _GENERATORS and r.persistent and not r.reseeded)
    if kept is None or kept.num_workers < 2 or kept.epochs < 2:
        out.append(premise_failed(claim, "no run", "no persistent run of a generator made in __init__ with "
                                  "2+ workers and 2+ epochs"))
    elif len({len(v) for v in kept.shares().values()}) > 1:
        out.append(premise_failed(claim, kept.describe(), "the workers drew unequal shares: a persistent "
                                  "worker's next epoch then continues into values another worker drew"))
    else:
        out.append(holds(claim, kept.repeats.across_epochs == 0 and kept.workers_agree(), kept.describe()))
    claim = ("reseeded in worker_init_fn from get_worker_info().seed: no value is drawn twice, by any worker "
             "or epoch")
    fixed = _find(runs, lambda r: r.reseeded and r.num_workers >= 2)
    if fixed is None:
        out.append(premise_failed(claim, "no run", "no run with worker_init_fn=reseed_from_worker and 2+ "
                                  "workers"))
    else:
        out.append(holds(claim, fixed.repeats.repeated == 0, fixed.describe()))
    # Seeding per sample from (epoch, index) draws no value twice by how the dataset is written: the
    # notebook shows its repeats (none) and its agreement with 0 workers; it is not a check.
    return out


def stream_checks(runs: Iterable[StreamRun]) -> list[Check]:
    """Section 2: ``UnshardedStream`` and ``ShardedStream`` with workers, the latter with
    ``drop_last`` off and on."""
    runs = list(runs)
    out: list[Check] = []
    bug = _find(runs, lambda r: r.dataset == "UnshardedStream" and r.num_workers >= 2)
    claim = "without sharding every worker yields the whole stream: each id arrives num_workers times"
    if bug is None:
        out.append(premise_failed(claim, "no run", "no run of UnshardedStream with 2 or more workers"))
    else:
        out.append(holds(claim, bug.arrivals() == {bug.num_workers: bug.length},
                         f"{bug.num_workers} workers: {bug.describe()}"))
    sharded = _find(runs, lambda r: r.dataset == "ShardedStream" and r.num_workers >= 2 and not r.drop_last)
    dropped = _find(runs, lambda r: r.dataset == "ShardedStream" and r.num_workers >= 2 and r.drop_last)
    claims = ("batches are built inside each worker: each worker ends its shard with a short batch of its "
              "own",
              "drop_last=True drops each worker's short batch: the samples lost are the shards' remainders, "
              "not N mod batch_size")
    if sharded is None or dropped is None:
        return out + [premise_failed(c, "no run", "needs ShardedStream runs with 2+ workers, drop_last off "
                                     "and on") for c in claims]
    predicted = shard_tails(sharded.length, sharded.num_workers, sharded.batch_size)
    # (that every id arrives once is how ShardedStream is written: shown, not checked)
    tails = Counter({t: n * sharded.epochs for t, n in Counter(t for t in predicted["tails"] if t).items()})
    out.append(holds(claims[0], Counter(sharded.short) == tails,
                     f"short batches {sharded.short}; predicted from the shards {predicted['shards']}: "
                     f"{[t for t in predicted['tails'] if t]} per epoch"))
    lost = dropped.lost_per_epoch
    out.append(holds(claims[1], lost == predicted["dropped"] and not dropped.short,
                     f"{lost} lost per epoch (predicted {predicted['dropped']}; a map-style loader: "
                     f"{predicted['map_style_dropped']}); {dropped.describe()}"))
    return out


def compile_checks(runs: Iterable[CompiledRun], noise_s: float) -> list[Check]:
    """Section 3: the plain run, ``drop_last=True``, ``PadToBatch`` and a dynamic batch dimension;
    ``noise_s``: the timing noise of the steps (``helpers.timing_noise_s``)."""
    runs = list(runs)
    out: list[Check] = []
    plain = _find(runs, lambda r: not (r.drop_last or r.padded or r.dynamic))
    claims = ("the ragged last batch makes torch.compile recompile the step — once, not every epoch (later "
              "epochs reuse what was compiled)",
              "on the timeline, the ragged batch's step is suddenly long: it compiles")
    ragged = None if plain is None else plain.ragged()
    if plain is None or ragged is None or plain.epochs < 2:
        return [premise_failed(c, "no run", "needs a plain run of 2+ epochs whose last batch is short")
                for c in claims]
    reasons = [e.recompile_reason or "" for e in plain.recompiles]
    out.append(holds(claims[0], len(reasons) == 1 and "index 0" in reasons[0], plain.describe()))
    out.append(clearly_above(claims[1], plain.steps_s[ragged], plain.typical_step_s(), noise=noise_s,
                             what=f"batch {ragged}'s step vs the median step"))
    # drop_last=True and padding never change the batch's shape, so they cannot recompile: the notebook
    # shows their steps, and only the dynamic batch dimension, whose shape does change, is checked.
    for name, test in (("the batch dimension marked dynamic", lambda r: r.dynamic),):
        claim = f"{name}: no recompile, and epoch 0's last step is short again"
        fix = _find(runs, test)
        if fix is None:
            out.append(premise_failed(claim, "no run", f"no run with {name}"))
            continue
        # the plain run's recompiling step against this run's step at the same place: the end of epoch 0
        last = clearly_above(claim, plain.steps_s[ragged], fix.steps_s[fix.epoch_end(0)], noise=noise_s,
                             what="the plain run's recompile vs this run's last step of epoch 0")
        passed = False if fix.recompiles else last.passed
        out.append(Check(claim, f"{fix.describe()}; {last.measured}", passed,
                         last.premise if passed is None else ""))
    padded = _find(runs, lambda r: r.padded)
    claim = ("padding trains on every sample once per epoch: the mask leaves the padding rows out "
             "(read from the loss's gradient: the rows it reached)")
    if padded is None:
        out.append(premise_failed(claim, "no run", "no run with PadToBatch"))
    else:
        once = padded.trained == {i: padded.epochs for i in range(padded.length)}
        out.append(holds(claim, once, f"{padded.trained_per_epoch():.0f} of {padded.length} samples per "
                         "epoch"))
    return out
