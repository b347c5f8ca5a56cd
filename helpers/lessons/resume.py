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
    reordered = _resumed_out_of_order(skip, batch_size)
    if skip.exact:
        out.append(premise_failed(claim, skip.describe(), "no batch overtook another at the checkpoint this "
                                  "time (the cold batch loaded in time)"))
    elif reordered:
        out.append(premise_failed(claim, _overtaken(skip, batch_size)[1], reordered))
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


def _resumed_out_of_order(skip: Any, batch_size: int) -> str:
    """Why the check cannot judge the planted overtaking, or "": the resumed run, which skips by
    count whatever it delivers first, delivered its own first batches out of order (a worker
    stalled: inside a CPU quota, or on a busy machine). It then trains an unbroken run of batches
    to the epoch's end only if it skipped exactly the batches before that run (inside 1 CPU it can
    skip 0-7, 9 and 10, then train 8 and 11 onwards)."""
    batches = [skip.resumed[k] // batch_size for k in range(0, len(skip.resumed), batch_size)]
    if not batches or set(batches) == set(range(min(batches), max(batches) + 1)):
        return ""
    skipped = sorted(set(range(-(-skip.n // batch_size))) - set(batches))
    return (f"the resumed run delivered out of order too: it skipped batches {_spans(skipped)} as its "
            f"first {skip.checkpoint_step} and trained {_spans(sorted(batches))}: which batches repeat then "
            "depends on both runs' order, not on the planted cold batch alone")


def _spans(numbers: list[int]) -> str:
    """Sorted numbers as runs: [0, 1, 2, 3, 9, 10] -> "0-3, 9, 10"."""
    runs: list[list[int]] = []
    for x in numbers:
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


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
