"""Notebook 06 · pinned memory: what the DataLoader pins, what pinned copies buy on a GPU, and the
pinned-memory budget."""

from __future__ import annotations

from typing import Any

from ..classroom.checks import Check, at_least, at_most, clearly_above, premise_failed

NEEDS_GPU = "needs a CUDA GPU (torch.cuda.is_available() is False here)"


def checks(has_cuda: bool, *, bandwidth: Any = None, copy_ms: dict[bool, float] | None = None,
           budget_bytes: int | None = None, pinned_taken_bytes: int | None = None) -> list[Check]:
    """Every claim is measured on a GPU only. (On a CPU the notebook prints what ``pin_memory=True``
    did: no batch pinned, and PyTorch's warning. That is PyTorch's guarantee, not a lesson check.)
    ``pinned_taken_bytes``: what the ``pin_memory=True`` run took from the caching host allocator
    (:class:`helpers.transfer.PinnedMemoryTaken`: the growth over the run, its cache emptied
    first — not the allocator's peak, which also counts blocks cached before the run)."""
    out: list[Check] = []
    claims = ("large copies run faster from pinned memory",
              "non_blocking=True from pinned memory returns before the copy ends",
              "the loop's copy of a batch is shorter from pinned memory",
              "the pinned memory the pin_memory=True run took stays within the budget (power-of-two blocks)")
    if not has_cuda:
        return out + [premise_failed(claim, "", NEEDS_GPU) for claim in claims]
    largest = bandwidth[-1]
    out.append(at_least(claims[0], largest.pinned_gbps / largest.pageable_gbps, 1.2, unit="×",
                        what=f"pinned ÷ pageable at {largest.nbytes / 2**20:.0f} MiB"))
    copy_s = largest.nbytes / (largest.pinned_gbps * 1e9)
    out.append(at_most(claims[1], largest.pinned_nonblocking_call_s / copy_s, 0.5, unit="×",
                       what="the call ÷ the copy it started"))
    out.append(clearly_above(claims[2], copy_ms[False] / 1e3, copy_ms[True] / 1e3, noise=0.0,
                             what="pageable vs pinned"))
    if pinned_taken_bytes is None or budget_bytes is None:
        out.append(premise_failed(claims[3], "", "this torch reports no host-allocator statistics"))
    else:
        out.append(at_most(claims[3], pinned_taken_bytes / 2**20, budget_bytes / 2**20, unit=" MiB",
                           what="the budget"))
    return out
