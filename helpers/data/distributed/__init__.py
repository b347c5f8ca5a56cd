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

from ..processes import Descendants, wait_for_exit
from .launch import launch, loopback_interface
from .ranks import SetEpochSampler, SlowIds, SyncStep
from .run import DistRun, RankRecord

__all__ = [
    "SetEpochSampler", "SlowIds", "SyncStep", "DistRun", "RankRecord", "launch", "loopback_interface",
    "Descendants", "wait_for_exit",
]
