"""Notebook 15 · resume mid-epoch: after a real SIGKILL the StatefulDataLoader trains on every
sample exactly once; a restarted DataLoader repeats the checkpointed batches; a naive
skip-by-count is exact only in order; a state snapshot every step costs time per step."""

from __future__ import annotations

from typing import Any

from ..classroom.checks import Check, clearly_above, holds, premise_failed


def checks(
    results: dict, shuffled: dict, *, batch_size: int, per_step: dict[int, float], noise_s: float
) -> list[Check]:
    """``results``: :class:`helpers.ResumeResult` per kind ("stateful", "restart", "skip") in
    order; ``shuffled``: the same with ``in_order=False`` (key "skip, in_order=False"; the
    batch before the checkpoint cold in the first run);
    ``per_step``: median seconds per step per ``snapshot_every_n_steps``; ``noise_s``: the
    timing noise measured in those runs."""
    out: list[Check] = []
    stateful = results["stateful"]
    out.append(
        holds(
            "after a real SIGKILL, the StatefulDataLoader trains on every sample of the epoch exactly once",
            stateful.killed_by == -9 and stateful.exact,
            stateful.describe(),
        )
    )
    restart = results["restart"]
    expected = restart.checkpoint_step * batch_size
    out.append(
        holds(
            "a restarted DataLoader trains again on exactly the checkpointed batches "
            f"(checkpoint step × batch = {expected} repeats, none missing)",
            restart.repeated == expected and not restart.missing,
            restart.describe(),
        )
    )
    skip = results["skip"]
    out.append(
        holds(
            "in order with the same seed, skipping the checkpointed batches by count is exact",
            skip.exact,
            skip.describe(),
        )
    )
    skip = shuffled["skip, in_order=False"]
    claim = ("out of order, skipping by count trains the batches that overtook the checkpoint twice "
             "and drops the ones they overtook")
    if skip.exact:
        out.append(premise_failed(claim, skip.describe(), "no batch overtook another at the checkpoint this "
                                  "time (the cold batch loaded in time)"))
    else:
        out.append(holds(claim, *_overtaken(skip, batch_size)))
    few, many = min(per_step), max(per_step)
    out.append(
        clearly_above(
            f"a worker-state snapshot every step costs time per step (vs every {many})",
            per_step[few],
            per_step[many],
            noise=noise_s,
            what=f"median time per step, snapshot every {few} vs every {many}",
        )
    )
    return out


def _overtaken(skip: Any, batch_size: int) -> tuple[bool, str]:
    """Whether a sequential epoch's skip-by-count went wrong as overtaking makes it: every sample
    trained twice is in a whole batch at or after the checkpoint (it overtook one before it and was
    counted), every sample never trained in a whole batch before it (overtaken, then skipped). The
    cold batch planted before the checkpoint makes one such pair; a slow moment of the machine can
    make more (one run here: 16 samples each way, in batches of 8)."""
    checkpoint = skip.checkpoint_step
    twice = sorted({i // batch_size for i, c in skip.counts.items() if c > 1})
    never = sorted({i // batch_size for i in skip.missing})
    whole = (all(skip.counts[i] == 2 for b in twice for i in range(b * batch_size, (b + 1) * batch_size))
             and len(skip.missing) == len(never) * batch_size)
    ok = (whole and len(twice) == len(never) >= 1 and all(b >= checkpoint for b in twice)
          and all(b < checkpoint for b in never))
    listed = [", ".join(map(str, batches)) or "none" for batches in (twice, never)]
    return ok, (f"{skip.describe()}; trained twice: batch {listed[0]}, never: batch {listed[1]} "
                f"(the checkpoint counted {checkpoint} batches)")
