"""Notebook 18's workloads, for real: who draws which random value in workers (fork and spawn), sharded
and unsharded streams with each worker's short batch, a compiled step's recompiles, the figures and
the explorer. Counts of ids, values and compiles only: no timing is asserted here."""

from __future__ import annotations

import multiprocessing as mp
import pickle

import matplotlib
import pytest
import torch
from torch.utils.data import DataLoader

import helpers
from helpers.data.bugs.randomness import count_repeats, repeat_flags

matplotlib.use("Agg")
METHODS = [m for m in ("fork", "spawn") if m in mp.get_all_start_methods()]


def drawn(dataset, *, epochs=2, **settings):
    loader = DataLoader(dataset, batch_size=2, **settings)
    kept = helpers.KeepBatches()
    tl = helpers.record(loader, kept, epochs=epochs, progress=False)
    return helpers.draws_of(loader, tl, kept)


CASES = [("fork", "numpy")] + [("spawn", "torch")] * ("spawn" in METHODS)  # torch's generator: sent as bytes


@pytest.mark.parametrize(("method", "kind"), CASES)
def test_a_generator_made_in_init_repeats_across_workers_and_epochs(method, kind):
    epochs = 2 if method == "fork" else 1  # under spawn one start: the copy each worker receives
    run = drawn(helpers.InitGeneratorDraws(8, kind=kind), num_workers=2, multiprocessing_context=method,
                epochs=epochs)
    # 2 workers × 2 batches of 2 per epoch: each worker draws the same 4 values, every epoch
    assert run.source == kind and run.workers_agree() and run.repeats.distinct == 4
    if epochs == 2:
        assert run.epochs_repeat() and (run.repeats.within_epoch, run.repeats.across_epochs) == (8, 4)


@pytest.mark.parametrize("method", METHODS)
def test_the_fixes_draw_every_value_once(method):
    # persistent workers: one start per loader under spawn (the fixes hold with or without them)
    workers = dict(num_workers=2, multiprocessing_context=method, persistent_workers=True)
    reseeded = drawn(helpers.InitGeneratorDraws(8, kind="torch"), worker_init_fn=helpers.reseed_from_worker,
                     **workers)
    assert reseeded.reseeded and reseeded.repeats.repeated == 0
    per_sample = drawn(helpers.PerSampleDraws(8), sampler=helpers.EpochCountingSampler(8), **workers)
    alone = drawn(helpers.PerSampleDraws(8), sampler=helpers.EpochCountingSampler(8))
    assert per_sample.repeats.repeated == 0 and helpers.same_draws(per_sample, alone)
    if method == "fork":  # NumPy's global generator, reseeded by PyTorch in each worker: the contrast
        assert drawn(helpers.GlobalDraws(8), **workers).repeats.repeated == 0


def test_persistent_workers_fix_the_epochs_but_not_the_workers():
    run = drawn(helpers.InitGeneratorDraws(8), num_workers=2, persistent_workers=True)
    assert run.persistent and run.workers_agree() and run.repeats.across_epochs == 0
    assert not drawn(helpers.InitGeneratorDraws(8)).workers_agree()  # 0 workers: one generator, no repeat


def test_a_torch_generator_in_a_dataset_travels_as_bytes():
    dataset = helpers.InitGeneratorDraws(4, kind="torch")
    dataset[0]
    copy = pickle.loads(pickle.dumps(dataset))
    assert isinstance(copy.rng, torch.Generator) and copy[1] == dataset[1]


def test_the_epoch_counting_sampler_counts_passes_it_starts():
    sampler = helpers.EpochCountingSampler(3)
    unused = iter(sampler)  # made and dropped, as DataLoader does: not a pass
    del unused
    assert list(sampler) == [(0, 0), (0, 1), (0, 2)] and [e for e, _ in sampler] == [1, 1, 1]
    sampler.set_epoch(7)
    assert next(iter(sampler)) == (7, 0)


def test_repeats_are_told_apart_by_epoch():
    run = drawn(helpers.InitGeneratorDraws(4), num_workers=2)
    flags = repeat_flags(run.draws)
    assert flags.count("epoch") == 4 and flags.count("earlier epoch") == 2
    assert count_repeats(run.draws).describe().startswith("2 distinct of 8 draws")


@pytest.mark.parametrize("method", METHODS)
def test_streams_unsharded_sharded_and_each_workers_short_batch(method):
    def run(dataset, **settings):
        loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context=method, **settings)
        kept = helpers.KeepBatches()
        return helpers.stream_run(loader, helpers.record(loader, kept, progress=False), kept)

    sharded = run(helpers.ShardedStream(10))
    assert sharded.arrivals() == {1: 10} and sorted(sharded.short) == [1, 1]
    if method != "fork":
        return  # the streams are plain classes: one loader shows they travel
    assert run(helpers.UnshardedStream(10)).arrivals() == {2: 10}
    dropped = run(helpers.ShardedStream(10), drop_last=True)
    assert dropped.lost_per_epoch == helpers.shard_tails(10, 2, 4)["dropped"] == 2 and not dropped.short
    assert list(helpers.ShardedStream(5)) == [0, 1, 2, 3, 4]  # no workers: the whole stream


def test_padding_keeps_the_shape_and_masks_the_rows():
    x, y, ids, keep = helpers.PadToBatch(4)([helpers.Features(6)[i] for i in (4, 5)])
    assert x.shape == (4, 64) and ids.tolist() == [4, 5, -1, -1]
    assert keep.tolist() == [True, True, False, False]
    with pytest.raises(ValueError, match="batch_size"):
        helpers.PadToBatch(0)


def test_a_compiled_step_counts_the_recompile_of_the_ragged_batch():
    dataset = helpers.Features(20, features=8)
    runs, steps = {}, {}
    padded = {"collate_fn": helpers.PadToBatch(8)}
    for name, settings, dynamic in [("plain", {}, False), ("padded", padded, False), ("dynamic", {}, True)]:
        steps[name] = helpers.CompiledStep(features=8, hidden=16, backend="eager", dynamic_batch=dynamic)
        loader = DataLoader(dataset, batch_size=8, **settings)
        tl = helpers.record(loader, steps[name], epochs=2, progress=False)
        runs[name] = helpers.compiled_run(loader, tl, steps[name])
    plain = runs["plain"]
    assert len(plain.compiles) == 2 and len(plain.recompiles) == 1 and plain.ragged() == 2
    assert "index 0" in plain.recompiles[0].recompile_reason
    assert len(steps["plain"].recompiles) == 1  # kept when the next step reset torch's record
    assert not runs["padded"].recompiles and runs["padded"].ragged() is None and runs["padded"].padded
    assert runs["padded"].trained == {i: 2 for i in range(20)}
    assert not runs["dynamic"].recompiles and runs["dynamic"].dynamic


def test_the_trained_count_reads_the_rows_the_loss_reached():
    # A padded batch whose mask keeps every row (a loss that forgot the mask): the padding rows reach
    # the loss, and the count says so under id -1; with the mask, only the real rows.
    step = helpers.CompiledStep(features=8, hidden=16, backend="eager")
    x, y, ids, keep = helpers.PadToBatch(4)([helpers.Features(6, features=8)[i] for i in (4, 5)])
    step((x, y, ids, torch.ones_like(keep)))
    assert step.trained == {4: 1, 5: 1, -1: 2}
    masked = helpers.CompiledStep(features=8, hidden=16, backend="eager")
    masked((x, y, ids, keep))
    assert masked.trained == {4: 1, 5: 1}


def test_the_backend_follows_the_mode_and_the_compiler(monkeypatch):
    monkeypatch.setenv("DLLAB_SMOKE", "1")
    assert helpers.compile_backend()[0] == "eager"
    monkeypatch.setenv("DLLAB_SMOKE", "0")
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert helpers.compile_backend()[0] == "aot_eager"
    monkeypatch.setenv("CXX", "sh")  # any program found on PATH
    assert helpers.compile_backend()[0] == "inductor"


def test_the_figures_draw_every_run():
    bug = drawn(helpers.InitGeneratorDraws(8), num_workers=2)
    assert len(helpers.plot_draws({"bug": bug, "fixed": drawn(helpers.GlobalDraws(8))}).axes) == 2
    loader = DataLoader(helpers.ShardedStream(10), batch_size=4, num_workers=2)
    kept = helpers.KeepBatches()
    stream = helpers.stream_run(loader, helpers.record(loader, kept, progress=False), kept)
    assert len(helpers.plot_stream_ids({"sharded": stream}).axes) == 1
    assert len(helpers.plot_batch_sizes({"a": stream, "b": stream}).axes) == 2
    with pytest.raises(ValueError, match="KeepBatches"):
        helpers.stream_run(loader, helpers.record(loader, progress=False), kept.batches[:1])


def test_the_explorer_runs_and_refuses_persistent_workers_without_workers():
    explorer = helpers.RandomnessExplorer(length=8, batch_size=2, num_workers=2, epochs=2)
    run = explorer.run()
    assert explorer.runs == 1 and run.repeats.distinct == 4 and "distinct" in explorer.summary.value
    explorer.num_workers.value, explorer.persistent.value = 0, True
    assert explorer.run(raise_errors=False) is None and "num_workers" in explorer.summary.value
    with pytest.raises(ValueError, match="source must be one of"):
        helpers.RandomnessExplorer(source="nope")


def test_reseeding_from_the_worker_does_not_replay_the_global_torch_stream(monkeypatch):
    """In a worker PyTorch calls torch.manual_seed(info.seed); a dataset generator seeded with that same
    seed would draw what a transform drawing from the global generator (torchvision's) draws: one
    "random" crop and flip, correlated with the dataset's own draws. reseed_from_worker derives a
    stream of its own."""
    import torch
    from torch.utils.data._utils import worker

    seed = 1234
    dataset = helpers.InitGeneratorDraws(4, kind="torch")
    monkeypatch.setattr(worker, "_worker_info",
                        worker.WorkerInfo(id=0, num_workers=1, seed=seed, dataset=dataset))
    with torch.random.fork_rng(devices=[]):  # the test's own global generator is left as it was
        torch.manual_seed(seed)  # what _worker_loop does before worker_init_fn
        helpers.reseed_from_worker(0)
        own = [dataset[i]["draw"] for i in range(4)]
        global_draws = [torch.rand((), dtype=torch.float64).item() for _ in range(4)]
        assert own != global_draws
        # the mistake it avoids: the worker's seed itself replays the global stream, draw for draw
        dataset.rng.manual_seed(seed)
        torch.manual_seed(seed)
        replayed = [torch.rand((), dtype=torch.float64).item() for _ in range(4)]
        assert [dataset[i]["draw"] for i in range(4)] == replayed
