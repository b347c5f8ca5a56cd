"""What machine the lab runs on, which device to use, and where results go."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import multiprocessing as mp
import multiprocessing.util as mp_util
import platform
import queue
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from . import config, cores


def get_device(prefer: str | None = None) -> torch.device:
    """The lab's one device choice: CUDA when present, else CPU.

    ``prefer="cpu"`` forces the CPU even where a GPU exists.
    """
    if prefer is not None:
        return torch.device(prefer)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def accelerator_name() -> str | None:
    """The GPU's name, or None on a CPU-only machine."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return None


def use_start_method() -> str:
    """Make the lab's start method (``DLLAB_START_METHOD``, else the platform's default) the
    default of this process, so every ``DataLoader`` without a ``multiprocessing_context``
    starts its workers with it; returns its name. Notebooks call it once, in their setup.

    It also makes this process's multiprocessing folder (``pymp-*``, removed when the process
    exits) before any worker starts. A worker sending its first tensor opens a socket in that
    folder (``multiprocessing.resource_sharer``); one that inherits no folder, as a spawned or
    forkserver worker of a process without one, makes its own, and a fresh Python's first use
    of the temporary folder writes and removes a probe file there
    (``tempfile._get_default_tempdir``). A worker shut down with a batch still in its queue's
    sending thread can exit in the middle of that probe: a 0-byte file with an 8-character name
    stays in the temporary folder (the browser tests can hit it: they run notebook 05's spawn
    loaders; Python's ``queues.py`` sends from a daemon thread, and PyTorch's
    ``_worker_loop`` exits without waiting for it, ``cancel_join_thread()``). Every worker
    started afterwards inherits this folder and makes none, so it never probes."""
    method = config.start_method()
    mp.set_start_method(method, force=True)
    mp_util.get_temp_dir()
    return method


#: Python's multiprocessing helpers, which spawn and forkserver workers start once per process: each
#: exits by itself when this process has gone (its pipe to it closes). The resource tracker ignores
#: SIGTERM by design (``multiprocessing/resource_tracker.py``).
MP_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def reap_children_at_kernel_shutdown() -> bool:
    """In a Jupyter kernel: a shutdown that does not wait for children that go by themselves.

    On a shutdown request ipykernel (7.4, ``kernelbase._progressively_terminate_all_children``)
    signals its child processes — SIGTERM, then SIGKILL — and waits, from 0.01 s up to 10 s each
    round, until ``psutil.Process().children()`` finds none: about 29 s in all. After a spawn or
    forkserver DataLoader the kernel's children include Python's resource tracker, which ignores
    SIGTERM, and children that have exited but that nobody has waited for (zombies, which that
    list still holds). So the kernel waits the whole time; JupyterLab and nbclient do not: they
    stop it with SIGTERM after 2.5 s, and a process stopped so runs none of Python's clean-up
    (multiprocessing's ``pymp-*`` folders stay in the temporary folder, one per kernel).

    Here the kernel's shutdown leaves out the resource tracker and the forkserver (:data:`MP_HELPERS`,
    which exit by themselves once the kernel has) and reaps its zombies, so it goes on at once
    and exits cleanly. Returns whether the kernel was patched (False outside a kernel, or where
    ipykernel has no such method)."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        import psutil
        from ipykernel.kernelbase import Kernel
    except ImportError:
        return False
    original = getattr(Kernel, "_process_children", None)
    if original is None or getattr(original, "dllab_reaps", False):
        return original is not None

    def _process_children(self):
        running = []
        for child in original(self):
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    child.wait(timeout=0)  # it is this process's child: this reaps it
                    continue
                if any(helper in " ".join(child.cmdline()) for helper in MP_HELPERS):
                    continue
            except (psutil.Error, ChildProcessError):
                continue  # gone meanwhile
            running.append(child)
        return running

    _process_children.dllab_reaps = True
    Kernel._process_children = _process_children
    return True


def shm_info(path: str = "/dev/shm") -> dict[str, float] | None:
    """Size and free space of the shared-memory filesystem in bytes, or None if absent."""
    if not Path(path).is_dir():
        return None
    usage = shutil.disk_usage(path)
    return {"total_bytes": float(usage.total), "free_bytes": float(usage.free)}


def format_shm(info: dict[str, float]) -> str:
    """``shm_info()`` as text, e.g. ``"2.00 GiB, 1.50 GiB free"``."""
    return f"{info['total_bytes'] / 2**30:.2f} GiB, {info['free_bytes'] / 2**30:.2f} GiB free"


def slept_s(wait_s: float, count: int = 64) -> float:
    """How long ``time.sleep(wait_s)`` takes on this machine now: the median of ``count`` sleeps
    (s). A sleep ends when the kernel's timer fires and the scheduler runs the thread again, so it
    overshoots: by tens of microseconds on an idle machine, more on a busy or slow one. A cost
    modelled as ``count`` sleeps of ``wait_s`` costs ``count * slept_s(wait_s)``."""
    if not wait_s > 0 or not isinstance(count, int) or count < 1:
        raise ValueError(f"slept_s needs wait_s > 0 seconds and a whole count >= 1, "
                         f"got {wait_s!r} and {count!r}")
    times = []
    for _ in range(count):
        start = time.perf_counter()
        time.sleep(wait_s)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def burn_cpu(cpu_s: float) -> None:
    """Spin in Python (holding the GIL) until this thread has used ``cpu_s`` seconds of CPU time:
    CPU-bound work, a worker's or the loop's."""
    if cpu_s <= 0:
        return
    end = time.thread_time() + cpu_s
    total = 0
    while time.thread_time() < end:
        for i in range(200):  # a few µs of Python between clock readings: a profile sees the loop
            total += i


def _spin(barrier, seconds: float, shares) -> None:
    """Burn CPU for ``seconds`` of wall time; report the share of a core this process got."""
    barrier.wait()  # raises BrokenBarrierError at the barrier's timeout: a sibling never came
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < seconds:
        pass
    shares.put((time.process_time() - cpu0) / (time.perf_counter() - wall0))


#: How long free_cores waits for its processes to start and report before it gives up (s).
FREE_CORES_TIMEOUT_S = 120.0


def free_cores(processes: int = 2, seconds: float = 0.5, start_method: str | None = None,
               timeout_s: float = FREE_CORES_TIMEOUT_S) -> float:
    """How many cores' worth of CPU ``processes`` busy processes get right now, measured.

    Each process spins for ``seconds`` (they start together) and reports the CPU time it
    got over the wall time; the sum is the answer: about ``processes`` on an idle machine
    with that many cores, less when other programs compete for them. CPU-bound loading can
    only speed up as far as this. A process that never starts or dies would leave the others
    waiting for it: after ``timeout_s`` (or as soon as one exits with an error) every process is
    stopped and a RuntimeError says how many reported.
    """
    if processes < 1 or seconds <= 0 or timeout_s <= 0:
        raise ValueError(f"free_cores needs processes >= 1, seconds > 0 and timeout_s > 0, got {processes}, "
                         f"{seconds}, {timeout_s}")
    ctx = mp.get_context(start_method or config.default_start_method())
    barrier, shares = ctx.Barrier(processes, timeout=timeout_s), ctx.Queue()
    children = [ctx.Process(target=_spin, args=(barrier, seconds, shares), daemon=True)
                for _ in range(processes)]
    deadline = time.monotonic() + timeout_s
    got: list[float] = []
    try:
        for child in children:
            child.start()
        while len(got) < processes:
            try:
                got.append(shares.get(timeout=0.1))
            except queue.Empty:
                failed = [c.exitcode for c in children if c.exitcode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    why = (f"{len(failed)} exited with code(s) {sorted(set(failed))}" if failed else
                           f"none for {timeout_s:.0f} s")
                    raise RuntimeError(
                        f"free_cores: {len(got)} of {processes} spinning processes reported ({why}). The "
                        "machine may be overloaded or short of memory: close other programs, or measure "
                        "with fewer processes (helpers.free_cores(n))") from None
    finally:
        for child in children:
            if child.is_alive() and len(got) < processes:
                child.terminate()
            if child.pid is not None:
                child.join()
        shares.close()
        shares.join_thread()
    return sum(got)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads in this process, then restore the setting.

    PyTorch gives each DataLoader worker one thread; ``torch_threads(1)`` puts the main
    process on the same footing when comparing data paths. (With more threads, one tensor
    operation is split across cores, and on a machine busy with other programs each split
    waits for a core: small operations can get several times slower.)
    """
    if n < 1:
        raise ValueError(f"torch_threads needs n >= 1, got {n}")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class MachineDescription(dict):
    """A dict of machine facts that prints as a short table."""

    def rows(self) -> list[tuple[str, str]]:
        shm = self["shm"]
        shm_text = "not present (macOS/Windows)" if shm is None else format_shm(shm)
        return [
            ("cores", self["cpu_limits"]),
            ("python", self["python"]),
            ("torch", self["torch"]),
            ("torchvision", self["torchvision"] or "not installed"),
            ("accelerator", self["accelerator"] or "CPU only (the lab models the step)"),
            ("start method", f"{self['start_method']} (available: {', '.join(self['start_methods'])})"),
            ("/dev/shm", shm_text),
            ("quick mode", "off" if not self["smoke"] else (
                f"on: durations set with helpers.seconds() run ×{config.SMOKE_TIME_SCALE:g} "
                f"(the text's 0.1 s step: {0.1 * config.SMOKE_TIME_SCALE:g} s); counts are smaller")),
        ]

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows())

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{v}</td></tr>"
                       for k, v in self.rows())
        return f"<table>{body}</table>"


def describe_machine() -> MachineDescription:
    """Effective cores (with where each limit came from), Python, torch, torchvision, accelerator,
    start method, /dev/shm, quick mode."""
    limits = cores.cpu_limits()
    # The installed version, read from its metadata as notebook 00's setup check reads it: importing
    # torchvision to ask costs ~0.6 s in every kernel, and only notebook 14 uses it.
    try:
        tv_version: str | None = metadata.version("torchvision")
    except metadata.PackageNotFoundError:
        tv_version = None
    return MachineDescription(
        cores=limits.whole,
        effective_cores=limits.cores,
        cpu_limits=limits.describe(),
        platform=platform.platform(),
        python=sys.version.split()[0],
        torch=torch.__version__,
        torchvision=tv_version,
        accelerator=accelerator_name(),
        start_method=config.default_start_method(),
        start_methods=mp.get_all_start_methods(),
        shm=shm_info(),
        smoke=config.is_smoke(),
    )


#: Called as ``callback(path, results)`` after :func:`save_results` writes: registered by the layers
#: above (``helpers.classroom.predict``), which this base module does not import.
_ON_SAVE: list[Callable[[Path, dict[str, Any]], None]] = []


def on_save(callback: Callable[[Path, dict[str, Any]], None]) -> None:
    """Call ``callback(path, results)`` after every :func:`save_results`."""
    _ON_SAVE.append(callback)


def save_results(notebook: str, results: dict[str, Any]) -> Path:
    """Write ``results/<notebook>.json``: the headline measurements plus the machine.

    ``results`` must be JSON-serialisable (numbers, strings, lists, dicts).
    """
    out_dir = config.results_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{notebook}.json"
    payload = {
        "notebook": notebook,
        "written": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": dict(describe_machine()),
        "results": results,
    }
    path.write_text(json.dumps(payload, indent=2, sort_keys=True))
    for callback in _ON_SAVE:  # a prediction's later picks (a vote in class) update this file
        callback(path, results)
    return path
