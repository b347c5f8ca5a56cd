"""Notebook 10 · shared memory: what a run holds in /dev/shm, the two sharing strategies, and real
"Too many open files" and shm-exhaustion failures in child processes."""

from __future__ import annotations

from ..classroom.checks import Check, at_most, holds, premise_failed
from ..data.failures import DemoResult

NO_SHM = "this system has no /dev/shm (macOS and Windows share memory differently)"


def checks(
    has_shm: bool,
    peak_extra_bytes: int,
    batch_bytes: int,
    budget_bytes: int,
    strategies: dict[str, DemoResult],
    fd_kept: DemoResult | None,
    fd_cloned: DemoResult | None,
    shm_fail: DemoResult | None,
    shm_room: DemoResult | None,
    left_behind: dict[str, list],
) -> list[Check]:
    """What the notebook measured; demos are None where the machine cannot run them.

    Not checks, shown by the notebook: that batches cross through ``/dev/shm`` (the monitor seeing one
    batch's worth is this check's premise), that both sharing strategies allocate there
    (``strategies``), and the fd-limit demos (``fd_kept``, ``fd_cloned``): PyTorch documents one file
    descriptor per shared storage under ``file_descriptor``, and a clone is private memory."""
    MiB = 2**20
    claims = (
        "a run's /dev/shm use stays within num_workers × prefetch_factor + 2 batches",
        "the same loader fails in a /dev/shm smaller than the batches it holds at once...",
        "...and runs in one larger than its budget",
    )
    if not has_shm:
        out = [premise_failed(claims[0], "", NO_SHM, id="10.shm.within_budget"),
               premise_failed(claims[1], "", NO_SHM, id="10.shm.fails_when_too_small"),
               premise_failed(claims[2], "", NO_SHM, id="10.shm.runs_with_room")]
    else:
        if peak_extra_bytes < batch_bytes:
            # a monitor that saw nothing would pass "within the budget" at 0 MiB
            out = [premise_failed(claims[0], f"{peak_extra_bytes / MiB:.1f} MiB at the peak",
                                  f"less than one batch ({batch_bytes / MiB:.1f} MiB) seen in /dev/shm: the "
                                  "monitor did not see the batches cross", id="10.shm.within_budget")]
        else:
            out = [at_most(claims[0], peak_extra_bytes / MiB, budget_bytes / MiB, unit=" MiB",
                           what="the budget", id="10.shm.within_budget")]
        if shm_fail is None:
            reason = ("this machine does not allow a private /dev/shm (user namespaces), so it cannot be "
                      "filled safely")
            out += [premise_failed(claims[1], "", reason, id="10.shm.fails_when_too_small"),
                    premise_failed(claims[2], "", reason, id="10.shm.runs_with_room")]
        else:
            # The budget decides only if the loader really holds more than the small /dev/shm: the
            # larger run measures how much it held.
            small = shm_fail.result.get("shm_total_bytes")
            held = shm_room.result.get("peak_extra_bytes", 0)
            measured = (f"exit status {shm_fail.returncode} in {(small or 0) / MiB:.0f} MiB; the larger run "
                        f"held up to {held / MiB:.1f} MiB")
            if small is None or held <= small:
                reason = "the loader never held more than the small /dev/shm: its workers did not run ahead"
                out.append(premise_failed(claims[1], measured, reason, id="10.shm.fails_when_too_small"))
            else:
                out.append(holds(claims[1], shm_fail.returncode != 0 and "No space left" in shm_fail.output,
                                 measured, id="10.shm.fails_when_too_small"))
            out.append(
                holds(
                    claims[2],
                    shm_room.returncode == 0,
                    f"exit status {shm_room.returncode}, {shm_room.result.get('batches')} batches in "
                    f"{shm_room.result.get('shm_total_bytes', 0) / MiB:.0f} MiB",
                    id="10.shm.runs_with_room",
                )
            )
    out.append(
        holds(
            "nothing is left behind: no new torch_* segment, no child process",
            not left_behind["segments"] and not left_behind["children"],
            str(left_behind),
            id="10.cleanup.nothing_left_behind",
        )
    )
    return out
