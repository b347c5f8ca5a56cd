"""Notebook 10 · shared memory: what a run holds in /dev/shm, the two sharing strategies, and real
"Too many open files" and shm-exhaustion failures in child processes."""

from __future__ import annotations

from ..classroom.checks import Check, at_least, at_most, holds, premise_failed
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
    """What the notebook measured; demos are None where the machine cannot run them."""
    MiB = 2**20
    claims = (
        "a run's /dev/shm use stays within num_workers × prefetch_factor + 2 batches",
        "batches cross from workers through /dev/shm (at least one batch's worth in use)",
        "both sharing strategies allocate in /dev/shm",
        "keeping shared batches under a low fd limit fails with PyTorch's real message",
        "keeping clones instead runs to the end",
        "the same loader fails in a /dev/shm smaller than the batches it holds at once...",
        "...and runs in one larger than its budget",
    )
    if not has_shm:
        out = [premise_failed(claim, "", NO_SHM) for claim in claims]
    else:
        out = [
            at_most(claims[0], peak_extra_bytes / MiB, budget_bytes / MiB, unit=" MiB", what="the budget"),
            at_least(claims[1], peak_extra_bytes / MiB, batch_bytes / MiB, unit=" MiB", what="one batch"),
            holds(
                claims[2],
                all(
                    r.returncode == 0
                    and r.result.get("peak_extra_bytes", 0) >= r.result.get("batch_bytes", 1)
                    for r in strategies.values()
                ),
                ", ".join(
                    f"{name}: {r.result.get('peak_extra_bytes', 0) / MiB:.1f} MiB"
                    for name, r in strategies.items()
                ),
            ),
            holds(
                claims[3],
                fd_kept.returncode != 0 and "Too many open files" in (fd_kept.error or ""),
                f"exit status {fd_kept.returncode}: {(fd_kept.error or '')[:80]}",
            ),
            holds(
                claims[4],
                fd_cloned.returncode == 0,
                f"exit status {fd_cloned.returncode}, {fd_cloned.result.get('batches_kept')} batches kept",
            ),
        ]
        if shm_fail is None:
            reason = ("this machine does not allow a private /dev/shm (user namespaces), so it cannot be "
                      "filled safely")
            out += [premise_failed(claims[5], "", reason), premise_failed(claims[6], "", reason)]
        else:
            # The budget decides only if the loader really holds more than the small /dev/shm: the
            # larger run measures how much it held.
            small = shm_fail.result.get("shm_total_bytes")
            held = shm_room.result.get("peak_extra_bytes", 0)
            measured = (f"exit status {shm_fail.returncode} in {(small or 0) / MiB:.0f} MiB; the larger run "
                        f"held up to {held / MiB:.1f} MiB")
            if small is None or held <= small:
                reason = "the loader never held more than the small /dev/shm: its workers did not run ahead"
                out.append(premise_failed(claims[5], measured, reason))
            else:
                out.append(holds(claims[5], shm_fail.returncode != 0 and "No space left" in shm_fail.output,
                                 measured))
            out.append(
                holds(
                    claims[6],
                    shm_room.returncode == 0,
                    f"exit status {shm_room.returncode}, {shm_room.result.get('batches')} batches in "
                    f"{shm_room.result.get('shm_total_bytes', 0) / MiB:.0f} MiB",
                )
            )
    out.append(
        holds(
            "nothing is left behind: no new torch_* segment, no child process",
            not left_behind["segments"] and not left_behind["children"],
            str(left_behind),
        )
    )
    return out
