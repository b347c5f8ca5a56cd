"""Run a command and fail if it leaves anything behind: ``python scripts/leftovers.py -- make untimed``.

The lab promises that its servers, workers and failure demos leave no process, temporary folder
or shared-memory segment behind. ``make test`` runs inside this script, which checks it:

* the command runs with ``TMPDIR`` set to a fresh folder, so every temporary file or folder any of
  its processes makes (Python's ``tempfile``, multiprocessing's ``pymp-*``, torchrun's
  ``torchelastic_*``, PyTorch's ``torch-shm-dir-*``) lands there;
* when it has ended, the script waits up to ``--grace-s`` for what stops on its own (PyTorch's
  ``torch_shm_manager`` exits shortly after its last client), then lists what is left:
  - files and folders in that folder — except two that their makers keep there by design and
    reuse, one per user, not one per run: ``pytest-of-<user>`` (pytest's base folder for
    ``tmp_path``, which keeps the last three runs) and ``torchinductor_<user>`` (``torch.compile``'s
    cache, notebook 18: torch makes it even with the eager backend and ``TORCHINDUCTOR_CACHE_DIR``
    set, ``torch/_inductor/runtime/cache_dir_utils.py``);
  - processes that still carry that ``TMPDIR`` in their environment (they were started by the
    command, even those that left its process tree with a session of their own);
  - PyTorch segments (``torch_*``) in ``/dev/shm`` that were not there before, except those whose
    maker (the pid in the name, ``torch_<pid>_...``) still runs outside the command: another program's
    batch in flight, not this run's leftover. PyTorch creates each segment, then unlinks it once it
    holds it open; removing it in between makes the sender's ``unlink`` fail, and its queue's feeder
    thread drops the batch with a printed traceback: the loop waits for that batch for ever (seen:
    notebook 12, running beside the test of this script, stalled until its cell timeout);
    and except those that a process outside the command has open or mapped: with the ``file_system``
    strategy a batch stays a named segment while the loop holds it, after its worker (its maker) has
    exited, and the last process to let go of it unlinks it (``RefcountedMapAllocator::close``, ATen's
    ``MapAllocator.cpp``). Removed under it, that ``unlink`` fails inside a destructor and PyTorch
    aborts the process (seen: CI, a pytest worker running the ``file_system`` case of
    ``test_shm_monitor_counts_…`` died with ``Fatal Python error: Aborted`` while the test of this
    script ran beside it);
* it stops those processes, removes the folder and exits 1 if it found anything, else with the
  command's own status.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHM = Path("/dev/shm")
KEPT_BY_DESIGN = ("pytest-of-", "torchinductor_")


def torch_segments() -> set[str]:
    return {p.name for p in SHM.iterdir() if p.name.startswith("torch_")} if SHM.is_dir() else set()


def carries(pid: str, tmpdir: str) -> bool | None:
    """Whether process ``pid`` has ``TMPDIR=tmpdir`` in its environment; None when it has ended or
    is not ours to read."""
    try:
        return f"TMPDIR={tmpdir}".encode() in (Path("/proc") / pid / "environ").read_bytes().split(b"\0")
    except OSError:
        return None


def made_outside(name: str, tmpdir: str) -> bool:
    """Whether the segment's maker, the pid in ``torch_<pid>_...``, is a live process that does not
    carry ``TMPDIR=tmpdir``: a program running beside the command. (A dead maker's pid taken by
    another program would hide a real leftover: rare, and the next run finds it again.)"""
    parts = name.split("_")
    return len(parts) >= 2 and parts[1].isdigit() and carries(parts[1], tmpdir) is False


def held_outside(names: set[str], tmpdir: str) -> set[str]:
    """Those of the ``/dev/shm`` files ``names`` that a process not carrying ``TMPDIR=tmpdir`` has
    open (``/proc/PID/fd``) or mapped (``/proc/PID/maps``). Processes that end meanwhile, or that are
    not ours to read, are skipped. (``helpers.failures.held_shm_files`` scans the same way; this
    script imports nothing of the lab, whose package imports torch.)"""
    held: set[str] = set()
    if not names:
        return held
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or carries(entry.name, tmpdir) is not False:
            continue
        try:
            for fd in (entry / "fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:  # closed meanwhile
                    continue
                held.add(target.removeprefix("/dev/shm/").removesuffix(" (deleted)"))
            with open(entry / "maps") as maps:
                for line in maps:
                    if "/dev/shm/" in line:
                        held.add(line.rstrip("\n").split("/dev/shm/", 1)[1].removesuffix(" (deleted)"))
        except OSError:  # ended meanwhile, or not ours
            continue
    return held & names


def processes_with(tmpdir: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose environment has ``TMPDIR=tmpdir``."""
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid() or not carries(entry.name, tmpdir):
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        found.append((int(entry.name), command.strip()))
    return found


def left_in(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir() if not p.name.startswith(KEPT_BY_DESIGN))


#: The name of the file ``tempfile._get_default_tempdir`` writes and removes in a fresh process.
PROBE_NAME = re.compile(r"[a-z0-9_]{8}")


def describe(path: Path) -> str:
    """The name, when it last changed, and what it is (a clue to which test or notebook made it)."""
    try:
        made = time.strftime("%H:%M:%S", time.localtime(path.lstat().st_mtime))
        if path.is_symlink() or path.is_socket():
            what = "a socket" if path.is_socket() else "a link"
        elif path.is_dir():
            inside = sorted(p.name for p in path.iterdir())
            what = f"a folder holding {', '.join(inside[:5])}" if inside else "an empty folder"
        else:
            size = path.stat().st_size
            head = path.read_bytes()[:60] if size else b""
            what = f"a file of {size} bytes" + (f" starting {head!r}" if head else "")
            if size == 0 and PROBE_NAME.fullmatch(path.name):
                what += (": likely Python's probe of the temporary folder (tempfile), left by a fresh"
                         " process that exited during its first use of it, such as a spawned DataLoader"
                         " worker shut down with a batch in flight: see helpers.use_start_method")
    except OSError:
        return path.name
    return f"{path.name} ({what}; last changed {made})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace-s", type=float, default=10.0,
                        help="how long to wait for what ends on its own (default 10 s)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("give the command to run after --, e.g. -- make untimed")

    segments_before = torch_segments()
    tmpdir = Path(tempfile.mkdtemp(prefix="dllab-run-"))
    try:
        status = subprocess.call(command, env={**os.environ, "TMPDIR": str(tmpdir)})
        deadline = time.monotonic() + options.grace_s
        while True:
            files, processes = left_in(tmpdir), processes_with(str(tmpdir))
            new = torch_segments() - segments_before
            candidates = {n for n in new if not made_outside(n, str(tmpdir))}
            segments = sorted(candidates - held_outside(candidates, str(tmpdir)))
            if not (files or processes or segments) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if files or processes or segments:
            print(f"\nleftovers.py: the command left these behind ({options.grace_s:.0f} s after it ended):",
                  file=sys.stderr)
            for name in files:
                print(f"  in its temporary folder: {describe(tmpdir / name)}", file=sys.stderr)
            for pid, cmdline in processes:
                print(f"  a process still running: {pid} {cmdline[:200]}", file=sys.stderr)
            for name in segments:
                print(f"  a shared-memory segment: /dev/shm/{name}", file=sys.stderr)
            print("Each test, notebook and demo must stop what it starts and remove what it makes; "
                  "these were removed now.", file=sys.stderr)
            for pid, _ in processes:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            for name in segments:
                (SHM / name).unlink(missing_ok=True)
            return 1
        return status
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
