"""The diagnosis's rules: pure functions from what a diagnosis measured (:class:`~..result.Diagnosis`,
read once into a :class:`.context.Context`) to advice (:class:`~..advice.Recommendation`), each with the
number that triggered it and, where the lab's model gives one, the step it predicts.

:func:`recommend` reads them in the order the diagnosis weighs them:

1. start-up every epoch (``startup``); without a step, nothing more can be said (``remaining.no_step``);
2. a ``collate_fn`` that is most of a fetch, and the main process's own share m (``workers``,
   ``main_process``);
3. the workers: they fill the cores (then a cheaper sample, named by the profile where there is one);
   or they take turns on a lock; or there are too few of them; or slow batches outlast the queue's
   lead (``workers``, ``order``) — the first that applies;
4. where a sample's time goes, from the profile (a sample that waits is left to the workers' advice)
   and from the stages (``sample``);
5. pinning; and if nothing spoke, what remains of the wait (``remaining``).
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

from ..advice import Recommendation
from ..advice import describe_change as _describe_change
from ..advice import ms as _ms
from ..thresholds import MAIN_SHARE, SCALE, WORTH, input_scale
from . import main_process, order, remaining, sample
from .context import Context
from .main_process import PrecomputedIndices, main_process_advice
from .order import longest_burst
from .startup import epoch_ends_s as _epoch_ends_s
from .startup import persistent_workers
from .workers import collate, fills_the_cores, num_workers, serialised


def recommend(d: Any, loader: DataLoader, *, device: Any = None) -> list[Recommendation]:
    """The rules applied to what ``d`` measured, in the order above."""
    c = Context.of(d, loader, device)
    out: list[Recommendation] = []

    def add(*advice: Recommendation | None) -> None:
        out.extend(a for a in advice if a is not None)

    add(persistent_workers(c))
    if d.replay_step_s is None:
        add(remaining.no_step(c))
        return out
    cheaper_collate = collate(c)
    add(cheaper_collate and sample.named(cheaper_collate, c), main_process.main_process(c))
    if c.waiting and c.saturated and not c.main_bound:
        # the cores are full: a cheaper sample is the advice, named by the profile where it can be
        add(sample.sample_code(c, more_workers_help=False) or fills_the_cores(c))
    else:
        workers = serialised(c) or num_workers(c) or order.slow_batches(c)
        add(workers)
        add(sample.sample_code(c, more_workers_help=workers is not None and workers.knob == "num_workers"))
    add(sample.stages(c), remaining.pin_memory(c))
    if not out:
        add(remaining.what_remains(c))
    return out


__all__ = ["MAIN_SHARE", "SCALE", "WORTH", "Context", "PrecomputedIndices", "Recommendation",
           "_describe_change", "_epoch_ends_s", "_ms", "input_scale", "longest_burst", "main_process_advice",
           "recommend"]
