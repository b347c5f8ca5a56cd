"""Notebook 05 · worker start-up: start methods, the forkserver's preload, persistent workers,
the stale-state pitfall and the memory idle workers keep."""

from __future__ import annotations

import statistics

from ..classroom.checks import (
    Check,
    at_least,
    at_most,
    clearly_above,
    exceeds,
    holds,
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
) -> list[Check]:
    """``children``: start-up per start method in fresh processes ("forkserver + preload" too);
    ``runs``: (method, persistent) -> several epochs; ``stale``: epochs the workers saw, per way of
    setting the epoch; ``memory``: idle workers per start method."""
    out: list[Check] = []
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
            )
        )
        out.append(
            at_most(
                "forkserver with set_forkserver_preload(['torch']): later workers start at fork speed",
                preloaded[-1] / plain[-1],
                0.2,
                unit="×",
                what="later epoch, preload ÷ no preload",
            )
        )
    noise = timing_noise_s([b.step_s for tl in runs.values() for b in tl.batches])
    for (method, persistent), tl in runs.items():
        if persistent:
            continue
        kept = runs.get((method, True))
        if kept is None:
            continue
        saved = mean(startup_by_epoch(tl)[1:])
        out.append(
            exceeds(
                f"{method}: persistent workers spare every later epoch its workers' start-up",
                mean(epoch_first_batch_gaps(tl)),
                mean(epoch_first_batch_gaps(kept)),
                gap=saved,
                noise=noise,
                what="a later epoch's first batch, without vs with",
            )
        )
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
            )
        )
        out.append(
            clearly_above(
                f"{method}: without persistence, the epoch's last next() shuts the workers down",
                mean(shutdown_gaps(tl)),
                mean(shutdown_gaps(kept)),
                noise=noise,
                what="the last next(), without vs with",
            )
        )
    expected = [[e] for e in range(len(stale["fix 1: sampler"]))]
    out.append(
        holds(
            "the pitfall is real: an attribute set between epochs never reaches persistent workers",
            stale["attribute, persistent"] == [[0]] * len(expected) and stale["attribute, fresh"] == expected,
            f"persistent: {stale['attribute, persistent']}, fresh each epoch: {stale['attribute, fresh']}",
        )
    )
    for fix in ("fix 1: sampler", "fix 2: shared value"):
        out.append(
            holds(f"{fix} reaches persistent workers every epoch", stale[fix] == expected, str(stale[fix]))
        )
    claims = (
        "an idle forked worker's own memory (USS) is a small part of its RSS",
        "an idle spawned worker holds far more memory of its own than a forked one (5× or more)",
    )
    if "fork" not in memory:
        return out + [premise_failed(claim, "", "fork is not available on this platform") for claim in claims]
    fork_uss = mean(w.uss for w in memory["fork"])
    out.append(
        at_most(claims[0], mean(w.uss / w.rss for w in memory["fork"]), 0.5, unit="%", what="USS ÷ RSS")
    )
    if "spawn" not in memory:
        out.append(premise_failed(claims[1], "", "spawn is not available on this platform"))
    else:
        spawn_uss = mean(w.uss for w in memory["spawn"])
        out.append(
            at_least(
                claims[1],
                spawn_uss / fork_uss,
                5.0,
                unit="×",
                what=f"{spawn_uss / 2**20:.0f} MiB vs {fork_uss / 2**20:.0f} MiB of USS",
            )
        )
    return out
