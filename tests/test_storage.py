"""The SQLite datasets (a real per-request cost), stragglers and tail measures."""

from __future__ import annotations

import pytest
import torch

import helpers
from conftest import make_loader


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return helpers.make_sqlite_db(tmp_path_factory.mktemp("db") / "s.sqlite", 100, features=8)


@pytest.mark.untimed
def test_per_sample_and_batched_return_the_same_samples(db):
    plain, batched = helpers.SqliteDataset(db), helpers.BatchedSqliteDataset(db)
    indices = [5, 3, 99, 0]
    rows = batched.__getitems__(indices)
    for i, (features, label) in zip(indices, rows, strict=True):
        expected_features, expected_label = plain[i]
        assert torch.equal(features, expected_features) and label == expected_label
    assert batched.queries == 1 and plain.queries == len(indices)
    with pytest.raises(IndexError):
        plain[100]
    with pytest.raises(IndexError):
        batched.__getitems__([1, 100])


@pytest.mark.untimed
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_sqlite_datasets_load_in_workers(db, start_method):
    loader = make_loader(helpers.BatchedSqliteDataset(db), batch_size=10, num_workers=2,
                                 prefetch_factor=2, start_method=start_method)
    batches = list(loader)
    assert len(batches) == 10 and batches[0][0].shape == (10, 8)


@pytest.mark.untimed
def test_missing_database_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="make_sqlite_db"):
        helpers.SqliteDataset(tmp_path / "none.sqlite")


def test_stragglers_show_in_the_tail_and_block_the_line():
    dataset = helpers.WorkDataset(24, item_wait_s=0.01, slow_every=8, slow_factor=10)
    loader = make_loader(dataset, batch_size=1, num_workers=2, prefetch_factor=2,
                                 start_method="fork")
    tl = helpers.record(loader, helpers.ModelledStep(0.01))
    p = tl.interval_percentiles((50, 99))
    assert p[99] > 3 * p[50]
    worst = max(tl.batches[1:], key=lambda b: b.wait_s)
    assert worst.indices[0] % 8 == 0 and tl.blocked_behind(worst) >= 1
