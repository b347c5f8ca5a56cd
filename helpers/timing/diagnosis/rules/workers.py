"""How many workers, and what keeps them from delivering: the sizing rule capped by the cores
(notebooks 02, 04, 14), a ``collate_fn`` that is most of a fetch (08), workers that fill the cores,
and workers that take turns on something they share."""

from __future__ import annotations

from torch.utils.data import DataLoader, IterableDataset

from ..advice import Recommendation, ms
from ..thresholds import LOCK_SHARE, WORTH
from .context import Context


def shard_caveat(loader: DataLoader, workers: int) -> str:
    """For an IterableDataset, more than one worker repeats the stream unless it shards itself."""
    if workers < 2 or not isinstance(loader.dataset, IterableDataset):
        return ""
    return ("; your IterableDataset must shard itself by torch.utils.data.get_worker_info() (id, "
            "num_workers), or each worker yields the whole stream: every sample num_workers times")


def collate(c: Context) -> Recommendation | None:
    """A ``collate_fn`` that is most of the fetch, where the workers are what the loop waits for or
    their computing fills the cores (the main process then waits for a core: its m swells)."""
    fills = c.waiting and c.saturated and not c.main_bound
    if not c.collate_heavy or not ((c.input_bound and c.workers_busy) or fills):
        return None
    d = c.d
    starved = (f"; the workers' computing fills the {c.limits.describe()}{c.busy} and the main process, "
               f"short of a core, takes {ms(c.m)} to take each batch in ({ms(c.own_m)} alone)"
               if not (c.input_bound and c.workers_busy) else "")
    return Recommendation(
        "collate_fn", "a cheaper collate_fn (or build batches in __getitems__: notebook 08)",
        f"collate_fn takes {ms(d.collate_s)} of the {ms(c.n)} a worker spends per batch" + starved,
        None, max((c.n - d.collate_s) / max(c.workers, 1), c.y + c.own_m if starved else c.loop_s))


def serialised(c: Context) -> Recommendation | None:
    """Workers that wait for a lock they share take turns: more of them only queue at it. The profile
    measures the wait (the time in a lock's ``acquire``, in the workers, beside each other)."""
    p = c.d.profile
    if not c.input_bound or c.workers < 2 or p is None or p.lock_share < LOCK_SHARE:
        return None
    who = p.locked_in or (p.culprit if p.culprit is not None else None)
    where = f" in {who}" if who is not None else ""
    after = c.n * (1 - p.lock_share)
    predicted = max(after / max(min(c.workers, c.cores), 1), c.loop_s)
    return Recommendation(
        "serialised", f"remove the lock the workers share{where} (each worker can open and read on its own; "
        "a lock made before the workers start is one lock for all of them): they take turns on it, and "
        "more workers would only queue",
        f"in the profile, {p.lock_share:.0%} of a sample's time is spent waiting in {p.lock_call}; the "
        f"fetch used the CPU {c.d.cpu_share or 0:.0%} of its time; the sizing rule would ask for "
        f"{c.needed} workers", None, predicted, function=str(who) if who is not None else None,
        call=p.lock_call, cause="serialised")


def fills_the_cores(c: Context) -> Recommendation | None:
    """Computing workers fill the cores and the loop waits: more workers cannot help; the sample
    must get cheaper (the profile's advice, when there is one, says where)."""
    if not (c.waiting and c.saturated and not c.main_bound) or c.collate_heavy:
        return None
    d = c.d
    return Recommendation(
        "sample_cost", "make each sample cheaper to build: more workers cannot help here"
        + (" (the profile's advice below names where its time goes)" if d.profile is not None else ""),
        f"the fetch computes (the CPU {d.cpu_share:.0%} of its time) and the {c.workers} workers "
        f"already fill the {c.limits.describe()}{c.busy}: the main process, short of a core, takes "
        f"{ms(c.m)} to take each batch in ({ms(c.own_m)} alone); the sizing rule would ask for "
        f"{c.needed}")


def num_workers(c: Context) -> Recommendation | None:
    """Fewer workers than the sizing rule asks for, and the loop waits for batches not yet built:
    the count the cores allow, when the model says it saves at least ``WORTH`` of a step."""
    if not (c.input_bound and c.workers < c.needed and not c.main_bound):
        return None
    d = c.d
    if not c.worth:
        return Recommendation(
            "none", "the loader nearly keeps up: more workers would gain little; make the step faster",
            f"{c.rule}, which predicts {ms(c.more_s)} per step against {ms(d.steady_step_s)} now: under "
            f"{WORTH:.0%} saved")
    share, target = d.cpu_share, c.target
    if not c.cpu_bound:
        cpu = "" if share is None else f" (the fetch used the CPU {share:.0%} of its time)"
        if target < c.needed:
            beyond = (f"; the fetch used the CPU {share:.0%} of its time: {target} workers fetching at "
                      f"once keep about {target * share:.1f} of the {c.capacity:g} free cores computing, "
                      f"and more would wait for a core; past {target} make each sample cheaper")
        elif c.needed > c.cores:
            beyond = (f"; more workers than the {c.capacity:g} effective cores is fine: the fetches wait "
                      "rather than compute" + cpu)
        else:
            beyond = cpu
        because = c.rule + beyond
    else:
        past = (f"; the rule asks for {c.needed}, but past the cores make each sample cheaper"
                if c.needed > c.cores else "")
        because = (f"{c.rule}; the fetch computes (the CPU {d.cpu_share:.0%} of its time), so workers "
                   f"beyond the {c.limits.describe()}{c.busy} add nothing{past}")
    return Recommendation("num_workers", f"num_workers={target} (now {c.workers})"
                          + shard_caveat(c.loader, target), because, {"num_workers": target}, c.more_s)
