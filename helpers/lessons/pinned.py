"""Notebook 06 · pinned memory: what the DataLoader pins, what pinned copies buy on a GPU, and the
pinned-memory budget."""

from __future__ import annotations

from typing import Any

from ..classroom.checks import Check, at_least, at_most, premise_failed

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
              "the loop's copy of a batch is at least 1.2× shorter from pinned memory",
              "the pinned memory the pin_memory=True run took stays within the budget (power-of-two blocks)")
    if not has_cuda:
        return [premise_failed(claims[0], "", NEEDS_GPU, id="06.gpu.pinned_copies_faster"),
                premise_failed(claims[1], "", NEEDS_GPU, id="06.gpu.nonblocking_returns_early"),
                premise_failed(claims[2], "", NEEDS_GPU, id="06.gpu.loop_copy_shorter"),
                premise_failed(claims[3], "", NEEDS_GPU, id="06.gpu.pinned_within_budget")]
    largest = bandwidth[-1]
    out.append(at_least(claims[0], largest.pinned_gbps / largest.pageable_gbps, 1.2, unit="×",
                        what=f"pinned ÷ pageable at {largest.nbytes / 2**20:.0f} MiB",
                        id="06.gpu.pinned_copies_faster"))
    copy_s = largest.nbytes / (largest.pinned_gbps * 1e9)
    out.append(at_most(claims[1], largest.pinned_nonblocking_call_s / copy_s, 0.5, unit="×",
                       what="the call ÷ the copy it started", id="06.gpu.nonblocking_returns_early"))
    # A ratio, not a difference: a quick-size batch (8 images, 4.6 MiB) copies in about a millisecond
    # from pageable memory, so a difference would sit within the 2 ms timer floor.
    out.append(at_least(claims[2], copy_ms[False] / copy_ms[True], 1.2, unit="×",
                        what=f"pageable {copy_ms[False]:.2f} ms ÷ pinned {copy_ms[True]:.2f} ms (means)",
                        id="06.gpu.loop_copy_shorter"))
    if pinned_taken_bytes is None or budget_bytes is None:
        out.append(premise_failed(claims[3], "", "this torch reports no host-allocator statistics",
                                  id="06.gpu.pinned_within_budget"))
    else:
        out.append(at_most(claims[3], pinned_taken_bytes / 2**20, budget_bytes / 2**20, unit=" MiB",
                           what="the budget", id="06.gpu.pinned_within_budget"))
    return out
