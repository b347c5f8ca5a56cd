"""Notebook 17 · many processes: DistributedSampler's shards (padding, dropping, set_epoch),
a straggler rank sets every rank's pace, more workers on it restore the pace, and a rank
killed for real is reported by torchrun with nothing left behind."""

from __future__ import annotations

from ..checks import Check, at_least, holds, premise_failed


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
) -> list[Check]:
    """Each argument is a :class:`helpers.DistRun`: ``with_epoch`` (set_epoch, drop_last=False, 2
    epochs), ``without_epoch`` (no set_epoch, drop_last=True, 2 epochs), ``straggler`` (one
    rank's data slow), ``helped`` (the same with more workers on that rank), ``killed`` (rank
    ``killed_rank`` killed with SIGKILL); ``n``: the dataset's size; ``left_behind``: child
    processes of the notebook after all."""
    out: list[Check] = []
    runs = {"set_epoch": with_epoch, "no set_epoch": without_epoch, "straggler": straggler, "helped": helped}
    broken = [name for name, run in runs.items() if not run.ok]
    if broken:
        why = "; ".join(f"{name}: return code {runs[name].returncode}" for name in broken)
        return [premise_failed("the torchrun launches completed", "", why)]
    world = with_epoch.world
    out.append(
        holds(
            "without set_epoch, every epoch draws the same order on every rank",
            without_epoch.same_order_each_epoch(),
            f"same order: {without_epoch.same_order_each_epoch()}",
        )
    )
    out.append(
        holds(
            "with set_epoch, the order changes between epochs",
            not with_epoch.same_order_each_epoch(),
            f"same order: {with_epoch.same_order_each_epoch()}",
        )
    )
    pad = world * -(-n // world) - n
    out.append(
        holds(
            f"drop_last=False pads every epoch by repeating samples: {world} × ⌈{n}/{world}⌉ − {n} = {pad}",
            with_epoch.repeated(0) == pad and set(with_epoch.epoch_ids(0)) == set(range(n)),
            f"{with_epoch.repeated(0)} repeated, {n - len(set(with_epoch.epoch_ids(0)))} missing",
        )
    )
    dropped = n % world
    seen = set(without_epoch.epoch_ids(0))
    out.append(
        holds(
            f"drop_last=True drops {n} mod {world} = {dropped} samples and repeats none",
            without_epoch.repeated(0) == 0 and len(seen) == n - dropped,
            f"{without_epoch.repeated(0)} repeated, {n - len(seen)} dropped",
        )
    )
    fetch = straggler.median_fetch()
    slow_rank = max(fetch, key=fetch.get)
    rates = straggler.steps_per_s()
    # one worker on the straggler's rank delivers a batch per fetch: that is every rank's pace
    data_rate = 1 / fetch[slow_rank]
    fast = {r: v for r, v in rates.items() if r != slow_rank}
    out.append(
        holds(
            "the slowest rank sets the pace: the other ranks step at the straggler's data rate "
            "(1 / its fetch per batch, within 25 %), not at their own",
            all(0.75 * data_rate <= v <= 1.25 * data_rate for v in fast.values())
            and all(v < 0.75 / fetch[r] for r, v in fast.items()),
            f"straggler's data rate {data_rate:.1f}/s; "
            + ", ".join(
                f"rank {r} {v:.1f} steps/s (its own data: {1 / fetch[r]:.0f}/s)" for r, v in fast.items()
            ),
        )
    )
    waits = straggler.median_sync_wait()
    others = [w for r, w in waits.items() if r != slow_rank]
    out.append(
        holds(
            "the other ranks wait for it in all_reduce (each at least 3× the straggler's own wait and 5 ms)",
            all(w >= max(3 * waits[slow_rank], 0.005) for w in others),
            ", ".join(f"rank {r} {w * 1e3:.1f} ms" for r, w in waits.items()),
        )
    )
    before, after = min(rates.values()), min(helped.steps_per_s().values())
    out.append(
        at_least(
            "more workers on the straggler's rank restore the pace (at least 2× the steps/s)",
            after / before,
            2.0,
            unit="×",
            what=f"{before:.1f} → {after:.1f} steps/s",
        )
    )
    cause = killed.root_cause()
    reported = cause.get("rank", "").startswith(str(killed_rank)) and cause.get("exitcode", "").startswith(
        "-9"
    )
    leftovers = sorted(set(left_behind) | set(killed.left_behind))
    out.append(
        holds(
            f"a rank killed with SIGKILL fails the launch, torchrun names it (rank {killed_rank}, "
            "exit code -9) as the root cause, and nothing is left running",
            killed.returncode != 0 and reported and not leftovers,
            f"torchrun returned {killed.returncode}; root cause: rank {cause.get('rank', '?')}, "
            f"exit code {cause.get('exitcode', '?')}; processes left: {leftovers or 'none'}",
        )
    )
    return out
