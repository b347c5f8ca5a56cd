"""Notebook 12 · copy-on-read: a list of Python objects is copied into every forked worker
as it reads it; arrays are not; spawn sends every storage but a tensor by value; and what
``persistent_workers`` does to the copied memory."""

from __future__ import annotations

import numpy as np

from ..classroom.checks import Check, at_least, at_most, holds, premise_failed
from ..data.copy_on_read.memory import EpochWorkers, MemoryRun, extra_private, extra_uss, noise_margin_bytes
from ..data.copy_on_read.paths import MiB

NO_FORK = "fork is not available on this platform (macOS and Windows start workers with spawn: section 3)"
ARRAYS = ("numpy bytes", "buffer + offsets", "arrow", "tensor")
BY_VALUE = ("list", "numpy bytes", "buffer + offsets", "arrow")


def checks(
    fork_runs: dict[str, MemoryRun] | None,
    sent: dict[str, int],
    encoded: int,
    persistent: EpochWorkers | None,
    fresh: EpochWorkers | None,
    spawned: tuple[MemoryRun, MemoryRun] | None = None,
) -> list[Check]:
    """``fork_runs``: one :class:`MemoryRun` per storage under fork (with ``"none"``, the
    no-data reference), None where fork does not exist; ``sent``: bytes sent to each worker
    under spawn, per storage; ``encoded``: the names' UTF-8 bytes; ``persistent`` / ``fresh``:
    two-epoch recordings of the list with and without ``persistent_workers`` (None without fork);
    ``spawned``: the list and the no-data runs under spawn."""
    out: list[Check] = []
    grow = ("forked workers reading a list of str each end up holding most of it "
            "(USS above a no-data worker's by at least half the list, every worker)")
    grow_obj = "an object-dtype NumPy array is copied like the list (same bound)"
    flat = [f"the {name} storage stays within noise of a worker that holds no data" for name in ARRAYS]
    persist = "with persistent_workers, epoch 2 is served by the same workers, still holding their copy"
    again = "without persistent_workers, epoch 2's new workers copy the list again"
    if fork_runs is None:
        out += [premise_failed(c, "", NO_FORK) for c in (grow, grow_obj, *flat, persist, again)]
    else:
        reference = fork_runs["none"]
        list_bytes = fork_runs["list"].data_bytes
        margin = noise_margin_bytes(list_bytes, reference)
        need = 0.5 * list_bytes
        if need <= margin:
            spread = (max(reference.peak_uss) - min(reference.peak_uss)) / MiB
            why = (f"half the list ({need / MiB:.1f} MiB) is within the noise margin "
                   f"({margin / MiB:.1f} MiB; the no-data workers' peaks differed by {spread:.1f} MiB): "
                   "use more names")
            out += [premise_failed(c, "", why) for c in (grow, grow_obj, *flat, persist, again)]
        else:
            for claim, storage in ((grow, "list"), (grow_obj, "object array")):
                out.append(at_least(claim, min(extra_uss(fork_runs[storage], reference)) / MiB, need / MiB,
                                    unit=" MiB", what="half the list"))
            for claim, storage in zip(flat, ARRAYS, strict=True):
                out.append(at_most(claim, max(extra_uss(fork_runs[storage], reference)) / MiB, margin / MiB,
                                   unit=" MiB", what="the noise margin"))
            ref_peak = float(np.median(reference.peak_uss))  # as extra_uss measures
            if persistent is None or fresh is None:
                out += [premise_failed(c, "", "the two-epoch runs were not made") for c in (persist, again)]
            else:
                kept = min(persistent.kept_uss, default=0) - ref_peak
                out.append(holds(persist, persistent.same_workers and kept >= need,
                                 f"same workers: {persistent.same_workers}; their USS at epoch 2's start "
                                 f"{kept / MiB:.1f} MiB above a no-data worker (at least {need / MiB:.1f})"))
                again_extra = min(fresh.new_peak_uss, default=0) - ref_peak
                new = len(fresh.new) == len(fresh.first) > 0
                out.append(holds(again, new and again_extra >= need,
                                 f"new workers: {new}; their peak USS {again_extra / MiB:.1f} MiB above a "
                                 f"no-data worker (at least {need / MiB:.1f})"))
    claim = ("spawned workers hold their own copy of the list "
             "(peak private dirty memory above a spawned no-data worker's by at least half the list)")
    if spawned is None:
        out.append(premise_failed(claim, "", "the spawn runs were not made"))
    else:
        spawn_list, spawn_none = spawned
        need = 0.5 * spawn_list.data_bytes
        # Private dirty, not USS: a spawned worker's USS also counts library pages only it read in
        # (tens of MiB that differ from run to run); what it wrote — the unpickled list — is private dirty.
        margin = noise_margin_bytes(spawn_list.data_bytes, spawn_none, "private")
        extra = min(extra_private(spawn_list, spawn_none))
        if need <= margin:
            out.append(premise_failed(claim, f"{extra / MiB:.1f} MiB",
                                      f"half the list ({need / MiB:.1f} MiB) is within the spawned "
                                      f"workers' noise margin ({margin / MiB:.1f} MiB)"))
        else:
            out.append(at_least(claim, extra / MiB, need / MiB, unit=" MiB", what="half the list"))
    copies = ("spawn and forkserver send each worker the list and the arrays by value "
              "(at least the names' bytes)")
    handle = "...but a tensor only as a handle to shared memory (under 1 % of its bytes)"
    out.append(holds(copies, all(sent.get(s, 0) >= 0.9 * encoded for s in BY_VALUE),
                     ", ".join(f"{s}: {sent.get(s, 0) / MiB:.2f} MiB" for s in BY_VALUE)
                     + f" (the names: {encoded / MiB:.2f} MiB)"))
    out.append(holds(handle, sent.get("tensor", encoded) < 0.01 * encoded,
                     f"tensor: {sent.get('tensor', 0)} bytes"))
    return out
