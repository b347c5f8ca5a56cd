"""Prefetchers (record(wrap=...)), the loop's device copy (record(device=...)), and the order of
CUDA stream operations in the device prefetcher (CUDA calls faked, so it runs on any CPU)."""

from __future__ import annotations

import contextlib
import gc
import threading
import time

import pytest
import torch

import helpers
from conftest import make_loader
from helpers.data import prefetch


def wait_loader(items=8, item_wait_s=0.02, num_workers=2, **kwargs):
    return make_loader(helpers.WorkDataset(items, item_wait_s=item_wait_s), batch_size=1,
                       num_workers=num_workers, prefetch_factor=2 if num_workers else None,
                       start_method="fork", **kwargs)


# -- host prefetchers ---------------------------------------------------------------------
def test_thread_prefetcher_overlaps_the_transform_with_the_step():
    transform, step = helpers.HostTransform(wait_s=0.05), helpers.ModelledStep(0.05)
    inline = helpers.record(wait_loader(), step, wrap=lambda it: helpers.BatchTransform(it, transform))
    ahead = helpers.record(wait_loader(), step,
                           wrap=lambda it: helpers.ThreadPrefetcher(it, transform, depth=2))
    # In the loop thread each iteration pays transform + step; in a thread, about the step.
    inline_s, ahead_s = (helpers.median_interval_s(tl) for tl in (inline, ahead))
    assert inline_s > 0.09, inline_s
    assert ahead_s < 0.8 * inline_s, (ahead_s, inline_s)
    for tl, row in ((inline, "transform (loop thread)"), (ahead, "prefetch thread")):
        assert [s.batch for s in tl.spans] == list(range(8))  # timed from outside the class
        assert {s.row for s in tl.spans} == {row}
        assert all(s.end - s.start >= 0.045 for s in tl.spans)
    # the loop got every batch, in order, with the worker timings matched by arrival order
    assert [b.indices for b in ahead.batches] == [(i,) for i in range(8)]
    assert all(b.fetch_end <= b.ready for b in ahead.batches)


@pytest.mark.untimed
def test_prefetchers_carry_no_timing_code():
    # What a learner copies is the pattern alone: no clocks, no import of the instrument.
    import inspect

    source = inspect.getsource(prefetch)
    assert "perf_counter" not in source and "import time" not in source
    assert not any(f"from .{m}" in source for m in ("timeline", "hooks", "recorder"))


@pytest.mark.parametrize("item_wait_s, num_workers, max_batches", [(0.02, 2, 3), (0.3, 1, 1)])
def test_thread_prefetcher_stops_its_thread_when_the_loop_stops_early(item_wait_s, num_workers, max_batches):
    # With one worker and 0.3 s samples, the prefetcher's thread is inside the loader's next() when the
    # loop stops: the recording ends the epoch's workers only once that next() has its batch (shut down
    # under it, the thread would wait for good).
    tl = helpers.record(wait_loader(items=6, item_wait_s=item_wait_s, num_workers=num_workers), None,
                        max_batches=max_batches, progress=False,
                        wrap=lambda it: helpers.ThreadPrefetcher(it, helpers.HostTransform(), depth=1))
    assert len(tl.batches) == max_batches
    deadline = time.monotonic() + 2
    while any(t.name == "ThreadPrefetcher" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [t for t in threading.enumerate() if t.name == "ThreadPrefetcher"]


class Boom:
    def __call__(self, batch):
        raise ValueError("transform failed on purpose")


def test_thread_prefetcher_raises_transform_errors_in_the_loop():
    with pytest.raises(ValueError, match="on purpose"):
        helpers.record(wait_loader(num_workers=0), None, wrap=lambda it: helpers.ThreadPrefetcher(it, Boom()))
    with pytest.raises(ValueError, match="depth"):
        helpers.ThreadPrefetcher([], Boom(), depth=0)


def test_a_prefetcher_that_invents_batches_is_refused():
    def doubled(it):
        for batch in it:
            yield batch
            yield batch

    with pytest.raises(RuntimeError, match="passes each batch on once"):
        helpers.record(wait_loader(num_workers=0, items=3), None, wrap=doubled)


# -- the device prefetcher on the CPU ------------------------------------------------------------
@pytest.mark.untimed
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


@pytest.mark.untimed
def test_device_prefetcher_inside_record_keeps_the_timings_under_spawn():
    loader = make_loader(helpers.WorkDataset(6, item_shape=(2,)), batch_size=2, num_workers=2,
                         prefetch_factor=2, start_method="spawn")
    seen = []
    tl = helpers.record(loader, seen.append, wrap=lambda it: helpers.DevicePrefetcher(it, "cpu"))
    assert len(tl.batches) == 3 and len(tl.spans) == 3
    assert all(isinstance(b, torch.Tensor) and b.shape == (2, 2) for b in seen)
    assert [b[0, 0].item() for b in seen] == [0.0, 2.0, 4.0]
    assert {s.kind for s in tl.spans} == {"copy"} and {s.row for s in tl.spans} == {"copy (prefetch thread)"}


# -- the order of CUDA stream operations, with CUDA faked ------------------------------------------
class FakeCuda:
    """Stands in for torch.cuda: logs every stream operation, per thread, in order."""

    def __init__(self):
        self.log: list[tuple] = []
        self.lock = threading.Lock()
        self.local = threading.local()
        self.streams = 0
        self.events = 0
        self.default = self.Stream(None, name="default")

    def add(self, *entry):
        with self.lock:
            self.log.append(entry)

    def current(self):
        return getattr(self.local, "stream", self.default)

    def Stream(self, device=None, name=None):  # noqa: N802 (mirrors torch.cuda.Stream)
        fake = self

        class Stream:
            def __init__(self):
                fake.streams += 1
                self.name = name or f"side{fake.streams}"

            def wait_stream(self, other):
                fake.add("wait_stream", self.name, other.name)

            def wait_event(self, event):
                fake.add("wait_event", self.name, event.name)

        return Stream()

    def Event(self, **kwargs):  # noqa: N802
        fake = self

        class Event:
            def __init__(self):
                fake.events += 1
                self.name = f"event{fake.events}"

            def record(self, stream=None):
                fake.add("record", self.name, (stream or fake.current()).name)

        return Event()

    @contextlib.contextmanager
    def stream(self, stream):
        before = self.current()
        self.local.stream = stream
        try:
            yield
        finally:
            self.local.stream = before

    def current_stream(self, device=None):
        return self.current()

    def to_device(self, batch, device, *, non_blocking=False):  # stands in for Tensor.to
        self.add("copy", int(batch[0]), self.current().name, non_blocking)
        return batch.clone()

    def record_stream(self, tensor, stream):
        self.add("record_stream", int(tensor[0]), stream.name)


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(torch.cuda, "Stream", fake.Stream)
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    monkeypatch.setattr(torch.cuda, "stream", fake.stream)
    monkeypatch.setattr(torch.cuda, "current_stream", fake.current_stream)
    monkeypatch.setattr(torch.Tensor, "to", lambda tensor, device, non_blocking=False:
                        fake.to_device(tensor, device, non_blocking=non_blocking))
    monkeypatch.setattr(torch.Tensor, "record_stream",
                        lambda tensor, stream: fake.record_stream(tensor, stream), raising=False)
    return fake


def gated_source(fake, batches, handed_out):
    """Yields batch s+1 only once the loop holds batch s (or after 1 s): logs when it had to give up."""
    for s in range(batches):
        if s > 0 and not handed_out[s - 1].wait(timeout=1.0):
            fake.add("loader waited for the loop", s)
        yield torch.tensor([s])


def run_prefetcher(fake, cls, batches=4):
    handed_out = [threading.Event() for _ in range(batches)]
    prefetcher = cls(gated_source(fake, batches, handed_out), "cuda")
    for batch in prefetcher:
        s = int(batch[0])
        fake.add("loop holds", s)
        handed_out[s].set()
        fake.add("step", s, fake.current_stream().name)
    return fake.log


def order_problems(log, batches):
    """What is wrong with the order of stream operations, as a list of sentences (empty: right)."""
    problems = []
    position = {entry: i for i, entry in enumerate(log)}
    copies = {e[1]: i for i, e in enumerate(log) if e[0] == "copy"}
    holds = {e[1]: i for i, e in enumerate(log) if e[0] == "loop holds"}
    if any(e[0] == "loader waited for the loop" for e in log):
        problems.append("a batch was handed out only after the loader produced the next one")
    if any(e[0] == "wait_stream" and e[1] == "default" for e in log):
        problems.append("the loop's stream waits for the whole side stream, so for later copies too")
    for s in range(batches):
        if s not in copies or s not in holds:
            problems.append(f"batch {s} was not copied and handed out")
            continue
        if log[copies[s]][2] == "default" or not log[copies[s]][3]:
            problems.append(f"copy {s} is not an asynchronous copy on a side stream")
        recorded = [i for i, e in enumerate(log) if e[0] == "record" and i > copies[s]]
        if not recorded:
            problems.append(f"no event after copy {s}")
            continue
        event = log[recorded[0]][1]
        waited = position.get(("wait_event", "default", event))
        if waited is None or waited > holds[s]:
            problems.append(f"the step on batch {s} does not wait for its own copy's event before it starts")
        kept = position.get(("record_stream", s, "default"))
        if kept is None or kept > holds[s]:
            problems.append(f"batch {s} is not record_stream-ed to the loop's stream")
    return problems


@pytest.mark.untimed
def test_device_prefetcher_orders_stream_operations_right(fake_cuda):
    log = run_prefetcher(fake_cuda, helpers.DevicePrefetcher)
    assert order_problems(log, 4) == []
    # copies run on the side stream in the prefetcher's thread, steps on the loop's stream
    copy_streams = {e[2] for e in log if e[0] == "copy"}
    assert len(copy_streams) == 1 and "default" not in copy_streams
    assert {e[2] for e in log if e[0] == "step"} == {"default"}


@pytest.mark.untimed
def test_the_serialised_order_serialises_copy_and_step(fake_cuda):
    # The same check on the serialised order finds both of its errors.
    problems = order_problems(run_prefetcher(fake_cuda, helpers.SerialisedDevicePrefetcher), 4)
    assert "the loop's stream waits for the whole side stream, so for later copies too" in problems
    assert "a batch was handed out only after the loader produced the next one" in problems


# -- the loop's copy, run-ahead, transfer helpers --------------------------------------------------
def test_record_device_copy_is_its_own_segment():
    loader = make_loader(helpers.WorkDataset(4, item_shape=(8,)), batch_size=2)
    tl = helpers.record(loader, helpers.ModelledStep(0.01), device="cpu")
    for b in tl.batches:
        assert b.copy_end is not None and b.ready <= b.copy_end <= b.step_start <= b.step_end
        assert b.step_s >= 0.009
    plain = helpers.record(loader, helpers.ModelledStep(0.01))
    assert all(b.copy_end is None and b.copy_s == 0.0 for b in plain.batches)


def test_runahead_equals_prefetch_factor_when_workers_are_fast():
    for pf in (1, 3):
        loader = make_loader(helpers.WorkDataset(14, item_wait_s=0.005), batch_size=1, num_workers=2,
                             prefetch_factor=pf, start_method="fork")
        tl = helpers.record(loader, helpers.ModelledStep(0.04))
        assert max(tl.runahead().values()) == pf
        assert tl.peak_buffered() >= 2 * pf - 1


def test_to_device_and_batch_nbytes_walk_nested_batches():
    batch = {"x": torch.zeros(2, 3), "y": [torch.zeros(4, dtype=torch.int64), 7]}
    moved = helpers.to_device(batch, "cpu")
    assert moved["y"][1] == 7 and isinstance(moved["y"], list)
    assert helpers.batch_nbytes(batch) == 2 * 3 * 4 + 4 * 8


def test_pinned_budget_counts_power_of_two_blocks():
    from helpers.data.transfer import pinned_block_bytes

    assert [pinned_block_bytes(n) for n in (1, 2, 3, 1000, 1024, 1025)] == [1, 2, 4, 1024, 1024, 2048]
    images = torch.empty(32, 3, 224, 224)  # 18.4 MiB -> a 32 MiB block
    assert pinned_block_bytes(helpers.batch_nbytes(images)) == 32 * 2**20
    # the exercise's batches: 64 x 3 x 512 x 512 float32 = 192 MiB -> 256 MiB blocks, 8 workers x 4
    big = torch.empty((64, 3, 512, 512), dtype=torch.float32, device="meta")
    assert helpers.pinned_budget_bytes(big, 8, 4) == 34 * 256 * 2**20  # 8.5 GiB, not 6.4


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_copy_overlaps_the_step():
    """A step that ends in a sync, as ``loss.item()`` does, about as long as a batch's copy: with
    the fixed order a batch takes about max(copy, step); with the serialised order each step also waits
    for the next batch's copy, copy + step. Without the sync the serialised order overlaps as well, and
    a step 16 times the copy hides the difference in noise: an H200 (torch 2.11) measured 16.15
    against 16.19 ms a batch that way. So the step is sized here to the copy this GPU measures."""
    device = torch.device("cuda")
    batches = [torch.randn(64, 3, 256, 256).pin_memory() for _ in range(12)]  # 48 MiB each
    weight = torch.randn(2048, 2048, device=device)

    def seconds(work, repeats=5):
        work()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            work()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / repeats

    copy_s = seconds(lambda: batches[0].to(device, non_blocking=True))
    matmuls = max(1, round(copy_s / seconds(lambda: torch.mm(weight, weight))))

    def step(batch):
        for _ in range(matmuls):
            torch.mm(weight, weight)
        batch.sum().item()

    def per_batch_s(cls):
        for batch in cls(batches[:2], device):  # warm-up
            step(batch)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for batch in cls(batches, device):
            step(batch)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / len(batches)

    fixed = min(per_batch_s(helpers.DevicePrefetcher) for _ in range(3))
    serialised = min(per_batch_s(helpers.SerialisedDevicePrefetcher) for _ in range(3))
    assert fixed < 0.8 * serialised, (fixed, serialised, copy_s, matmuls)


def test_the_pinned_cache_is_emptied_on_a_torch_without_torch_accelerator_empty_host_cache(monkeypatch):
    from types import SimpleNamespace

    from helpers.data import transfer
    from helpers.timing import torch_internals

    called = []
    monkeypatch.setattr(torch_internals.torch, "accelerator", SimpleNamespace())  # torch 2.11: not there
    monkeypatch.setattr(torch_internals.torch._C, "_host_emptyCache", lambda: called.append("private"),
                        raising=False)
    transfer._CudaHostAllocator().empty_cache()
    assert called == ["private"]
    public = SimpleNamespace(empty_host_cache=lambda: called.append("public"))
    monkeypatch.setattr(torch_internals.torch, "accelerator", public)
    transfer._CudaHostAllocator().empty_cache()
    assert called == ["private", "public"]


def test_pin_memory_warning_matches_the_machine():
    message = helpers.pin_memory_warning()
    if torch.cuda.is_available():
        assert message is None
    else:
        assert message is not None and "pin_memory" in message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pinned_memory_taken_counts_the_run_not_the_cache_before_it():
    from torch.utils.data import DataLoader

    from helpers.data.transfer import PinnedMemoryTaken

    # A forked worker inherits the parent's uncollected garbage; when its collector frees a CUDA tensor
    # there, CUDA aborts the worker ("CUDA error: initialization error" in ~TensorImpl: an H200 run of
    # this file after the overlap test). Collect it here first, as a script would before forking.
    gc.collect()
    helpers.copy_bandwidth([1 << 24], repeats=1)  # leaves pinned blocks cached, as notebook 06's sweep
    cached = torch.cuda.host_memory_stats()["allocated_bytes.current"]
    assert cached >= 2 * (1 << 24)
    data = helpers.TutorialDataset(32, shape=(3, 64, 64))
    loader = DataLoader(data, batch_size=8, num_workers=2, prefetch_factor=2, pin_memory=True)
    with PinnedMemoryTaken() as taken:
        helpers.record(loader, device="cuda", progress=False)
    one_batch = next(iter(DataLoader(data, batch_size=8)))
    assert 0 < taken.peak_bytes <= helpers.pinned_budget_bytes(one_batch, 2, 2) < cached
    assert taken.blocks >= 2


class SlowAfterFirst:
    """Batches of which the first is there at once and each later one takes 0.3 s (a loader whose next
    fetch is under way when the loop leaves)."""

    def __iter__(self):
        for i in range(6):
            if i:
                time.sleep(0.3)
            yield torch.full((2,), float(i))


@pytest.mark.parametrize("wrap", ["ThreadPrefetcher", "DevicePrefetcher"])
def test_a_loop_that_leaves_early_goes_on_at_once(wrap):
    # The patterns a learner copies (07's prefetch threads) must not hold the loop after a `break`:
    # close() neither joins the thread, which is inside the source's next() for 0.3 s, nor polls.
    wrapped = (helpers.ThreadPrefetcher(SlowAfterFirst(), lambda b: b, depth=2) if wrap == "ThreadPrefetcher"
               else helpers.DevicePrefetcher(SlowAfterFirst(), "cpu", depth=2))
    for _ in wrapped:
        start = time.perf_counter()
        break
    left = time.perf_counter() - start
    assert left < 0.03, f"{wrap}: the loop waited {left * 1e3:.0f} ms after its break"
    thread = wrapped._thread if wrap == "ThreadPrefetcher" else wrapped.thread
    thread.join(timeout=2)  # it ends by itself once its next() returns
    assert not thread.is_alive()


def test_threaded_batches_let_a_loop_leave_early_at_once():
    # 19's receiving threads (a torchdata ParallelMapper): leaving after the first batch does not wait
    # for the threads to stop.
    loader = torch.utils.data.DataLoader(helpers.ThreadedBatches(12, 4, 64, threads=2, wait_s=0.2),
                                         batch_size=None)
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    del it
    left = time.perf_counter() - start
    assert left < 0.03, f"dropping the iterator took {left * 1e3:.0f} ms"
