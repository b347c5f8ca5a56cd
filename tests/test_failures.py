"""Shared-memory measurement and the child-process failure demos (real errors, contained)."""

from __future__ import annotations

import psutil
import pytest
from conftest import make_loader

import helpers

pytestmark = pytest.mark.skipif(helpers.shm_used_bytes() is None, reason="needs /dev/shm (Linux)")


def test_shm_monitor_sees_a_loader_use_shared_memory():
    loader = make_loader(helpers.WorkDataset(8, item_shape=(1 << 18,)), batch_size=2,
                                 num_workers=2, prefetch_factor=2, start_method="fork")
    with helpers.ShmMonitor() as shm:
        batches = list(loader)
    assert len(batches) == 4 and shm.samples > 0
    assert shm.peak_extra_bytes >= 2 * (1 << 18) * 4  # at least one batch was in /dev/shm


def test_fd_demo_fails_for_real_and_clones_fix_it():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    kept = helpers.run_demo("fd", "--limit", "128", "--batches", "300")
    assert kept.returncode != 0 and "Too many open files" in kept.error
    cloned = helpers.run_demo("fd", "--limit", "128", "--batches", "300", "--keep", "clone")
    assert cloned.returncode == 0 and cloned.result["batches_kept"] == 300
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert not helpers.torch_segments()


@pytest.mark.skipif(not helpers.shm_sandbox_available(), reason="no private /dev/shm (user namespaces)")
def test_shm_demo_exhausts_a_private_dev_shm_only():
    failed = helpers.run_demo("shm", "--item-floats", str(1 << 20), "--batch-size", "4", shm_mb=8)
    assert failed.returncode != 0 and "No space left" in failed.error
    fine = helpers.run_demo("shm", "--item-floats", str(1 << 16), "--batch-size", "1", shm_mb=8)
    assert fine.returncode == 0 and fine.result["shm_total_bytes"] == 8 * 2**20


@pytest.mark.skipif(not helpers.shm_sandbox_available(), reason="no private /dev/shm (user namespaces)")
def test_shm_demo_with_a_step_holds_the_batches_in_flight_and_their_size_decides():
    # 1 MiB batches, 2 workers × prefetch 2: while the loop steps, the workers fill their 4 slots,
    # so the loader holds 5 batches (6 while next() returns): a 4 MiB /dev/shm is too small, 8 MiB is not.
    demo = ("shm", "--items", "40", "--item-floats", str(1 << 16), "--batch-size", "4", "--step-s", "0.1")
    room = helpers.run_demo(*demo, shm_mb=8)
    assert room.returncode == 0 and room.result["batches"] == 10
    assert room.result["peak_extra_bytes"] >= 5 * 2**20
    small = helpers.run_demo(*demo, shm_mb=4)
    assert small.returncode != 0 and "No space left" in small.error
    assert small.result["shm_total_bytes"] == 4 * 2**20
