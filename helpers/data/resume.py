"""Resume mid-epoch, exactly (notebook 15).

A training run in a child process (``python -m helpers._resume_child``) iterates a loader over
:class:`IdDataset` (sample ``i`` is its own id), logs every batch's ids as it trains on it,
and checkpoints every few steps: the step and, for torchdata's ``StatefulDataLoader``, the
loader's ``state_dict()``. :func:`kill_and_resume` has that child killed for real (SIGKILL,
sent by itself to its process group right after a given step, so the step is exact: the
process and its DataLoader workers die at once, as a pre-emption kills a job), starts a second child that
resumes from the last checkpoint, and counts, from the logged ids, how often each sample
of the epoch was trained on: what the checkpoint covered of the first run plus everything
of the second.

Three ways to resume (``kind``):

- ``"stateful"``: ``torchdata.stateful_dataloader.StatefulDataLoader`` with its state
  restored (``load_state_dict``) — the sampler's position and every worker's state;
- ``"restart"``: a plain ``DataLoader`` started again: the epoch restarts;
- ``"skip"``: a plain ``DataLoader`` started again, skipping as many batches as the
  checkpoint had counted (a naive skip-by-count: it loads them again to throw them away).

torchdata 0.11 calls ``torch.set_vital`` when a ``StatefulDataLoader`` is made, which
torch 2.14 deprecates with a ``UserWarning``; :func:`stateful_loader` filters exactly that
message (it is about torchdata's telemetry call, not about the loader) and nothing else.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from ..config import repo_root
from .processes import Descendants

KINDS = ("stateful", "restart", "skip")
#: What torchdata 0.11's StatefulDataLoader triggers in torch 2.14 (its own telemetry call).
SET_VITAL_WARNING = "'set_vital' is deprecated"
#: A ``warnings.filterwarnings`` message pattern matching exactly that warning.
SET_VITAL_FILTER = ".*'set_vital' is deprecated, please do not call"


class IdDataset(Dataset):
    """Sample ``i`` is the integer ``i`` (so logged batches prove which samples were seen).

    ``load_s``: a modelled load per sample (a sleep); every ``slow_every``-th sample takes
    ``slow_factor`` times longer (stragglers reorder batches when ``in_order=False``).
    ``state_bytes``: a dataset state of that size (``state_dict``), as a dataset that keeps
    a shuffle buffer or an RNG does. At every snapshot ``StatefulDataLoader``'s worker builds it
    and compares it with its previous snapshot; only the keys whose value changed are sent
    (torchdata's incremental state) — this buffer never changes, so its price here is building
    and comparing it, in the worker, before the batch can go.
    ``cold``: ``(first, stop, seconds)``: samples ``first <= i < stop`` take ``seconds`` more
    each (files not yet in the page cache: cold on the first run, warm when resumed)."""

    def __init__(
        self,
        n: int,
        *,
        load_s: float = 0.0,
        slow_every: int = 0,
        slow_factor: float = 8.0,
        state_bytes: int = 0,
        cold: tuple[int, int, float] | None = None,
    ):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        if load_s < 0 or state_bytes < 0 or slow_every < 0:
            raise ValueError("load_s, slow_every and state_bytes must not be negative")
        self.n, self.load_s, self.slow_every, self.slow_factor = n, load_s, slow_every, slow_factor
        self.state_bytes, self.cold = state_bytes, cold
        self.loaded = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        if self.load_s:
            slow = self.slow_every and index % self.slow_every == 0
            time.sleep(self.load_s * (self.slow_factor if slow else 1.0))
        if self.cold and self.cold[0] <= index < self.cold[1]:
            time.sleep(self.cold[2])
        self.loaded += 1
        return index

    def state_dict(self) -> dict[str, Any]:
        return {"loaded": self.loaded, "buffer": bytes(self.state_bytes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loaded = int(state.get("loaded", 0))


def stateful_loader(dataset: Dataset, **kwargs: Any):
    """``StatefulDataLoader(dataset, **kwargs)``, with torchdata's ``set_vital`` deprecation
    warning filtered (exactly that message; see the module docstring)."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        raise ImportError("torchdata is not installed: run `make lab` (or `pip install torchdata`)") from None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SET_VITAL_FILTER, category=UserWarning)
        return StatefulDataLoader(dataset, **kwargs)


def set_vital_warning() -> str | None:
    """The warning torchdata's ``StatefulDataLoader`` triggers here when made, or None."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StatefulDataLoader(IdDataset(2))
    return next((str(w.message) for w in caught if SET_VITAL_WARNING in str(w.message)), None)


def make_loader(config: dict[str, Any]):
    """The run's loader: a ``StatefulDataLoader`` for ``"stateful"``, else a ``DataLoader``;
    shuffled with a seeded generator, so a restarted run draws the same order (or in order,
    ``shuffle=False``); with ``seed`` None, with no generator: each ``iter()`` draws its order
    from torch's global generator, which a fresh process seeds at random (nothing here calls
    ``torch.manual_seed``). ``cold_batch``: that batch's samples are slow in the first run only."""
    cold = None
    if config.get("cold_batch") is not None and config.get("run", 1) == 1:
        first = config["cold_batch"] * config["batch_size"]
        cold = (first, first + config["batch_size"], config.get("cold_s", 0.05))
    dataset = IdDataset(
        config["n"], load_s=config.get("load_s", 0.0), slow_every=config.get("slow_every", 0), cold=cold
    )
    settings = dict(
        batch_size=config["batch_size"],
        shuffle=config.get("shuffle", True),
        num_workers=config["num_workers"],
        generator=None if config["seed"] is None else torch.Generator().manual_seed(config["seed"]),
    )
    if config["num_workers"] > 0:
        settings["in_order"] = config.get("in_order", True)
    if config["kind"] == "stateful":
        return stateful_loader(dataset, snapshot_every_n_steps=config.get("snapshot_every", 1), **settings)
    return DataLoader(dataset, **settings)


def _save(path: Path, payload: dict) -> None:
    partial = path.with_name(path.name + ".part")
    torch.save(payload, partial)
    os.replace(partial, path)  # a kill never leaves half a checkpoint


def train(config: dict[str, Any]) -> None:
    """The child's loop: resume from the checkpoint if asked, log each batch, checkpoint every
    ``every`` steps."""
    log, checkpoint = Path(config["log"]), Path(config["checkpoint"])
    loader = make_loader(config)
    start = 0
    if config.get("resume") and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        start = saved["step"]
        if config["kind"] == "stateful":
            loader.load_state_dict(saved["loader"])
    iterator = iter(loader)
    step = start if config["kind"] != "restart" else 0
    if config["kind"] == "skip":
        for _ in range(start):  # naive: fetch and throw away as many batches as were trained on
            next(iterator)
    with open(log, "a") as out:
        for batch in iterator:
            step += 1
            out.write(json.dumps({"run": config.get("run", 0), "step": step, "ids": batch.tolist()}) + "\n")
            out.flush()
            os.fsync(out.fileno())
            time.sleep(config.get("step_s", 0.0))
            if step % config["every"] == 0:
                state = loader.state_dict() if config["kind"] == "stateful" else None
                _save(checkpoint, {"step": step, "loader": state})
            if step == config.get("kill_after"):
                # killed for real, as a pre-emption kills a job: the process and its DataLoader workers
                # at once, and no clean-up runs (killed from inside, right after this step, so the
                # checkpoint it resumes from is known). :func:`_child` makes it its process group's
                # leader; run any other way, it kills itself only, and its workers end when their
                # watchdog sees it gone (torch checks every MP_STATUS_CHECK_INTERVAL, 5 s).
                if os.getpgrp() == os.getpid():
                    os.killpg(os.getpid(), signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class ResumeResult:
    """What a killed-and-resumed epoch trained on."""

    kind: str
    n: int
    checkpoint_step: int  #: the step of the checkpoint the second run resumed from
    killed_after: int  #: steps the first run had logged when it was killed
    killed_by: int  #: the first run's return code (-9: SIGKILL)
    counts: collections.Counter = field(default_factory=collections.Counter)  #: id -> times trained on
    order: list[int] = field(default_factory=list)  #: the ids in the order they were trained on
    resumed: list[int] = field(default_factory=list)  #: of them, the second run's, in its order

    @property
    def missing(self) -> list[int]:
        return [i for i in range(self.n) if self.counts[i] == 0]

    @property
    def repeated(self) -> int:
        """Extra trainings: samples seen more than once count once per repeat."""
        return sum(c - 1 for c in self.counts.values() if c > 1)

    @property
    def exact(self) -> bool:
        return not self.missing and self.repeated == 0 and set(self.counts) == set(range(self.n))

    def describe(self) -> str:
        return (
            f"{self.kind}: killed after step {self.killed_after} (return code {self.killed_by}), resumed "
            f"from step {self.checkpoint_step}: {sum(1 for c in self.counts.values() if c == 1)} of "
            f"{self.n} samples once, {self.repeated} repeats, {len(self.missing)} missing"
        )


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # the line being written when the child was killed
            break
    return out


def _wait_for_exit(tag: str, descendants) -> None:
    """Wait for every process of a training child to end: those seen while it ran (its DataLoader
    workers, whatever their start method) and any carrying ``tag`` in their command line."""
    from .processes import wait_for_exit

    descendants.stop()
    wait_for_exit(tag, within_s=15.0, descendants=descendants)


def _child(config: dict, folder: Path) -> subprocess.Popen:
    root = repo_root()
    with open(folder / f"stderr{config['run']}.txt", "w") as errors:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "helpers._resume_child", json.dumps(config)],
            cwd=root,
            # A child killed with SIGKILL takes its DataLoader workers down with it, and each leaves its
            # multiprocessing folder (pymp-*) in the temporary folder: here, ``folder``, removed after.
            env={**os.environ, "TMPDIR": str(folder)},
            # its own process group, which its kill takes down whole (workers, a forkserver: every
            # start method's workers are its descendants and stay in the group)
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )


def kill_and_resume(
    kind: str,
    *,
    n: int,
    batch_size: int,
    num_workers: int,
    kill_after: int,
    every: int,
    in_order: bool = True,
    seed: int | None = 0,
    step_s: float = 0.0,
    load_s: float = 0.0,
    slow_every: int = 0,
    shuffle: bool = True,
    cold_batch: int | None = None,
    cold_s: float = 0.05,
    timeout_s: float = 120.0,
) -> ResumeResult:
    """Train ``kind`` in a child that kills itself with SIGKILL right after step ``kill_after``,
    resume in a new child from its last checkpoint (every ``every`` steps) to the epoch's end,
    and count what the epoch trained on (see the module docstring). ``seed=None`` shuffles
    without a generator, as a loader made without one does. ``cold_batch`` (with
    ``shuffle=False``): that batch's samples take ``cold_s`` more each in the first run only —
    their files are cold then and in the page cache when the job resumes."""
    if cold_batch is not None and shuffle:
        raise ValueError("cold_batch names a batch of the sequential order: use it with shuffle=False")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    steps = -(-n // batch_size)
    if not 0 < every <= kill_after < steps:
        raise ValueError(
            f"need 0 < every <= kill_after < the epoch's {steps} steps, got every={every}, "
            f"kill_after={kill_after}"
        )
    with tempfile.TemporaryDirectory(prefix="dllab-resume-") as tmp:
        folder = Path(tmp)
        config = dict(
            kind=kind,
            n=n,
            batch_size=batch_size,
            num_workers=num_workers,
            in_order=in_order,
            seed=seed,
            every=every,
            step_s=step_s,
            load_s=load_s,
            slow_every=slow_every,
            shuffle=shuffle,
            cold_batch=cold_batch,
            cold_s=cold_s,
            log=str(folder / "log.jsonl"),
            checkpoint=str(folder / "checkpoint.pt"),
            run=1,
        )
        first = _child({**config, "kill_after": kill_after}, folder)
        seen = Descendants(first.pid)
        try:
            first.wait(timeout_s)  # it kills itself with SIGKILL after step kill_after
        except subprocess.TimeoutExpired:
            raise TimeoutError(
                f"the training child did not reach step {kill_after} in {timeout_s:.0f} s"
            ) from None
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(10)
            # its DataLoader workers died with it: make sure none is left
            _wait_for_exit(str(folder), seen)
        if first.returncode != -signal.SIGKILL:
            raise RuntimeError(
                f"the training child ended with {first.returncode} before step {kill_after}: "
                + (folder / "stderr1.txt").read_text()[-2000:]
            )
        killed_after = len(_lines(folder / "log.jsonl"))
        saved = (
            torch.load(folder / "checkpoint.pt", weights_only=False)
            if (folder / "checkpoint.pt").exists()
            else {"step": 0}
        )
        second = _child({**config, "run": 2, "resume": True}, folder)
        seen = Descendants(second.pid)
        try:
            code = second.wait(timeout_s)
        finally:
            if second.poll() is None:
                second.kill()
                second.wait(10)
        _wait_for_exit(str(folder), seen)
        if code != 0:
            raise RuntimeError("the resumed child failed: " + (folder / "stderr2.txt").read_text()[-2000:])
        lines = _lines(folder / "log.jsonl")
        trained = [x for x in lines if x["run"] == 1 and x["step"] <= saved["step"]] + [
            x for x in lines if x["run"] == 2
        ]
        order = [i for x in trained for i in x["ids"]]
        resumed = [i for x in lines if x["run"] == 2 for i in x["ids"]]
        return ResumeResult(
            kind, n, saved["step"], killed_after, first.returncode, collections.Counter(order), order, resumed
        )
