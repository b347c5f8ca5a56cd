"""Shared memory: what a run uses in /dev/shm, and real failures contained in a child process.

A batch travels from a worker to the loop through shared memory: the worker's
tensors are moved into a segment in ``/dev/shm``, and (with the default
``file_descriptor`` sharing strategy) a file descriptor to it is sent over a Unix
socket. :class:`ShmMonitor` samples how much of ``/dev/shm`` a run's processes hold.

The demos run in a child process (``python -m helpers.failures …``) so the
failures are real and the notebook's kernel survives:

* ``fd``: a lowered ``RLIMIT_NOFILE`` and a loop that keeps every batch alive: each
  held batch keeps a descriptor open, until "Too many open files" (PyTorch #11201).
* ``shm``: a loader whose batches in flight need more than ``/dev/shm`` allows (``--step-s``:
  the loop holds each batch that long, so the workers run ahead and fill their slots);
  :func:`run_demo` gives the child a private small tmpfs on ``/dev/shm`` (``unshare -rm``)
  so only it runs out.
* ``usage``: peak ``/dev/shm`` use of a run under a given sharing strategy.

Each prints one ``RESULT {json}`` line; :func:`run_demo` parses it with the child's
real output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import repo_root
from ..system import MP_HELPERS as _MP_HELPERS  # Python's resource tracker and forkserver

SHM = Path("/dev/shm")


def shm_used_bytes() -> int | None:
    """Bytes in use on ``/dev/shm`` (None where there is none: macOS, Windows)."""
    if not SHM.is_dir():
        return None
    stat = os.statvfs(SHM)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def child_processes() -> set[int]:
    """This process's child processes (recursively), leaving out Python's multiprocessing
    helpers (the resource tracker and the forkserver, which spawn and forkserver start once).

    A worker that the forkserver forks keeps the forkserver's command line, so a helper is
    recognised by its command line *and* by being this process's own child."""
    import psutil

    me = os.getpid()
    out = set()
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
            parent = child.ppid()
        except psutil.Error:  # it ended meanwhile
            continue
        if not (parent == me and any(helper in cmdline for helper in _MP_HELPERS)):
            out.add(child.pid)
    return out


def torch_segments() -> list[str]:
    """Names of PyTorch's shared-memory segments left in ``/dev/shm`` (``torch_*``)."""
    if not SHM.is_dir():
        return []
    return sorted(p.name for p in SHM.iterdir() if p.name.startswith("torch_"))


def orphaned_segments(before: Iterable[str] = (), grace_s: float = 1.0,
                      segments: Callable[[], Iterable[str]] = torch_segments) -> list[str]:
    """The ``torch_*`` segments in ``/dev/shm`` left behind, leaving out those in ``before``: their
    creator has exited (ATen names a segment ``torch_<pid of its creator>_…``) and no process has
    them open or mapped. Any other is in use: a live worker's batch, a batch another process still
    holds, another program's (a notebook running beside this one). A segment that looks left behind is
    looked at again after ``grace_s``, since the process that received a batch may still be unlinking it."""
    import re

    import psutil

    skip = set(before)

    def orphans() -> set[str]:
        creators = {name: re.search(r"torch_(\d+)_", name) for name in segments() if name not in skip}
        dead = {name for name, m in creators.items() if not m or not psutil.pid_exists(int(m[1]))}
        if not dead:
            return dead
        held = held_shm_files(psutil.pids())  # by every process, not only ours
        return dead - {path.removeprefix("/dev/shm/").removesuffix(" (deleted)") for path, _, _ in held}

    first = orphans()
    if first:
        time.sleep(grace_s)
    return sorted(first & orphans())


#: POSIX named semaphores live in /dev/shm as ``sem.<name>`` (glibc's ``sem_open``).
SEMAPHORES = "/dev/shm/sem."


def shm_held_bytes(pids: set[int] | None = None) -> int:
    """Bytes of ``/dev/shm`` that these processes hold (default: this one and its children).

    Counted once per file (by inode): every ``/dev/shm`` file a process has open (``/proc/PID/fd``)
    or mapped (``/proc/PID/maps``), and every PyTorch segment named after one of them: ATen names
    a segment ``/torch_<pid of its creator>_<random>_<counter>`` (``NewProcessWideShmHandle`` in
    ``MapAllocator.cpp``), and with the ``file_system`` strategy a batch in flight is such a named
    file that no process has mapped yet. Other programs' use of ``/dev/shm`` (a browser's, another
    notebook's) is left out, which the free space of the file system (:func:`shm_used_bytes`) cannot do.
    So are POSIX semaphores (``sem.*``, a page each): a DataLoader iterator's queues and events map 14
    of them with 2 workers (multiprocessing's locks), which are no data (a test once saw a run's six
    batches plus those 56 KiB go over its bound). 0 where there is no ``/proc`` or ``/dev/shm``
    (macOS, Windows).
    """
    if not SHM.is_dir() or not Path("/proc/self/maps").exists():
        return 0
    if pids is None:
        pids = _process_tree()
    sizes: dict[int, int] = {}  # inode -> bytes
    for _path, inode, size in held_shm_files(pids):
        sizes[inode] = max(sizes.get(inode, 0), size)
    named = tuple(f"torch_{pid}_" for pid in pids)
    with os.scandir(SHM) as entries:
        for entry in entries:
            if entry.name.startswith(named):
                try:
                    held = entry.stat()
                except OSError:
                    continue
                sizes[held.st_ino] = max(sizes.get(held.st_ino, 0), held.st_size)
    return sum(sizes.values())


def held_shm_files(pids: Iterable[int]) -> Iterator[tuple[str, int, int]]:
    """``(path, inode, bytes)`` for every ``/dev/shm`` file these processes have open
    (``/proc/PID/fd``; the file's size) or mapped (``/proc/PID/maps``; up to the mapping's end),
    POSIX semaphores left out. A path unlinked since ends in `` (deleted)``. Processes that end
    meanwhile, or that this user may not read, are skipped."""
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("/dev/shm/") and not target.startswith(SEMAPHORES):
                        held = os.stat(f"/proc/{pid}/fd/{fd}")
                        yield target, held.st_ino, held.st_size
                except OSError:  # closed meanwhile
                    continue
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    if "/dev/shm/" in line:  # start-end perms offset dev inode path
                        span, _perms, offset, _dev, inode, path = line.split(None, 5)
                        if path.startswith(SEMAPHORES):
                            continue
                        start, end = (int(x, 16) for x in span.split("-"))
                        yield path.rstrip("\n"), int(inode), int(offset, 16) + end - start
        except OSError:  # the process ended meanwhile
            continue


def _process_tree() -> set[int]:
    import psutil

    pids = {os.getpid()}
    for child in psutil.Process().children(recursive=True):
        pids.add(child.pid)
    return pids


class ShmMonitor:
    """Sample, in a thread while a block runs, how much of ``/dev/shm`` this process and its
    children hold (:func:`shm_held_bytes`; other programs' use does not count)::

        with ShmMonitor() as shm:
            helpers.record(loader)
        shm.peak_extra_bytes   # the most above what they held before
    """

    def __init__(self, interval_s: float = 0.005):
        self.interval_s = interval_s
        self.baseline_bytes = 0
        self.peak_bytes = 0
        self.samples = 0
        self._pids: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> int:
        # Every process seen in the tree stays counted: a worker that has exited can leave a
        # named segment behind (file_system), and that is this run's too.
        self._pids |= _process_tree()
        return shm_held_bytes(self._pids)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self._sample())
            self.samples += 1
            time.sleep(self.interval_s)

    def __enter__(self) -> ShmMonitor:
        self._pids = set()
        self.baseline_bytes = self.peak_bytes = self._sample()
        self._thread = threading.Thread(target=self._run, name="ShmMonitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def peak_extra_bytes(self) -> int:
        return self.peak_bytes - self.baseline_bytes


@dataclass
class DemoResult:
    """What a child-process demo did: its exit status, its real output, and its result."""

    command: list[str]
    returncode: int
    output: str
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> str | None:
        """The error the child hit (its exception text), or None if it finished."""
        return self.result.get("error")


def shm_sandbox_available() -> bool:
    """Whether this machine lets a child mount its own small ``/dev/shm`` (user namespaces)."""
    if shutil.which("unshare") is None or not SHM.is_dir():
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


def run_demo(*args: str, shm_mb: int | None = None, timeout_s: float = 180) -> DemoResult:
    """Run ``python -m helpers.failures ARGS`` in a child process and collect its result.

    ``shm_mb``: give the child a private tmpfs of that size on ``/dev/shm`` (needs
    :func:`shm_sandbox_available`; raises naming the reason otherwise).
    """
    command = [sys.executable, "-m", "helpers.failures", *args]
    if shm_mb is not None:
        if not shm_sandbox_available():
            raise RuntimeError("this machine does not allow a private /dev/shm (unshare -rm failed: user "
                               "namespaces are disabled, or this is not Linux); the shm demo cannot be "
                               "contained here")
        inner = " ".join(_quote(a) for a in command)
        command = ["unshare", "-rm", "sh", "-c",
                   f"mount -t tmpfs -o size={int(shm_mb)}m tmpfs /dev/shm && exec {inner}"]
    # A demo that fails for real ends with its DataLoader workers terminated, and a terminated worker
    # leaves its multiprocessing folder (pymp-*, a socket of the resource sharer) in the temporary
    # folder: the child gets a folder of its own, removed with whatever is left in it.
    with tempfile.TemporaryDirectory(prefix="dllab-demo-", ignore_cleanup_errors=True) as tmp:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              cwd=repo_root(), env={**os.environ, "TMPDIR": tmp})
    output = done.stdout + done.stderr
    result: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    return DemoResult(command=command, returncode=done.returncode, output=output, result=result)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\"'\"'") + "'"


# --------------------------------------------------------------------------
# The child's side
# --------------------------------------------------------------------------
def _loader(items: int, item_floats: int, batch_size: int, workers: int, prefetch: int):
    from torch.utils.data import DataLoader

    from ..config import start_method
    from .datasets import WorkDataset

    return DataLoader(WorkDataset(items, item_shape=(item_floats,)), batch_size=batch_size,
                      num_workers=workers, prefetch_factor=prefetch, multiprocessing_context=start_method())


def _demo_fd(options: argparse.Namespace) -> dict[str, Any]:
    import resource  # POSIX only: imported here so that `import helpers` works on Windows

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(options.limit, hard), hard))
    kept: list[Any] = []
    for batch in _loader(options.batches, 16, 1, 2, 2):
        kept.append(batch.clone() if options.keep == "clone" else batch)
    return {"batches_kept": len(kept), "limit": options.limit, "keep": options.keep}


def _demo_shm(options: argparse.Namespace, progress: dict[str, Any]) -> dict[str, Any]:
    import torch

    if options.strategy:
        torch.multiprocessing.set_sharing_strategy(options.strategy)
    count = 0
    with ShmMonitor() as monitor:
        for _batch in _loader(options.items, options.item_floats, options.batch_size, options.workers,
                              options.prefetch):
            # A step that holds the batch while the workers run ahead and fill their prefetch slots:
            # then the loader holds num_workers × prefetch_factor batches and the loop's own.
            time.sleep(options.step_s)
            count += 1
            progress["batches"] = count  # the batches the loop had when a failure came
    return {"batches": count, "peak_extra_bytes": monitor.peak_extra_bytes,
            "shm_total_bytes": _shm_total_bytes(),
            "strategy": torch.multiprocessing.get_sharing_strategy(),
            "batch_bytes": options.item_floats * 4 * options.batch_size,
            "left_segments": torch_segments()}


def _shm_total_bytes() -> int | None:
    """The size of this process's ``/dev/shm`` (the private one inside the sandbox)."""
    if not SHM.is_dir():
        return None
    stat = os.statvfs(SHM)
    return stat.f_blocks * stat.f_frsize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.failures")
    sub = parser.add_subparsers(dest="demo", required=True)
    fd = sub.add_parser("fd", help="keep batches alive under a low RLIMIT_NOFILE")
    fd.add_argument("--limit", type=int, default=256)
    fd.add_argument("--batches", type=int, default=600)
    fd.add_argument("--keep", choices=["shared", "clone"], default="shared")
    shm = sub.add_parser("shm", help="iterate a loader and measure /dev/shm")
    shm.add_argument("--items", type=int, default=16)
    shm.add_argument("--item-floats", type=int, default=1 << 20)
    shm.add_argument("--batch-size", type=int, default=4)
    shm.add_argument("--workers", type=int, default=2)
    shm.add_argument("--prefetch", type=int, default=2)
    shm.add_argument("--strategy", choices=["file_descriptor", "file_system"], default=None)
    shm.add_argument("--step-s", type=float, default=0.0, help="seconds the loop holds each batch")
    options = parser.parse_args(argv)
    progress: dict[str, Any] = {"batches": 0}
    try:
        result = _demo_fd(options) if options.demo == "fd" else _demo_shm(options, progress)
    except Exception as error:  # the real error, reported to the parent
        result = {"error": f"{type(error).__name__}: {error}", "shm_total_bytes": _shm_total_bytes(),
                  **(progress if options.demo == "shm" else {})}
        print("RESULT " + json.dumps(result), flush=True)
        return 1
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
