"""Many processes: DistributedSampler and torchrun (notebook 17).

:func:`launch` runs ``torchrun --standalone --nproc_per_node=N`` as a child process of the
notebook, on 127.0.0.1 only (its TCP stores through :mod:`helpers._torchrun`, which runs
torchrun's own ``main`` with the stores bound to the loopback; ``MASTER_ADDR`` and gloo's
interface),
with one training process per rank (:mod:`helpers._dist_child`). Each rank iterates its own
``DataLoader`` over a ``DistributedSampler``, records its timeline with
:func:`helpers.record`, ends every step with an ``all_reduce`` (the gradient sync of data
parallel training, with gloo on the CPU) whose wait it measures, and writes what it saw —
its timeline, the sample ids of every epoch, its waits — to a JSON file. :class:`DistRun`
gathers the ranks; :func:`plot_ranks` draws one figure with a row per rank and per worker.

The launch always ends: past its time limit torchrun is stopped (SIGTERM, which makes its
agent stop the ranks, then SIGKILL), every process of the launch (remembered by pid while
torchrun ran: :class:`Descendants`) is waited for and killed if still running 15 s later,
and a rank that dies
(``kill_rank``: it kills itself with SIGKILL at a given step) makes torchrun stop the others
and report the failure, which :class:`DistRun` keeps (``returncode``, ``output``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler

from .timeline import Timeline


class SlowIds(Dataset):
    """Sample ``i`` is ``i``; fetching it waits ``load_s`` (times ``slow_factor`` in the process
    of rank ``slow_rank``: that rank's data is slow — a straggler)."""

    def __init__(
        self, n: int, load_s: float = 0.0, *, slow_rank: int | None = None, slow_factor: float = 1.0
    ):
        self.n, self.load_s, self.slow_rank, self.slow_factor = n, load_s, slow_rank, slow_factor

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        rank = int(os.environ.get("RANK", "0"))
        wait = self.load_s * (self.slow_factor if rank == self.slow_rank else 1.0)
        if wait:
            time.sleep(wait)
        return index


class SetEpochSampler(DistributedSampler):
    """A ``DistributedSampler`` that calls its own ``set_epoch`` each time an epoch starts —
    what a training loop does with ``sampler.set_epoch(epoch)``."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._next_epoch = 0

    def __iter__(self):
        self.set_epoch(self._next_epoch)
        self._next_epoch += 1
        return super().__iter__()


@dataclass
class RankRecord:
    rank: int
    origin: float  #: the recording's start on the machine's monotonic clock
    timeline: Timeline
    ids: list[list[int]]  #: the sample ids of each epoch, in the order the rank trained on them
    sync_waits: list[float]  #: per step, seconds the rank waited in all_reduce
    sync_spans: list[tuple[float, float]]  #: per step, (start, end) of the all_reduce (recording's clock)


@dataclass
class DistRun:
    """What one launch produced."""

    world: int
    ranks: list[RankRecord] = field(default_factory=list)
    returncode: int = 0
    output: str = ""  #: torchrun's output (stdout and stderr)
    seconds: float = 0.0
    #: processes of the launch still running 15 s after torchrun ended (stopped by the lab then)
    left_behind: list[int] = field(default_factory=list)
    #: DataLoader workers of each rank in this launch
    workers: dict[int, int] = field(default_factory=dict)

    def root_cause(self) -> dict[str, str]:
        """torchrun's "Root Cause" section of a failed launch, as its ``key : value`` lines.

        torchrun names as the root cause the failure with the smallest timestamp, taken in
        whole seconds (``int(time.time())`` when no error file was written), ties going to
        the lowest rank (``ChildFailedError.get_first_failure`` in
        ``torch/distributed/elastic/multiprocessing/errors``): a peer that failed in the same
        second as the rank that died first can be named instead. :meth:`failures` lists all."""
        at = self.output.find("Root Cause")
        if at < 0:
            return {}
        out = {}
        for line in self.output[at:].splitlines()[1:]:
            if line.startswith("===="):
                break
            if ":" in line:
                key, value = line.split(":", 1)
                out.setdefault(key.strip(), value.strip())
        return out

    def failures(self) -> dict[int, str]:
        """Every failed rank torchrun reported (its "Failures" and "Root Cause" sections): rank →
        its exit code line (e.g. ``"-9 (pid: 123) (SIGKILL)"``)."""
        at = self.output.find("Failures:")
        out: dict[int, str] = {}
        rank = None
        for line in self.output[at:].splitlines() if at >= 0 else []:
            key, _, value = line.partition(":")
            if key.strip() == "rank" and value.strip():
                rank = int(value.split()[0])
            elif key.strip() == "exitcode" and rank is not None:
                out.setdefault(rank, value.strip())
                rank = None
        return out

    def peers_that_saw_it(self) -> set[int]:
        """Ranks whose ``all_reduce`` failed because a peer's connection went away (gloo's read
        error, "Connection reset by peer" or "closed by peer", in their traceback)."""
        import re

        return {
            int(m.group(1))
            for m in re.finditer(r"^\[rank(\d+)\]: RuntimeError: .*Connection (?:reset|closed) by peer",
                                 self.output, flags=re.MULTILINE)
        }

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and len(self.ranks) == self.world

    def epoch_ids(self, epoch: int) -> list[int]:
        """Every rank's ids of an epoch, together."""
        return [i for r in self.ranks for i in r.ids[epoch]]

    def repeated(self, epoch: int = 0) -> int:
        ids = self.epoch_ids(epoch)
        return len(ids) - len(set(ids))

    def same_order_each_epoch(self) -> bool:
        return all(r.ids[0] == r.ids[1] for r in self.ranks if len(r.ids) > 1)

    def steps_per_s(self) -> dict[int, float]:
        """Per rank, steps per second after the first step (start-up left out)."""
        out = {}
        for r in self.ranks:
            b = sorted(r.timeline.batches, key=lambda x: x.ready)
            out[r.rank] = (len(b) - 1) / (b[-1].step_end - b[0].step_end) if len(b) > 1 else float("nan")
        return out

    def median_sync_wait(self) -> dict[int, float]:
        import statistics

        return {r.rank: statistics.median(r.sync_waits[1:] or r.sync_waits) for r in self.ranks}

    def median_fetch(self) -> dict[int, float]:
        import statistics

        return {r.rank: statistics.median(b.fetch_s for b in r.timeline.batches) for r in self.ranks}

    def loop_s(self) -> dict[int, float]:
        """Per rank, the median time its loop took per step without waiting: from one step's end
        to the next, less the wait for data and the wait in ``all_reduce`` for the other ranks —
        the step, the ``all_reduce`` itself and the loop's own work. The pace every rank could
        keep if no rank waited for data."""
        import statistics

        out = {}
        for r in self.ranks:
            b = sorted(r.timeline.batches, key=lambda x: x.ready)
            own = [
                later.step_end - earlier.step_end - later.wait_s - wait
                for earlier, later, wait in zip(b, b[1:], r.sync_waits[1:], strict=False)
            ]
            out[r.rank] = statistics.median(own) if own else float("nan")
        return out


class Descendants:
    """Every process descended from ``pid`` while it runs, remembered by pid and start time (a
    thread looks every ``interval_s``), so that those still running after it ended can be
    found — also when they were re-parented because their parent died (a killed rank's
    DataLoader workers), and whatever their command line (``spawn`` and ``forkserver``
    workers do not carry their rank's)."""

    def __init__(self, pid: int, interval_s: float = 0.05):
        import threading

        self.pid, self.interval_s = pid, interval_s
        self.seen: dict[int, float] = {}  # pid -> create_time (a reused pid is another process)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while True:
            try:
                for child in root.children(recursive=True):
                    try:
                        self.seen.setdefault(child.pid, child.create_time())
                    except psutil.Error:
                        continue
            except psutil.Error:  # the root ended: its descendants are all known by now
                return
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> None:
        """Stop looking (after the root process ended)."""
        self._stop.set()
        self._thread.join()

    def running(self) -> list:
        """The remembered processes that still run (``psutil.Process``; zombies do not count)."""
        import psutil

        alive = []
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                continue
        return alive


def wait_for_exit(
    tag: str | None = None, *, within_s: float, descendants: Descendants | None = None
) -> list[int]:
    """Wait until no process runs whose command line contains ``tag``, or that ``descendants``
    remembered; kill those still running after ``within_s`` seconds and return their pids
    (none: nothing was left)."""
    import psutil

    def running() -> list[psutil.Process]:
        found = {p.pid: p for p in descendants.running()} if descendants is not None else {}
        if tag is None:
            return list(found.values())
        for p in psutil.process_iter(["cmdline", "status"]):
            try:
                if p.info["status"] != psutil.STATUS_ZOMBIE and tag in " ".join(p.info["cmdline"] or []):
                    found.setdefault(p.pid, p)
            except psutil.Error:
                continue
        return list(found.values())

    deadline = time.monotonic() + within_s
    while (alive := running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return [p.pid for p in alive]


def loopback_interface() -> str:
    """The loopback interface's name for gloo (``lo`` on Linux, ``lo0`` on macOS and BSDs)."""
    import psutil

    names = psutil.net_if_addrs()
    return next((n for n in ("lo", "lo0") if n in names), "lo")


def launch(
    nproc: int,
    *,
    n: int,
    batch_size: int,
    num_workers: int | dict[int, int] = 1,
    epochs: int = 1,
    set_epoch: bool = True,
    drop_last: bool = False,
    step_s: float = 0.01,
    load_s: float = 0.0,
    slow_rank: int | None = None,
    slow_factor: float = 1.0,
    kill_rank: int | None = None,
    kill_step: int = 3,
    timeout_s: float = 240.0,
) -> DistRun:
    """Run ``torchrun --standalone --nproc_per_node=nproc`` with the lab's training child; see
    the module docstring. ``num_workers`` may differ per rank ({rank: workers})."""
    if not isinstance(nproc, int) or not 1 <= nproc <= 8:
        raise ValueError(f"nproc must be 1 to 8 processes, got {nproc!r}")
    if kill_rank is not None and not 0 <= kill_rank < nproc:
        raise ValueError(f"kill_rank must be a rank, 0 to {nproc - 1}, got {kill_rank}")
    workers = num_workers if isinstance(num_workers, dict) else {r: num_workers for r in range(nproc)}
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="dllab-torchrun-") as out:
        config = dict(
            n=n,
            batch_size=batch_size,
            workers={str(k): v for k, v in workers.items()},
            epochs=epochs,
            set_epoch=set_epoch,
            drop_last=drop_last,
            step_s=step_s,
            load_s=load_s,
            slow_rank=slow_rank,
            slow_factor=slow_factor,
            kill_rank=kill_rank,
            kill_step=kill_step,
            out=out,
        )
        command = [
            sys.executable,
            "-m",
            "helpers._torchrun",  # torchrun's main, its stores bound to 127.0.0.1 (see that module)
            "--standalone",
            "--local-addr=127.0.0.1",  # what the ranks are told to connect to (else the host's name)
            f"--nproc_per_node={nproc}",
            "--max-restarts=0",
            # The agent polls its ranks once a second (torchrun's default is 0.1 s): a peer's own read
            # error then prints before the agent's SIGTERM, on a slow CPU too (one CI run: 0.07 s apart).
            "--monitor-interval=1",
            "-m",
            "helpers._dist_child",
            json.dumps(config),
        ]
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "GLOO_SOCKET_IFNAME": loopback_interface(),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "TQDM_DISABLE": "1",
        }
        start = time.monotonic()
        process = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        descendants = Descendants(process.pid)
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.terminate()  # SIGTERM: torchrun's agent stops its ranks (each in a session of its own)
            try:
                output, _ = process.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
            output += f"\n[the lab stopped torchrun after {timeout_s:.0f} s]"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        descendants.stop()
        # Every process of the launch was seen while torchrun ran (ranks, their DataLoader workers under
        # any start method); fork's workers also carry ``out`` in their command line. A worker whose rank
        # was killed outlives it until its watchdog notices (a few seconds): wait for those, and stop what
        # is left.
        stragglers = wait_for_exit(out, within_s=15.0, descendants=descendants)
        run = DistRun(
            nproc,
            returncode=process.returncode,
            output=output,
            seconds=time.monotonic() - start,
            left_behind=stragglers,
            workers=workers,
        )
        for path in sorted(Path(out).glob("rank*.json")):
            data = json.loads(path.read_text())
            run.ranks.append(
                RankRecord(
                    data["rank"],
                    data["origin"],
                    Timeline.from_dict(data["timeline"]),
                    data["ids"],
                    data["sync_waits"],
                    [tuple(s) for s in data["sync_spans"]],
                )
            )
        run.ranks.sort(key=lambda r: r.rank)
    return run


class SyncStep:
    """The step of data-parallel training: ``step_s`` of modelled compute, then an
    ``all_reduce`` of a small tensor (the gradients' sync); records each batch's ids and how
    long the all_reduce waited for the other ranks."""

    def __init__(self, step_s: float, kill_at: int | None = None):
        self.step_s, self.kill_at = step_s, kill_at
        self.ids: list[int] = []
        self.waits: list[float] = []
        self.spans: list[tuple[float, float]] = []
        self.tensor = torch.zeros(1024)
        self.steps = 0

    def __call__(self, batch: Any) -> None:
        import torch.distributed as dist

        self.steps += 1
        if self.kill_at is not None and self.steps == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # a rank dies for real: no clean-up
        self.ids.extend(int(i) for i in batch)
        time.sleep(self.step_s)
        start = time.perf_counter()
        dist.all_reduce(self.tensor)
        end = time.perf_counter()
        self.waits.append(end - start)
        self.spans.append((start, end))
