"""What runs in every rank (imported by :mod:`helpers._dist_child`; torch and the stdlib only):
:class:`SlowIds`, :class:`SetEpochSampler`, :class:`SyncStep`."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler


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
        self.ids.extend(int(i) for i in batch)
        time.sleep(self.step_s)
        if self.kill_at is not None and self.steps == self.kill_at:
            # A rank dies for real (no clean-up), after its step's compute and just before the sync: its
            # peers are then in (or about to enter) that all_reduce, and hear of it within milliseconds.
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.perf_counter()
        try:
            dist.all_reduce(self.tensor)
        except RuntimeError as error:
            # Said the moment it fails, prefixed as torch's excepthook prefixes a rank's traceback: torchrun's
            # agent stops this rank with SIGTERM at its first poll after the peer died, and the traceback
            # printed on the way out once came too late (a timing test, on a slow spell of a 2-core machine).
            # What is left of the race: the peers' skew into this all_reduce, gloo's detection, this print.
            waited = time.perf_counter() - start
            print(f"[rank{dist.get_rank()}]: all_reduce failed after {waited:.3f} s: {error}",
                  file=sys.stderr, flush=True)
            raise
        end = time.perf_counter()
        self.waits.append(end - start)
        self.spans.append((start, end))
