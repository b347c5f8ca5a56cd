"""Notebook 12's workloads and instrument: the storages agree, what spawn sends, worker memory
sampled for real (a list is copied into forked workers, an array is not), epochs and workers."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import helpers
from helpers.data.copy_on_read import MiB, extra_uss, noise_margin_bytes

FORK = "fork" in mp.get_all_start_methods()
PATHS = helpers.make_paths(300_000)


def test_every_storage_reads_the_same_names_and_items():
    for storage in helpers.STORAGES:
        dataset = helpers.PathDataset(PATHS[:2000], storage)
        assert len(dataset) == 2000
        assert [dataset.path(i) for i in (0, 7, 1999)] == [PATHS[0], PATHS[7], PATHS[1999]], storage
        assert dataset[1234] == 234
    sizes = {s: helpers.PathDataset(PATHS[:2000], s).data_bytes() for s in helpers.STORAGES}
    assert sizes["list"] > 2 * sizes["numpy bytes"] and sizes["none"] == 0


def test_bad_storage_and_sizes_are_refused_naming_the_choices():
    with pytest.raises(ValueError, match="'list', 'object array'"):
        helpers.PathDataset(PATHS[:10], "lists")
    with pytest.raises(ValueError, match="positive integer"):
        helpers.make_paths(0)
    with pytest.raises(ValueError, match="between 0.005 and 10"):
        helpers.WorkerMemory(interval_s=0)


def test_spawn_sends_arrays_by_value_and_a_tensor_as_a_handle():
    encoded = helpers.encoded_bytes(PATHS[:50_000])
    sent = {s: helpers.sent_bytes(helpers.PathDataset(PATHS[:50_000], s)) for s in helpers.STORAGES}
    assert all(sent[s] >= 0.9 * encoded for s in ("list", "numpy bytes", "buffer + offsets", "arrow"))
    assert sent["tensor"] < 0.01 * encoded and sent["none"] < 1000
    from multiprocessing import resource_sharer

    assert resource_sharer._resource_sharer._thread is None, "the lent descriptors were released"


def test_a_worker_sampled_after_the_other_exited_does_not_set_its_peak():
    # Round 2 caught worker 2 after worker 1 had exited: the pages the two shared and the main
    # process had since written became worker 2's own (12 MiB more, nothing read). Make quota
    # failed notebook 12 once on such an outlier: numpy bytes 10.1 MiB above the no-data workers.
    from helpers.data.copy_on_read.memory import MemorySample

    memory = helpers.WorkerMemory()
    base = 100 * MiB
    for t, round_, pid, uss in [(0.0, 0, 1, base), (0.0, 0, 2, base), (0.1, 1, 1, base + MiB),
                                (0.1, 1, 2, base + MiB), (0.2, 2, 2, base + 13 * MiB)]:
        memory.samples.append(MemorySample(t, round_, pid, uss, uss, uss, uss))
    assert memory.rounds_all_alive() == {0, 1}
    assert memory.growth("uss") == {1: (base, base + MiB), 2: (base, base + MiB)}
    assert memory.growth("private")[2] == (base, base + MiB)
    # a worker seen only in rounds that missed the other keeps its own samples
    memory.samples.append(MemorySample(0.3, 3, 3, base, base, base, base))
    assert memory.growth("uss")[3] == (base, base)


def test_a_round_in_which_a_sampled_worker_then_exits_does_not_count_as_all_alive():
    # Inside a 1-CPU quota the sampler can be stopped between two workers' samples of one round
    # (0.22 s is possible). If the first worker exits meanwhile, the second can read its heap (8.9 MiB)
    # as its own, and notebook 12's "numpy bytes within noise" fails. Here the first child is killed
    # right after its sample, so the round's second sample comes after its exit.
    import subprocess
    import sys

    from helpers.data.copy_on_read import memory as memory_module

    original = memory_module.WorkerMemory._sample
    children: list[subprocess.Popen] = []
    seen: dict[int, int] = {}
    killed: list[tuple[int, int]] = []  # (pid, round)

    def sample_then_kill_the_first(self, pid):
        sample = original(self, pid)
        if len(children) < 2:  # both children started: rounds count from here
            return sample
        seen[pid] = seen.get(pid, 0) + 1
        # the first child, in its second round with both: killed right after its sample
        if pid == min(c.pid for c in children) and seen[pid] == 2:
            next(c for c in children if c.pid == pid).kill()
            deadline = time.perf_counter() + 10
            while memory_module.still_mapped(pid) and time.perf_counter() < deadline:
                time.sleep(0.005)  # a zombie now: not reaped, its memory gone
            killed.append((pid, self._round))
        return sample

    try:
        memory_module.WorkerMemory._sample = sample_then_kill_the_first
        with helpers.WorkerMemory(interval_s=0.05) as memory:
            children += [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                         for _ in range(2)]
            deadline = time.perf_counter() + 10
            while not killed and time.perf_counter() < deadline:
                time.sleep(0.01)
    finally:
        memory_module.WorkerMemory._sample = original
        for child in children:
            child.kill()
            child.wait()
    assert len(killed) == 1, "the first child was never sampled twice"
    pid, broken = killed[0]
    other = max(c.pid for c in children)
    memory.keep_only({pid, other})  # other children of this test process, if any, are not counted
    rounds = {p: {s.round for s in memory.samples if s.pid == p} for p in (pid, other)}
    both = rounds[pid] & rounds[other]
    assert broken in both, "the second child was sampled in the round after the first one's exit"
    assert broken in memory.broken_rounds, "a round in which a worker exited after its sample, not flagged"
    assert broken not in memory.rounds_all_alive() and both - {broken} <= memory.rounds_all_alive()


def test_the_arrow_storage_leaves_no_freed_allocator_memory_for_workers_to_inherit():
    # Freed memory that Arrow's allocator keeps mapped is inherited by forked workers, and becomes one
    # worker's own when the main process and the other worker return it (make handouts inside 1 CPU:
    # notebook 12's "arrow within noise" measured 38.8 MiB). PathDataset returns it before any fork.
    import gc

    import psutil
    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()  # what earlier tests' arrays left
    process = psutil.Process()
    dataset = helpers.PathDataset(PATHS, "arrow")
    before = process.memory_info().rss
    pa.default_memory_pool().release_unused()
    returned = before - process.memory_info().rss
    assert returned < 2 * MiB, f"{returned / MiB:.1f} MiB of freed memory was still mapped after building"
    assert dataset.path(12) == PATHS[12]


def test_still_mapped_tells_a_live_process_from_an_exited_one():
    import os
    import subprocess
    import sys

    from helpers.data.copy_on_read import still_mapped

    assert still_mapped(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.perf_counter() + 10
    while still_mapped(child.pid) and time.perf_counter() < deadline:  # exits, then waits as a zombie
        time.sleep(0.01)
    assert not still_mapped(child.pid)
    child.wait()
    assert not still_mapped(child.pid)


def test_measure_memory_needs_a_path_dataset_with_workers():
    with pytest.raises(TypeError, match="PathDataset"):
        helpers.measure_memory(DataLoader(list(range(10)), num_workers=1))
    with pytest.raises(ValueError, match="num_workers >= 1"):
        helpers.measure_memory(DataLoader(helpers.PathDataset(PATHS[:10])))


@pytest.mark.skipif(not FORK, reason="copy-on-read is a fork effect")
def test_a_list_is_copied_into_forked_workers_and_an_array_is_not():
    runs = {}
    before = helpers.child_processes()
    for storage in ("none", "list", "numpy bytes"):
        loader = DataLoader(helpers.PathDataset(PATHS, storage), batch_size=1000, shuffle=True, num_workers=2,
                            multiprocessing_context="fork")
        runs[storage], timeline, memory = helpers.measure_memory(loader, helpers.ModelledStep(0.002),
                                                                 progress=False)
        assert len(memory.pids()) == 2 and len(timeline.batches) == 300
    list_bytes = runs["list"].data_bytes
    assert min(extra_uss(runs["list"], runs["none"])) >= 0.5 * list_bytes
    assert max(extra_uss(runs["numpy bytes"], runs["none"])) <= noise_margin_bytes(list_bytes, runs["none"])
    assert helpers.child_processes() <= before  # the workers are gone
    table = str(helpers.memory_table(runs.values()))
    assert "numpy bytes" in table and f"{list_bytes / MiB:.1f}" in table


@pytest.mark.skipif(not FORK, reason="copy-on-read is a fork effect")
@pytest.mark.parametrize("persistent", [True, False])
def test_epoch_workers_tells_persistent_workers_from_new_ones(persistent):
    loader = DataLoader(helpers.PathDataset(PATHS[:100_000], "list"), batch_size=1000, shuffle=True,
                        num_workers=2, multiprocessing_context="fork", persistent_workers=persistent)
    _, timeline, memory = helpers.measure_memory(loader, helpers.ModelledStep(0.005), epochs=2,
                                                 progress=False)
    workers = helpers.epoch_workers(memory, timeline)
    assert len(workers.first) == 2
    if persistent:
        assert workers.same_workers and len(workers.kept_uss) == 2
    else:
        assert not workers.same_workers and len(workers.new) == 2 and len(workers.new_peak_uss) == 2
    with pytest.raises(ValueError, match="epochs=2"):
        helpers.epoch_workers(memory, helpers.record(DataLoader(list(range(4))), progress=False))


def test_worker_memory_stops_its_thread_and_plots_under_the_timeline(monkeypatch):
    import threading

    import matplotlib.pyplot as plt

    from helpers.data.copy_on_read import memory as memory_module

    released = []
    monkeypatch.setattr(memory_module, "release_freed_heap", lambda: released.append(True))
    loader = DataLoader(helpers.PathDataset(PATHS[:20_000], "numpy bytes"), batch_size=500, num_workers=1)
    run, timeline, memory = helpers.measure_memory(loader, helpers.ModelledStep(0.01), progress=False)
    assert released == [True], "measure_memory must release freed heap before its workers fork"
    assert not any(t.name == "worker-memory" for t in threading.enumerate())
    assert memory.samples and np.all(np.diff([s.t for s in memory.series(memory.pids()[0])]) > 0)
    figure = helpers.plot_worker_memory(timeline, memory, run.data_bytes)
    legend = " ".join(t.get_text() for t in figure.axes[1].get_legend().get_texts())
    assert len(figure.axes) == 3 and "worker 0" in legend and "MiB" in legend
    assert "USS" in figure.axes[1].get_ylabel() and "PSS" in figure.axes[2].get_ylabel()
    plt.close(figure)


def test_memory_explorer_runs_once_on_show_and_reports_errors_in_the_widget():
    explorer = helpers.MemoryExplorer(items=50_000, batch_size=1000, step_s=0.002, storage="arrow",
                                      start_method="fork" if FORK else "spawn")
    explorer.run(raise_errors=True)
    assert "Run 1:" in explorer.summary.value and "storage=arrow" in explorer.summary.value
    explorer.batch_size = 0  # the DataLoader refuses it
    assert explorer.run(raise_errors=False) is None and "Cannot run" in explorer.summary.value


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver") if m in mp.get_all_start_methods()])
def test_workers_are_found_under_spawn_and_forkserver_but_not_the_helpers(method):
    """A forkserver's workers keep its command line: they count, the server itself does not."""
    loader = DataLoader(helpers.PathDataset(PATHS[:20_000], "numpy bytes"), batch_size=1000, num_workers=2,
                        multiprocessing_context=method)
    iterator = iter(loader)
    next(iterator)
    workers = {w.pid for w in helpers.timing.torch_internals.worker_processes(iterator)}
    assert workers <= helpers.child_processes()
    # To the epoch's end, so that no batch is in flight at the shutdown: a worker still sending one
    # may not exit within the DataLoader's 5 s join on busy cores and is then terminated, leaving its
    # pymp-* folder (the socket it lends descriptors through) or its tempfile probe behind.
    for _ in iterator:
        pass
    del iterator
    run, _, memory = helpers.measure_memory(loader, helpers.ModelledStep(0.01), progress=False)
    assert len(memory.pids()) == 2 and run.start_method == method


def _vm_flags(address: int) -> list[str] | None:
    """The VmFlags of the mapping holding ``address`` (/proc/self/smaps), None if not found."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:  # a mapping's first line: start-end perms ...
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return None


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux")
def test_the_lessons_numpy_arrays_are_made_without_numpy_s_huge_page_hint():
    # NumPy marks arrays of 4 MiB or more MADV_HUGEPAGE ("hg"); khugepaged may then copy them
    # in one process after fork, and a worker's pages stop being shared without any reading.
    hinted = np.zeros(8 << 20, dtype=np.uint8)
    # NumPy advises the array's huge-page-aligned middle only: look there.
    if "hg" not in (_vm_flags(hinted.ctypes.data + hinted.nbytes // 2) or []):
        pytest.skip("this NumPy or kernel gives no huge-page hint")
    paths = helpers.make_paths(600_000)  # 27 bytes each: 15 MiB as fixed-width bytes, 4.6 MiB of pointers
    for storage in ("numpy bytes", "object array"):
        data = helpers.PathDataset(paths, storage).data
        assert data.nbytes >= 4 << 20
        assert "hg" not in _vm_flags(data.ctypes.data + data.nbytes // 2), storage


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux")
def test_the_lessons_arrays_refuse_huge_pages_even_where_an_earlier_array_was_hinted():
    # The hint marks an address range: an array made without it can reuse heap memory an earlier
    # hinted array held, and khugepaged could then copy it in a worker (make test: a numpy-bytes
    # worker 8.4 MiB above a no-data worker, the array's 7.7 MiB). Each array says no itself.
    paths = helpers.make_paths(300_000)
    for storage in ("numpy bytes", "buffer + offsets", "tensor"):
        data = helpers.PathDataset(paths, storage).data
        address = data.data_ptr() if isinstance(data, torch.Tensor) else data.ctypes.data
        assert "nh" in (_vm_flags(address + data.nbytes // 2) or []), storage
    from helpers.data.copy_on_read.paths import refuse_huge_pages

    assert refuse_huge_pages(np.zeros(16, dtype=np.uint8)) is False  # under a page: nothing to mark


ORPHANED_HEAP = r"""
import ctypes, os, sys, time
import psutil
from helpers.data.copy_on_read.memory import release_freed_heap
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
libc.mallopt(-3, 64 << 20)   # M_MMAP_THRESHOLD: 8 MiB chunks on the heap (glibc raises it so itself
libc.mallopt(-1, 256 << 20)  # after freeing a mapped chunk); M_TRIM_THRESHOLD: free() trims nothing
size = 8 << 20
def fill():
    chunk = libc.malloc(size)
    ctypes.memset(chunk, 2, size)
below = libc.malloc(size); ctypes.memset(below, 1, size); above = libc.malloc(64)
libc.free(below)                     # freed before the fork: resident, and inherited by both workers
if sys.argv[1] == "release":
    release_freed_heap()
go_idle, go_writer = os.pipe(), os.pipe()
workers = []
for go, work in ((go_idle, False), (go_writer, True)):
    pid = os.fork()
    if pid == 0:
        os.read(go[0], 1)
        if work:
            fill()                   # a worker's own allocation reuses the freed chunk
        os._exit(0)
    workers.append(pid)
time.sleep(0.3)
before = psutil.Process(workers[0]).memory_full_info().uss
fill()                               # so does the main process's
os.write(go_writer[1], b"x"); os.waitpid(workers[1], 0)
print((psutil.Process(workers[0]).memory_full_info().uss - before) / (1 << 20))
os.write(go_idle[1], b"x"); os.waitpid(workers[0], 0)
"""


@pytest.mark.skipif(not FORK or not helpers.data.copy_on_read.memory.release_freed_heap(),
                    reason="needs fork and glibc")
def test_a_worker_that_reads_nothing_grows_by_freed_heap_the_others_reuse_unless_it_is_released():
    # The main process and one worker each reuse a chunk freed before the fork: the other worker
    # is left the last holder of its pages and its USS grows by them (notebook 12's rare array
    # worker ~8.5 MiB up, in its heap). measure_memory releases freed heap before it forks.
    import subprocess
    import sys

    def grew(mode):
        out = subprocess.run([sys.executable, "-c", ORPHANED_HEAP, mode], capture_output=True, text=True,
                             timeout=60, cwd=Path(helpers.__file__).parent.parent)
        assert out.returncode == 0, out.stderr
        return float(out.stdout)

    assert grew("keep") > 6, "the idle worker should have been left holding the freed chunk"
    assert grew("release") < 1
