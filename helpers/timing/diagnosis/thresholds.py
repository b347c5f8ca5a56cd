"""The diagnosis's scale and thresholds: one place for every number a rule weighs."""

from __future__ import annotations

import math

#: The TF profiler's scale: the share of step time spent waiting for input, and its label.
SCALE = ((0.05, "not input-bound"), (0.20, "moderately input-bound"), (math.inf, "highly input-bound"))
#: The loop waiting at least this share (after each worker's first batch of an epoch) gets data advice.
INPUT_BOUND = 0.05
#: More workers are advised when the model predicts they save at least this share of each step; a
#: wait under it is moderate.
WORTH = 0.10
#: Start-up above this share of the run is worth avoiding (persistent workers).
STARTUP_SHARE = 0.05
#: A copy above this share of the step is worth overlapping.
COPY_SHARE = 0.10
#: Collate above this share of a worker's fetch is worth a look.
COLLATE_SHARE = 0.30
#: Fetch times whose 90th percentile is this many times their median vary.
SPREAD = 2.0
#: A fetch that keeps its process's CPU busy this share of its time computes (is CPU-bound).
CPU_BOUND = 0.5
#: The main process's own share m above this share of the loop's time per step bounds it.
MAIN_SHARE = 0.25
#: Workers count as busy (what the loop waits for) when their fetches take at least this share of the
#: loop's time per step between them; computing workers fill the cores at this share of them.
BUSY_WORKERS = 0.5
#: A loop that waits but not, by the instrument's reading, for batches not yet built still waits for its
#: workers when their pace is at least this share of its time per step (the instrument can file such a
#: wait as the main process taking batches in); below it, the workers keep ahead and a sample's cost
#: is not what the loop waits for.
NEAR_PACE = 0.8
#: Slow fetches count as landing on one worker when this share of them did.
CONCENTRATED = 0.7
#: A part of the main process's share names the advice when it is at least this share of it.
PART_SHARE = 0.5
#: Tensor storages in a batch from which receiving them one by one is worth stacking.
MANY_STORAGES = 16
#: A stage, or a function of the profile, names the advice when it takes at least this share of a sample.
STAGE_SHARE = 0.3
#: Workers that spend this share of a sample waiting for a lock they share take turns on it.
LOCK_SHARE = 0.3
#: A sample that decodes this many times the values it keeps throws most of the decoding away; a file
#: this many times the bytes a sample keeps is read whole for a part of it.
THROWN_AWAY = 4.0


def input_scale(share: float) -> str:
    """The TF profiler's label for a wait share (``SCALE``)."""
    return next(label for bound, label in SCALE if share < bound)
