"""What every rule reads, worked out once from a diagnosis (:class:`Context`): the model's n, y and m,
the cores the workers can compute on, and the measured conditions the rules turn on."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from ....cores import cpu_limits
from ...theory import recommend_num_workers
from ..advice import ms
from ..thresholds import BUSY_WORKERS, COLLATE_SHARE, INPUT_BOUND, MAIN_SHARE, NEAR_PACE, WORTH


@dataclass(frozen=True)
class Context:
    d: Any  #: the Diagnosis
    loader: DataLoader
    device: Any
    workers: int
    n: float  #: a batch's fetch, the mean over the run
    y: float  #: the step on cached batches
    m: float  #: the main process's own share per batch (with 0 workers: what receiving would add)
    own_m: float  #: m with its receiving as measured alone (no worker competing for its core)
    limits: Any
    cores: int  #: whole cores free for computing workers
    capacity: float  #: the CPU they can use (a quota's fraction counts)
    needed: int  #: the sizing rule's count
    target: int  #: the count the cores allow
    more_s: float  #: the model's time per step with ``target`` workers
    cpu_bound: bool  #: the fetch computes
    input_bound: bool  #: the loop waits for batches not yet built
    waiting: bool  #: the loop waits at all (after each worker's first batch)
    worth: bool  #: more workers would save at least WORTH of a step
    workers_busy: bool  #: the workers' pace is what the loop waits for
    workers_at_pace: bool  #: the workers' pace is close to the loop's (NEAR_PACE)
    saturated: bool  #: computing workers fill the cores
    main_bound: bool  #: the main process's own share bounds the step
    collate_heavy: bool

    @property
    def loop_s(self) -> float:
        return self.y + self.m

    @property
    def startup_share(self) -> float:
        tl = self.d.timeline
        return self.d.startup_s / tl.wall_s if tl.wall_s > 0 else 0.0

    @property
    def workers_pace(self) -> float:
        return self.n / max(self.workers, 1)

    @property
    def busy(self) -> str:
        """", of which other processes kept … busy" where they took cores from the run."""
        if self.cores >= self.limits.whole or self.d.others_busy is None:
            return ""
        return (f", of which other processes kept {self.d.others_busy:.1f} busy during the run (about "
                f"{self.cores} free)")

    @property
    def rule(self) -> str:
        return (f"a batch takes {ms(self.n)} to fetch on average (median {ms(self.d.fetch_median_s)}), the "
                f"loop {ms(self.y)} per step and {ms(self.m)} of its own per batch: x = ⌈n / (y + m)⌉ = "
                f"{self.needed}")

    @property
    def iterable(self) -> bool:
        return isinstance(self.loader.dataset, IterableDataset)

    @classmethod
    def of(cls, d: Any, loader: DataLoader, device: Any = None) -> Context:
        workers = loader.num_workers
        # without a step (only the no-step advice reads on), the loader's own pace stands in for y
        y = d.replay_step_s if d.replay_step_s is not None else d.steady_step_s
        n, m = d.fetch_mean_s, d.main_s
        if workers == 0 and d.receive_alone_s is not None:
            # With workers every batch also travels: the main process unpickles it from shared memory,
            # which a run without workers never did (measured alone here; more beside busy workers).
            m += d.receive_alone_s
        limits = cpu_limits()
        cores = d.free_cores(limits)
        needed = recommend_num_workers(n, y, main_s=m)
        cpu_bound = d.computes(limits)  # against the CPU each worker could get (a quota, busy cores)
        capacity = min(limits.cores, float(cores))
        share = d.cpu_share
        # How many workers the cores can take: a computing fetch, one per free core; a fetch that mostly
        # waits still computes for its CPU share of the time, and workers fetching at once want that
        # share of a core each: past ⌊free cores / share⌋ of them they wait for a core too.
        if cpu_bound:
            target = max(min(needed, cores), 1)
        else:
            fits = math.floor(capacity / share) if share else needed
            target = max(min(needed, fits), min(needed, workers + 1), 1)
        loop_s = y + m
        # Computing workers share the CPU a quota allows: under 1.5 CPUs two deliver 1.5 fetches' worth.
        more_s = max(n / (min(target, max(capacity, 1.0)) if cpu_bound else target), loop_s)
        workers_cpu = (share or 0.0) * n / d.steady_step_s if d.steady_step_s > 0 else 0.0
        saturated = cpu_bound and workers >= cores and workers_cpu >= BUSY_WORKERS * max(capacity, 1.0)
        # The main process's own share without workers competing for its core: when the cores are full,
        # m swells with waiting for one, and only the share measured alone says what is its own.
        receive = d.breakdown()["receive (unpickle in the main process)"]
        own_m = m if d.receive_alone_s is None else min(m, d.receive_alone_s + max(m - receive, 0.0))
        waiting = d.steady_wait_share >= INPUT_BOUND
        workers_pace = n / max(workers, 1)
        # It bounds the loop only where the workers could keep its pace: workers slower than y + m are
        # the bound, and a smaller m gains nothing.
        main_bound = (waiting and own_m >= 0.001 and own_m >= MAIN_SHARE * (y + own_m)
                      and workers_pace < y + own_m)
        return cls(d=d, loader=loader, device=device, workers=workers, n=n, y=y, m=m, own_m=own_m,
                   limits=limits, cores=cores, capacity=capacity, needed=needed, target=target,
                   more_s=more_s, cpu_bound=cpu_bound, input_bound=d.steady_data_wait_share >= INPUT_BOUND,
                   waiting=waiting, worth=more_s <= (1 - WORTH) * d.steady_step_s,
                   workers_busy=workers_pace >= BUSY_WORKERS * loop_s,
                   workers_at_pace=workers_pace >= NEAR_PACE * loop_s, saturated=saturated,
                   main_bound=main_bound,
                   collate_heavy=d.collate_s is not None and d.collate_s >= COLLATE_SHARE * n)
