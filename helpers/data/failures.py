"""Shared memory: what a run uses in /dev/shm, and real failures contained in a child process.

A batch travels from a worker to the loop through shared memory: the worker's
tensors are moved into a segment in ``/dev/shm``, and (with the default
``file_descriptor`` sharing strategy) a file descriptor to it is sent over a Unix
socket. :class:`ShmMonitor` samples how much of ``/dev/shm`` is in use during a run.

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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import repo_root

SHM = Path("/dev/shm")


def shm_used_bytes() -> int | None:
    """Bytes in use on ``/dev/shm`` (None where there is none: macOS, Windows)."""
    if not SHM.is_dir():
        return None
    stat = os.statvfs(SHM)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


#: Python's own helper processes: started once per process for spawn and forkserver, and kept
#: alive by design until it exits — not something a DataLoader leaves behind.
_MP_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


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


class ShmMonitor:
    """Sample ``/dev/shm`` use in a thread while a block runs::

        with ShmMonitor() as shm:
            helpers.record(loader)
        shm.peak_extra_bytes   # the most above what was in use before
    """

    def __init__(self, interval_s: float = 0.002):
        self.interval_s = interval_s
        self.baseline_bytes = 0
        self.peak_bytes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            used = shm_used_bytes() or 0
            self.peak_bytes = max(self.peak_bytes, used)
            self.samples += 1
            time.sleep(self.interval_s)

    def __enter__(self) -> ShmMonitor:
        self.baseline_bytes = self.peak_bytes = shm_used_bytes() or 0
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
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                          cwd=repo_root())
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


def _demo_shm(options: argparse.Namespace) -> dict[str, Any]:
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
    try:
        result = _demo_fd(options) if options.demo == "fd" else _demo_shm(options)
    except Exception as error:  # the real error, reported to the parent
        result = {"error": f"{type(error).__name__}: {error}", "shm_total_bytes": _shm_total_bytes()}
        print("RESULT " + json.dumps(result), flush=True)
        return 1
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
