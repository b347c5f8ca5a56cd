""":func:`launch`: ``torchrun --standalone`` as a child process of the notebook, on 127.0.0.1 only,
that always ends (time limit, SIGTERM, then SIGKILL of every process it started)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ...config import repo_root
from ...timing.timeline import Timeline
from ..processes import Descendants, wait_for_exit
from .run import DistRun, RankRecord


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
    root = repo_root()
    with tempfile.TemporaryDirectory(prefix="dllab-torchrun-", ignore_cleanup_errors=True) as out:
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
            # With a rank to kill, the agent polls its ranks once a second: a peer's own read error, which
            # its step prints at once (ranks.SyncStep), then comes before the agent's SIGTERM unless the
            # poll falls in those milliseconds (one CI run at 0.1 s: 0.07 s apart, SIGTERM first). Otherwise
            # torchrun's default, 0.1 s: the agent notices the ranks have finished ~0.5 s sooner.
            f"--monitor-interval={1 if kill_rank is not None else 0.1}",
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
            # torchrun's agent makes a log folder there (torchelastic_*) and leaves it; the ranks' workers
            # make their multiprocessing folders there (pymp-*): all of it goes with ``out``.
            "TMPDIR": out,
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
