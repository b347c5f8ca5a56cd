"""Notebook 17 · many processes: DistributedSampler's shards (padding, dropping, set_epoch),
a straggler rank sets every rank's pace, the sizing rule's workers on it (plus one for the
fetches' jitter) stop its waits for data, and a rank killed for real is reported by torchrun with
nothing left behind."""

from __future__ import annotations

from ..classroom.checks import Check, Expected, holds, premise_failed


def checks(
    with_epoch,
    without_epoch,
    straggler,
    helped,
    killed,
    *,
    n: int,
    left_behind: set[int],
    killed_rank: int = 1,
) -> list[Check | Expected]:
    """Each argument is a :class:`helpers.DistRun`: ``with_epoch`` (set_epoch, drop_last=False, 2
    epochs), ``without_epoch`` (no set_epoch, drop_last=True, 2 epochs), ``straggler`` (one
    rank's data slow), ``helped`` (the same with more workers on that rank), ``killed`` (rank
    ``killed_rank`` killed with SIGKILL); ``n``: the dataset's size; ``left_behind``: child
    processes of the notebook after all.

    One check: a rank killed for real is reported by torchrun, with nothing left behind. Not checks:
    DistributedSampler's order and shards (``with_epoch``, ``without_epoch``, ``n``: it seeds with
    seed + epoch and pads or drops by documented arithmetic; the notebook prints them), the straggler
    setting every rank's pace through a blocking all_reduce, and the sizing rule's workers on the
    straggler (the lab's sleeps): :class:`Expected` rows."""
    out: list[Check | Expected] = []
    runs = {"set_epoch": with_epoch, "no set_epoch": without_epoch, "straggler": straggler, "helped": helped}
    broken = [name for name, run in runs.items() if not run.ok]
    if broken:
        why = "; ".join(f"{name}: return code {runs[name].returncode}" for name in broken)
        return [premise_failed("the torchrun launches completed", "", why)]
    fetch = straggler.median_fetch()
    slow_rank = max(fetch, key=fetch.get)
    rates = straggler.steps_per_s()
    # one worker on the straggler's rank delivers a batch per fetch: that is every rank's pace
    data_rate = 1 / fetch[slow_rank]
    fast = {r: v for r, v in rates.items() if r != slow_rank}
    waits = straggler.median_sync_wait()
    out.append(Expected(
        "the slowest rank sets the pace: the other ranks' steps per second, at the straggler's data rate "
        "(1 / its fetch per batch)", sum(fast.values()) / len(fast) if fast else float("nan"), data_rate,
        unit=" steps/s",
        note=", ".join(f"rank {r}: its own data {1 / fetch[r]:.0f}/s" for r in fast)
        + "; waiting in all_reduce: " + ", ".join(f"rank {r} {w * 1e3:.1f} ms" for r, w in waits.items())))
    out.append(_helped_row(straggler, helped, slow_rank))
    failures = killed.failures()
    cause = killed.root_cause()
    reported = failures.get(killed_rank, "").startswith("-9")
    leftovers = sorted(set(left_behind) | set(killed.left_behind))
    listed = ", ".join(f"rank {r} exit code {code.split()[0]}" for r, code in sorted(failures.items()))
    out.append(
        holds(
            f"a rank killed with SIGKILL fails the launch, torchrun reports it (rank {killed_rank}, "
            "exit code -9) among its failures, and nothing is left running",
            killed.returncode != 0 and reported and not leftovers,
            f"torchrun returned {killed.returncode}; failures: {listed or 'none'} (root cause named: rank "
            f"{(cause.get('rank') or '?').split()[0]}); processes left: {leftovers or 'none'}",
            id="17.torchrun.reports_a_killed_rank",
        )
    )
    return out


def _helped_row(straggler, helped, slow_rank: int) -> Expected:
    """The straggler's rank with the sizing rule's workers + 1: the rule's minimum leaves the data
    barely faster than the loop (⌈4.7⌉ = 5 workers: 7 % to spare), where the fetches' jitter shows;
    one more is the headroom notebook 03 argues for. Whether every rank then also reaches the pace it
    had without a straggler depends on the loops themselves, which the added workers slow on 2 cores
    (10.4 → ~13 ms per step measured here)."""
    import math
    import statistics

    from ..timing.theory import recommend_num_workers

    fetch_s, loop_s = straggler.median_fetch()[slow_rank], straggler.loop_s()[slow_rank]
    needed = recommend_num_workers(fetch_s, loop_s) + 1 if math.isfinite(loop_s) else None
    given = helped.workers.get(slow_rank, 0)

    def waiting(run) -> tuple[float, float]:
        rank = next(r for r in run.ranks if r.rank == slow_rank)
        wait_s = statistics.median(b.wait_s for b in rank.timeline.batches[1:])
        return wait_s, 1 / run.steps_per_s()[slow_rank]

    (wait_before, step_before), (wait_after, step_after) = waiting(straggler), waiting(helped)
    note = (f"rank {slow_rank} waited {wait_before * 1e3:.1f} of {step_before * 1e3:.1f} ms per step, with "
            f"{given} workers {wait_after * 1e3:.1f} of {step_after * 1e3:.1f} ms; its fetch "
            f"{fetch_s * 1e3:.0f} ms, the loop's own {loop_s * 1e3:.1f} ms per step: the rule + 1 = {needed} "
            "workers")
    helped_fetch_s = helped.median_fetch()[slow_rank]
    if given / helped_fetch_s < 1 / loop_s:
        note += (f"; with {given} workers the fetches took {helped_fetch_s * 1e3:.0f} ms: they deliver "
                 f"{given / helped_fetch_s:.0f} batches/s, below the loop's {1 / loop_s:.0f}")
    return Expected("with the sizing rule's workers + 1 on the straggler's rank, its loop no longer waits "
                    "for data: the share of its time per step spent waiting (median)",
                    wait_after / step_after, 0.0, unit="%", note=note)
