"""helpers.free_cores (the CPU busy processes actually get) and helpers.torch_threads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import helpers


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_free_cores_is_at_most_the_processes_started(start_method):
    got = helpers.free_cores(1, seconds=0.2, start_method=start_method)
    assert 0.3 < got <= 1.05, got


CORES = len(os.sched_getaffinity(0))


@pytest.mark.skipif(CORES > 16, reason="one competing program per core would be too many here")
def test_competing_programs_take_cores_away():
    alone = helpers.free_cores(CORES, seconds=0.4)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(CORES)]
    try:
        shared = helpers.free_cores(CORES, seconds=0.4)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    # As many competitors as our spinners: ours get about half the cores.
    assert shared < 0.8 * alone, (alone, shared)


@pytest.mark.parametrize("processes, seconds", [(0, 0.1), (1, 0.0)])
def test_free_cores_refuses_nonsense(processes, seconds):
    with pytest.raises(ValueError, match="processes >= 1, seconds > 0"):
        helpers.free_cores(processes, seconds)


def _never_reports(barrier, seconds, shares):
    import time

    time.sleep(60)


def _dies(barrier, seconds, shares):
    raise SystemExit(3)


@pytest.mark.untimed  # it compares no timings: its 2 s is a timeout that a sleeping child always reaches
@pytest.mark.parametrize("target, why", [(_never_reports, "none for 2 s"),
                                         (_dies, r"[12] exited with code\(s\) \[3\]")])
def test_free_cores_stops_its_processes_and_says_so_when_one_never_reports(monkeypatch, target, why):
    # A spinner that never starts (a fork that deadlocked, a machine out of memory) or dies would leave
    # free_cores, and the notebook cell that called it, waiting for ever.
    import psutil

    from helpers import system

    monkeypatch.setattr(system, "_spin", target)  # fork: the child runs what the parent holds
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match=f"free_cores: 0 of 2 spinning processes reported \\({why}\\)"):
        helpers.free_cores(2, seconds=0.1, start_method="fork", timeout_s=2)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_torch_threads_sets_and_restores_even_on_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with helpers.torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n >= 1"):
        with helpers.torch_threads(0):
            pass


class _Queue:
    closed = False

    def cancel_join_thread(self):
        pass

    def close(self):
        self.closed = True


class _Iterator:
    def __init__(self, error):
        self.error, self._index_queues = error, [_Queue(), _Queue()]

    def _shutdown_workers(self):
        raise self.error


def test_a_worker_dying_at_shutdown_is_a_warning_and_other_errors_raise():
    from helpers.timing.torch_internals import WorkerDiedAtShutdown, shutdown_workers

    died = _Iterator(RuntimeError("DataLoader worker (pid 28315) is killed by signal: Aborted. "))
    with pytest.warns(WorkerDiedAtShutdown, match="killed by signal: Aborted"):
        shutdown_workers(died)
    assert all(q.closed for q in died._index_queues)
    with pytest.raises(RuntimeError, match="something else"):
        shutdown_workers(_Iterator(RuntimeError("something else")))
    with pytest.raises(ValueError):
        shutdown_workers(_Iterator(ValueError("DataLoader worker")))


def test_a_kernel_with_a_forkserver_shuts_down_cleanly_once_it_imported_helpers():
    # Unpatched, ipykernel waits ~29 s at shutdown for its children (the resource tracker ignores
    # SIGTERM), the frontend's SIGTERM comes after 2.5 s and skips Python's clean-up: 2.6 s, and a
    # pymp-* folder left in the temporary folder (helpers.system.reap_children_at_kernel_shutdown).
    import time

    from jupyter_client.manager import KernelManager

    root = Path(__file__).resolve().parent.parent
    # A short folder of its own (not tmp_path): the forkserver's socket goes in a pymp-* folder
    # inside it, and a Unix socket's path has at most 107 characters.
    tmp_path = Path(tempfile.mkdtemp(prefix="k-"))
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(root), env={**os.environ, "TMPDIR": str(tmp_path)})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        reply = kc.execute_interactive("import helpers, multiprocessing as mp\n"
                                       "p = mp.get_context('forkserver').Process(target=print)\n"
                                       "p.start(); p.join()", timeout=120)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        start = time.monotonic()
        km.shutdown_kernel()  # jupyter_client: SIGTERM if the kernel is still alive after 2.5 s
        took = time.monotonic() - start
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pymp-"))
    shutil.rmtree(tmp_path)
    assert not left, f"a kernel stopped by SIGTERM after {took:.1f} s left {left}"


def test_slept_s_measures_what_a_sleep_takes_here_and_refuses_nonsense():
    # A sleep overshoots (timer and scheduler), never undershoots: 08's arithmetic counts a round
    # trip as long as this says.
    took = helpers.slept_s(0.001, count=8)
    assert 0.001 <= took < 0.05
    for wait_s, count in ((0, 8), (-0.001, 8), (0.001, 0), (0.001, 2.5)):
        with pytest.raises(ValueError, match="wait_s > 0 seconds and a whole count"):
            helpers.slept_s(wait_s, count)
