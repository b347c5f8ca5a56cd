"""Resume mid-epoch: a training child killed with SIGKILL and resumed; the accounting from
sample ids; the set_vital warning handled exactly; bad input refused."""

from __future__ import annotations

import collections
import time
import warnings

import pytest
import torch

import helpers
from helpers.data.resume import ResumeResult, make_loader

pytest.importorskip("torchdata")


def test_stateful_loader_resumes_exactly_after_a_real_kill(monkeypatch):
    import helpers.data.resume as resume

    waited = []

    def timed(tag, descendants, wait=resume._wait_for_exit):
        start = time.monotonic()
        wait(tag, descendants)
        waited.append(time.monotonic() - start)

    monkeypatch.setattr(resume, "_wait_for_exit", timed)
    result = helpers.kill_and_resume("stateful", n=96, batch_size=4, num_workers=2, kill_after=9, every=4,
                                     step_s=0.005)
    assert result.killed_by == -9, "the first run was killed by SIGKILL"
    assert result.checkpoint_step == 8 and result.killed_after == 9
    assert helpers.child_processes() == set(), "the killed trainer's workers are gone too"
    # killed with it (its process group), not orphaned until their watchdog looks (every 5 s in torch)
    assert waited[0] < 2.5, f"the killed trainer's workers took {waited[0]:.1f} s to end"
    assert result.exact, result.describe()
    assert sorted(result.order) == list(range(96))


def test_a_restarted_dataloader_repeats_the_checkpointed_batches():
    result = helpers.kill_and_resume("restart", n=96, batch_size=4, num_workers=2, kill_after=9, every=4,
                                     step_s=0.005)
    assert result.repeated == 8 * 4 and not result.missing and not result.exact


def test_a_restarted_dataloader_without_a_seed_repeats_as_many_samples_and_skips_none():
    # 15's text: without a seed the restarted epoch draws another order, in which every sample comes
    # once: the checkpointed batches' samples (a random c × b of them) come twice, none is missing.
    result = helpers.kill_and_resume("restart", n=96, batch_size=4, num_workers=2, kill_after=9, every=4,
                                     step_s=0.005, seed=None)
    first, second = result.order[:8 * 4], result.order[8 * 4:]
    assert result.repeated == 8 * 4 and not result.missing, result.describe()
    assert second[:8 * 4] != first, "the restarted run drew the first run's order: it has a seed after all"


def test_accounting_counts_repeats_and_missing_ids():
    result = ResumeResult("x", 5, 1, 2, -9, collections.Counter([0, 1, 1, 2, 2, 2]), [])
    assert result.missing == [3, 4] and result.repeated == 3 and not result.exact
    assert ResumeResult("x", 3, 1, 2, -9, collections.Counter([0, 1, 2]), []).exact


def test_the_loaders_of_each_kind():
    config = dict(n=20, batch_size=4, num_workers=0, seed=3)
    plain = make_loader({**config, "kind": "restart"})
    stateful = make_loader({**config, "kind": "stateful"})
    assert type(plain) is torch.utils.data.DataLoader and hasattr(stateful, "load_state_dict")
    assert torch.equal(torch.cat(list(plain)), torch.cat(list(make_loader({**config, "kind": "skip"})))), \
        "the same seed draws the same order"


def test_only_the_set_vital_warning_is_filtered():
    assert "set_vital" in (helpers.set_vital_warning() or "set_vital (not raised by this torchdata)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        helpers.stateful_loader(helpers.IdDataset(4), batch_size=2)
        warnings.warn("another warning", UserWarning, stacklevel=1)
    messages = [str(w.message) for w in caught]
    assert not any("set_vital" in m for m in messages) and "another warning" in messages


def test_dataset_state_travels_with_snapshots():
    dataset = helpers.IdDataset(8, state_bytes=1000)
    assert len(dataset.state_dict()["buffer"]) == 1000 and dataset[5] == 5
    dataset.load_state_dict({"loaded": 3})
    assert dataset.loaded == 3


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="kind must be one of"):
        helpers.kill_and_resume("magic", n=10, batch_size=2, num_workers=0, kill_after=2, every=1)
    with pytest.raises(ValueError, match="kill_after"):
        helpers.kill_and_resume("stateful", n=10, batch_size=2, num_workers=0, kill_after=9, every=1)
    with pytest.raises(ValueError, match="positive integer"):
        helpers.IdDataset(0)
