"""Worker state across epochs (PyTorch #97326) and worker memory."""

from __future__ import annotations

import os

import pytest

import helpers
from conftest import make_loader


def epochs_seen(loader, epochs=3, before_epoch=None):
    """Run `epochs` epochs; return the set of epochs the samples reported, per epoch."""
    seen = []
    for epoch in range(epochs):
        if before_epoch is not None:
            before_epoch(epoch)
        seen.append({sample["epoch"] for batch in loader for sample in _rows(batch)})
    return seen


def _rows(batch):
    return [dict(zip(batch, map(int, values), strict=True)) for values in zip(*batch.values(), strict=True)]


def _workers(start_method):
    """Two workers under fork; one under spawn, where each worker imports torch again (~1.5 s of a
    core apiece: these tests started 12 spawned workers) and a second one shows nothing new."""
    return 1 if start_method == "spawn" else 2


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_attribute_set_between_epochs_is_stale_in_persistent_workers(start_method):
    dataset = helpers.EpochEchoDataset(8)

    def set_attr(epoch):
        dataset.epoch = epoch

    fresh = make_loader(dataset, batch_size=4, num_workers=_workers(start_method), prefetch_factor=2,
                        start_method=start_method)
    assert epochs_seen(fresh, before_epoch=set_attr) == [{0}, {1}, {2}]
    dataset.epoch = 0
    persistent = make_loader(dataset, batch_size=4, num_workers=_workers(start_method), prefetch_factor=2,
                             persistent_workers=True, start_method=start_method)
    assert epochs_seen(persistent, before_epoch=set_attr) == [{0}, {0}, {0}]  # the pitfall


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_sampler_side_epoch_and_shared_value_reach_persistent_workers(start_method):
    sampler = helpers.EpochSampler(8)
    by_sampler = make_loader(helpers.EpochEchoDataset(8), batch_size=4, num_workers=_workers(start_method),
                             prefetch_factor=2, persistent_workers=True,
                             start_method=start_method, sampler=sampler)
    assert epochs_seen(by_sampler, before_epoch=sampler.set_epoch) == [{0}, {1}, {2}]

    shared = helpers.SharedEpoch(start_method)
    by_value = make_loader(helpers.EpochEchoDataset(8, shared=shared), batch_size=4,
                           num_workers=_workers(start_method), prefetch_factor=2, persistent_workers=True,
                           start_method=start_method)
    assert epochs_seen(by_value, before_epoch=shared.set) == [{0}, {1}, {2}]


def test_worker_memory_reports_each_live_worker():
    loader = make_loader(helpers.WorkDataset(8, item_wait_s=0.0), batch_size=2, num_workers=2,
                                 prefetch_factor=2, persistent_workers=True, start_method="fork")
    iterator = iter(loader)
    next(iterator)
    memory = helpers.worker_memory(iterator)
    assert len(memory) == 2 and all(m.rss > 0 and 0 < m.uss <= m.rss for m in memory)
    assert os.getpid() not in {m.pid for m in memory}
    iterator._shutdown_workers()
    with pytest.raises(ValueError, match="num_workers >= 1"):
        helpers.worker_memory(iter(make_loader(helpers.WorkDataset(2, item_wait_s=0.0))))


def test_freeze_gc_moves_what_a_worker_starts_with_out_of_the_collectors_passes():
    import gc

    before = gc.get_freeze_count()
    try:
        helpers.freeze_gc(0)
        assert gc.get_freeze_count() > max(before, 1000)  # every object held here, torch's among them
    finally:
        if before == 0:
            gc.unfreeze()
