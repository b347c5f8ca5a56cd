"""Prefetchers (record(wrap=...)), the loop's device copy (record(device=...)) and transfer helpers."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import helpers


def sleep_loader(items=8, load_s=0.02, num_workers=2, **kwargs):
    return helpers.make_loader(helpers.SleepDataset(items, load_s), batch_size=1, num_workers=num_workers,
                               prefetch_factor=2 if num_workers else None, start_method="fork", **kwargs)


def test_thread_prefetcher_overlaps_the_transform_with_the_step():
    transform, step = helpers.HostTransform(sleep_s=0.05), helpers.ModelledStep(0.05)
    inline = helpers.record(sleep_loader(), step, wrap=lambda it: helpers.BatchTransform(it, transform))
    ahead = helpers.record(sleep_loader(), step,
                           wrap=lambda it: helpers.ThreadPrefetcher(it, transform, depth=2))
    # In the loop thread each iteration pays transform + step; in a thread, about the step.
    inline_s, ahead_s = (tl.summary()["mean_step_interval_s"] for tl in (inline, ahead))
    assert inline_s > 0.09, inline_s
    assert ahead_s < 0.8 * inline_s, (ahead_s, inline_s)
    for tl, row in ((inline, "transform (loop thread)"), (ahead, "prefetch thread")):
        assert [s.batch for s in tl.spans] == list(range(8))
        assert {s.row for s in tl.spans} == {row}
        assert all(s.end - s.start >= 0.045 for s in tl.spans)
    # the loop got every batch, in order, with the worker timings intact
    assert [b.indices for b in ahead.batches] == [(i,) for i in range(8)]
    assert all(b.fetch_end <= b.ready for b in ahead.batches)


def test_thread_prefetcher_stops_its_thread_when_the_loop_stops_early():
    before = threading.active_count()
    tl = helpers.record(sleep_loader(items=20), None, max_batches=3,
                        wrap=lambda it: helpers.ThreadPrefetcher(it, helpers.HostTransform(), depth=1))
    assert len(tl.batches) == 3
    time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name == "ThreadPrefetcher"]
    assert threading.active_count() <= before + 1  # the pin/loader threads are gone too (ok: +1 slack)


class Boom:
    def __call__(self, batch):
        raise ValueError("transform failed on purpose")


def test_thread_prefetcher_raises_transform_errors_in_the_loop():
    with pytest.raises(ValueError, match="on purpose"):
        helpers.record(sleep_loader(num_workers=0), None,
                       wrap=lambda it: helpers.ThreadPrefetcher(it, Boom()))
    with pytest.raises(ValueError, match="depth"):
        helpers.ThreadPrefetcher([], Boom(), depth=0)


def test_device_prefetcher_on_cpu_moves_and_normalises():
    images = torch.full((4, 3, 2, 2), 255, dtype=torch.uint8)
    labels = torch.arange(4)
    batches = [(images, labels), (images, labels)]
    out = list(helpers.DevicePrefetcher(batches, "cpu", normalize=([0.5] * 3, [0.5] * 3)))
    assert len(out) == 2
    first, second = out[0]
    assert first.dtype == torch.float32 and torch.allclose(first, torch.ones_like(first))
    assert torch.equal(second, labels)
    assert list(helpers.DevicePrefetcher([], "cpu")) == []


def test_device_prefetcher_inside_record_keeps_the_timings():
    loader = helpers.make_loader(helpers.WorkDataset(6, item_shape=(2,)), batch_size=2, num_workers=2,
                                 prefetch_factor=2, start_method="spawn")
    seen = []
    tl = helpers.record(loader, seen.append, wrap=lambda it: helpers.DevicePrefetcher(it, "cpu"))
    assert len(tl.batches) == 3 and len(tl.spans) == 3
    assert all(isinstance(b, torch.Tensor) and b.shape == (2, 2) for b in seen)
    assert {s.kind for s in tl.spans} == {"copy"}


def test_record_device_copy_is_its_own_segment():
    loader = helpers.make_loader(helpers.WorkDataset(4, item_shape=(8,)), batch_size=2)
    tl = helpers.record(loader, helpers.ModelledStep(0.01), device="cpu")
    for b in tl.batches:
        assert b.copy_end is not None and b.ready <= b.copy_end <= b.step_start <= b.step_end
        assert b.step_s >= 0.009
    plain = helpers.record(loader, helpers.ModelledStep(0.01))
    assert all(b.copy_end is None and b.copy_s == 0.0 for b in plain.batches)


def test_runahead_equals_prefetch_factor_when_workers_are_fast():
    for pf in (1, 3):
        loader = helpers.make_loader(helpers.SleepDataset(14, 0.005), batch_size=1, num_workers=2,
                                     prefetch_factor=pf, start_method="fork")
        tl = helpers.record(loader, helpers.ModelledStep(0.04))
        assert max(tl.runahead().values()) == pf
        assert tl.peak_buffered() >= 2 * pf - 1


def test_to_device_and_batch_nbytes_walk_nested_batches():
    batch = {"x": torch.zeros(2, 3), "y": [torch.zeros(4, dtype=torch.int64), 7]}
    moved = helpers.to_device(batch, "cpu")
    assert moved["y"][1] == 7 and isinstance(moved["y"], list)
    assert helpers.batch_nbytes(batch) == 2 * 3 * 4 + 4 * 8


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_measurements_say_what_they_need():
    with pytest.raises(RuntimeError, match="NVIDIA GPU"):
        helpers.copy_bandwidth([1024])
    with pytest.raises(RuntimeError, match="NVIDIA GPU"):
        helpers.nonblocking_readback_trap()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_copies_and_prefetcher():
    timing = helpers.copy_bandwidth([1 << 22], repeats=2)[0]
    assert timing.pinned_gbps > 0 and timing.pageable_gbps > 0
    trap = helpers.nonblocking_readback_trap()
    assert trap["after_sync_correct"] and trap["host_is_pinned"]
    data = [(torch.randint(0, 255, (4, 3, 8, 8), dtype=torch.uint8).pin_memory(), torch.arange(4))] * 3
    out = list(helpers.DevicePrefetcher(data, "cuda", normalize=([0.0] * 3, [1.0] * 3)))
    assert out[0][0].is_cuda and out[0][0].dtype == torch.float32


def test_pin_memory_warning_matches_the_machine():
    message = helpers.pin_memory_warning()
    if torch.cuda.is_available():
        assert message is None
    else:
        assert message is not None and "pin_memory" in message
