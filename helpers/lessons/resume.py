"""Notebook 15 · resume mid-epoch: after a real SIGKILL the StatefulDataLoader trains on every
sample exactly once; a restarted DataLoader repeats the checkpointed batches; a naive
skip-by-count is exact only in order; a state snapshot every step costs time per step."""

from __future__ import annotations

from ..classroom.checks import Check, clearly_above, holds


def checks(
    results: dict, shuffled: dict, *, batch_size: int, per_step: dict[int, float], noise_s: float
) -> list[Check]:
    """``results``: :class:`helpers.ResumeResult` per kind ("stateful", "restart", "skip") in
    order; ``per_step``: median seconds per step per ``snapshot_every_n_steps``; ``noise_s``: the
    timing noise measured in those runs.

    Not checks, printed by the notebook: that a restarted DataLoader repeats the checkpointed batches
    and that skipping them by count is exact in order (a seeded sampler's order and ``in_order=True``
    delivery, as documented; ``batch_size`` is their arithmetic), and what skipping by count does out
    of order (``shuffled``: the lab plants a cold batch to make one overtake another)."""
    out: list[Check] = []
    stateful = results["stateful"]
    out.append(
        holds(
            "after a real SIGKILL, the StatefulDataLoader trains on every sample of the epoch exactly once",
            stateful.killed_by == -9 and stateful.exact,
            stateful.describe(),
            id="15.stateful.every_sample_once",
        )
    )
    few, many = min(per_step), max(per_step)
    out.append(
        clearly_above(
            f"a worker-state snapshot every step costs time per step (vs every {many})",
            per_step[few],
            per_step[many],
            noise=noise_s,
            what=f"median time per step, snapshot every {few} vs every {many}",
            id="15.snapshot.costs_time_per_step",
        )
    )
    return out
