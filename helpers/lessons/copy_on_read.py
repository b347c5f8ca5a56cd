"""Notebook 12 · copy-on-read: a list of Python objects is copied into every forked worker
as it reads it; arrays are not; spawn sends every storage but a tensor by value; and what
``persistent_workers`` does to the copied memory."""

from __future__ import annotations

from ..classroom.checks import Check, at_least, at_most, premise_failed
from ..data.copy_on_read.memory import EpochWorkers, MemoryRun, extra_uss, noise_margin_bytes
from ..data.copy_on_read.paths import MiB

NO_FORK = "fork is not available on this platform (macOS and Windows start workers with spawn: section 3)"
ARRAYS = ("numpy bytes", "buffer + offsets", "arrow", "tensor")


def checks(
    fork_runs: dict[str, MemoryRun] | None,
    sent: dict[str, int],
    encoded: int,
    persistent: EpochWorkers | None,
    fresh: EpochWorkers | None,
    spawned: tuple[MemoryRun, MemoryRun] | None = None,
) -> list[Check]:
    """``fork_runs``: one :class:`MemoryRun` per storage under fork (with ``"none"``, the
    no-data reference), None where fork does not exist.

    Not checks, shown by the notebook: what spawn and forkserver send each worker (``sent``, against
    ``encoded``, the names' UTF-8 bytes: pickle sends a list and the arrays by value, a tensor as a
    handle, as PyTorch documents), what a spawned worker holds (``spawned``: its own unpickled copy),
    and the two-epoch runs (``persistent`` / ``fresh``: a persistent worker keeps the pages it
    copied, a new one copies them again by the mechanism checked here)."""
    out: list[Check] = []
    grow = ("forked workers reading a list of str each end up holding most of it "
            "(USS above a no-data worker's by at least half the list, every worker)")
    grow_obj = "an object-dtype NumPy array is copied like the list (same bound)"
    flat = [f"the {name} storage stays within noise of a worker that holds no data" for name in ARRAYS]

    def untested(why: str) -> list[Check]:
        return ([premise_failed(c, "", why, id="12.fork.list_is_copied") for c in (grow, grow_obj)]
                + [premise_failed(c, "", why, id="12.fork.arrays_stay_shared") for c in flat])

    if fork_runs is None:
        return untested(NO_FORK)
    reference = fork_runs["none"]
    list_bytes = fork_runs["list"].data_bytes
    margin = noise_margin_bytes(list_bytes, reference)
    need = 0.5 * list_bytes
    if need <= margin:
        spread = (max(reference.peak_uss) - min(reference.peak_uss)) / MiB
        return untested(f"half the list ({need / MiB:.1f} MiB) is within the noise margin "
                        f"({margin / MiB:.1f} MiB; the no-data workers' peaks differed by {spread:.1f} MiB): "
                        "use more names")
    for claim, storage in ((grow, "list"), (grow_obj, "object array")):
        out.append(at_least(claim, min(extra_uss(fork_runs[storage], reference)) / MiB, need / MiB,
                            unit=" MiB", what="half the list", id="12.fork.list_is_copied"))
    for claim, storage in zip(flat, ARRAYS, strict=True):
        out.append(at_most(claim, max(extra_uss(fork_runs[storage], reference)) / MiB, margin / MiB,
                           unit=" MiB", what="the noise margin", id="12.fork.arrays_stay_shared"))
    return out
