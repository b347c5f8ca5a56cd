"""Notebook 05 · worker start-up: start methods, the forkserver's preload, persistent workers,
the stale-state pitfall and the memory idle workers keep."""

from __future__ import annotations

import statistics

from ..classroom.checks import (
    Check,
    Expected,
    at_least,
    at_most,
    clearly_above,
    near,
    premise_failed,
    timing_noise_s,
)
from ..data.workers import ProcessMemory
from ..timing.analysis import epoch_first_batch_gaps, shutdown_gaps
from ..timing.theory import measured_main_s
from ..timing.timeline import Timeline


def startup_by_epoch(tl: Timeline) -> list[float]:
    """Per epoch: from ``iter(loader)`` until the last worker started in it was ready (s)."""
    return [tl.worker_startup_s(e.epoch) for e in tl.epochs]


def mean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else float("nan")


def epoch_table(runs: dict[tuple[str, bool], Timeline]) -> list[list[str]]:
    """Rows for the persistence table: method, persistent, first epoch, later epochs, shutdown, wall."""
    return [
        [
            m,
            "yes" if p else "no",
            f"{tl.summary()['first_batch_s']:.2f}",
            " · ".join(f"{g:.2f}" for g in epoch_first_batch_gaps(tl)),
            f"{mean(shutdown_gaps(tl)):.3f}",
            f"{tl.wall_s:.2f}",
        ]
        for (m, p), tl in runs.items()
    ]


def checks(
    children: dict[str, Timeline],
    runs: dict[tuple[str, bool], Timeline],
    batch_load_s: float,
    stale: dict[str, list[list[int]]],
    memory: dict[str, list[ProcessMemory]],
) -> list[Check | Expected]:
    """``children``: start-up per start method in fresh processes ("forkserver + preload" too);
    ``runs``: (method, persistent) -> several epochs; ``stale``: epochs the workers saw, per way of
    setting the epoch; ``memory``: idle workers per start method.

    Not checks: that persistent workers spare every later epoch the start-up (PyTorch keeps them
    alive: an :class:`Expected` row shows the seconds saved beside the start-up measured), and the
    stale-state pitfall and its fixes (``stale``: a live worker's copy of the dataset is its own;
    the sampler runs in the main process; a shared value is shared memory — the notebook's table
    shows the epochs each way saw)."""
    out: list[Check | Expected] = []
    first = {name: startup_by_epoch(tl)[0] for name, tl in children.items()}
    if "fork" in first:
        for method in ("spawn", "forkserver"):
            if method in first:
                out.append(
                    at_least(
                        f"{method} workers take far longer to start than fork workers (they import "
                        "torch themselves)",
                        first[method] / max(first["fork"], 1e-3),
                        5.0,
                        unit="×",
                        what=f"{first[method]:.2f} s vs {first['fork']:.2f} s",
                        id="05.start.slower_than_fork",
                    )
                )
    if {"forkserver", "forkserver + preload"} <= set(children):
        plain, preloaded = (
            startup_by_epoch(children["forkserver"]),
            startup_by_epoch(children["forkserver + preload"]),
        )
        out.append(
            at_least(
                "forkserver without preload: every new set of workers imports torch again "
                "(a later start-up at least half the first's)",
                plain[-1] / plain[0],
                0.5,
                unit="×",
                what="a later epoch's start-up ÷ the first's",
                id="05.forkserver.imports_torch_again",
            )
        )
        claim = ("forkserver with set_forkserver_preload(['torch', 'helpers']): later workers start at fork "
                 f"speed (within twice fork's start-up + {FORK_SPEED_SLACK_S * 1e3:.0f} ms)")
        if "fork" not in children:
            out.append(premise_failed(claim, f"{preloaded[-1]:.3f} s",
                                      "fork is not available on this platform: nothing to compare with",
                                      id="05.forkserver.preload_at_fork_speed"))
        else:
            forked = startup_by_epoch(children["fork"])[-1]
            out.append(
                at_most(claim, preloaded[-1], 2 * forked + FORK_SPEED_SLACK_S,
                        what=f"a later epoch's start-up: fork {forked * 1e3:.0f} ms; without preload "
                             f"{plain[-1]:.2f} s", id="05.forkserver.preload_at_fork_speed")
            )
    noise = timing_noise_s([b.step_s for tl in runs.values() for b in tl.batches])
    for (method, persistent), tl in runs.items():
        if persistent:
            continue
        kept = runs.get((method, True))
        if kept is None:
            continue
        saved = mean(epoch_first_batch_gaps(tl)) - mean(epoch_first_batch_gaps(kept))
        out.append(Expected(f"{method}: what persistent workers save each later epoch's first batch: their "
                            "start-up", saved, mean(startup_by_epoch(tl)[1:]),
                            note="a later epoch's first batch without vs with persistent workers"))
        # one batch load, plus what this run measured around it: iter()'s round trip to each kept
        # worker (_reset sends _ResumeIteration and waits for every worker's reply) and the
        # batch's hand-over to the loop (m, notebook 02)
        resume_s = mean([e.startup_s for e in kept.epochs[1:]] or [0.0])
        out.append(
            near(
                f"{method}: even with persistent workers a later epoch's first batch costs one batch load "
                "(±50 %, plus the noise)",
                mean(epoch_first_batch_gaps(kept)),
                batch_load_s + resume_s + measured_main_s(kept),
                rel=0.5,
                noise_s=noise,
                id="05.persistent.first_batch_costs_a_load",
            )
        )
        out.append(
            clearly_above(
                f"{method}: without persistence, the epoch's last next() shuts the workers down",
                mean(shutdown_gaps(tl)),
                mean(shutdown_gaps(kept)),
                noise=noise,
                what="the last next(), without vs with",
                id="05.shutdown.last_next_joins_workers",
            )
        )
    claims = (
        "an idle forked worker's own memory (USS) is a small part of its RSS",
        "an idle spawned worker holds far more memory of its own than a forked one (5× or more)",
    )
    if "fork" not in memory:
        why = "fork is not available on this platform"
        return out + [premise_failed(claims[0], "", why, id="05.memory.forked_worker_shares"),
                      premise_failed(claims[1], "", why, id="05.memory.spawned_worker_holds_more")]
    fork_uss = mean(w.uss for w in memory["fork"])
    out.append(
        at_most(claims[0], mean(w.uss / w.rss for w in memory["fork"]), 0.5, unit="%", what="USS ÷ RSS",
                id="05.memory.forked_worker_shares")
    )
    if "spawn" not in memory:
        out.append(premise_failed(claims[1], "", "spawn is not available on this platform",
                                  id="05.memory.spawned_worker_holds_more"))
    else:
        spawn_uss = mean(w.uss for w in memory["spawn"])
        out.append(
            at_least(
                claims[1],
                spawn_uss / fork_uss,
                5.0,
                unit="×",
                what=f"{spawn_uss / 2**20:.0f} MiB vs {fork_uss / 2**20:.0f} MiB of USS",
                id="05.memory.spawned_worker_holds_more",
            )
        )
    return out


#: "At fork speed" allows a preloaded forkserver's later start-up this much beyond twice fork's: both
#: are tens of milliseconds (2 cores: fork 58–70 ms, forkserver with preload 51–53 ms), and a
#: forkserver's start adds a round trip to the server.
FORK_SPEED_SLACK_S = 0.02
