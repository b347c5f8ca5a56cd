"""Diagnose your own loader (notebook 16): ``helpers.diagnose(loader, step)``.

It records the loader with the lab's instrument (:func:`helpers.record`), then replays the
same steps on batches it kept from that run (the cache replay: data instantly there — the
speed limit of the loop), and reports:

- the **headroom**: how much faster the loop would run if data were free, and the share of
  time the loop **waited** for data on the TF profiler's scale (under 5 % of step time: not
  input-bound; 5–20 %: moderately; over 20 %: highly input-bound);
- **where the time goes** per batch: worker start-up, fetch (mean and median; of it, the
  ``collate_fn``, timed in the worker where it runs, and the CPU the fetch used — computing
  or waiting), the main process's own share m (receive, pin, the loop's hand-over), the copy to
  the device, the step;
- **recommendations** derived from the lab's models, each with the number that triggered it:
  workers from the sizing rule x = ⌈n / (y + m)⌉ with the *mean* fetch (notebook 02), capped by
  the effective cores, less what other processes keep busy, when the fetch computes (04, 14), and
  when it mostly waits at as many fetches as those cores can compute for at once (⌊cores / CPU share⌋);
  ``in_order=False`` when slow batches land on one worker and a deeper prefetch when they are spread
  (03, 09), either only when they outlast the lead the queue gives them (workers × prefetch_factor
  batches ahead) or a worker falls behind its turn; persistent workers when start-up is a large
  share (05); pinning when the copy is (06); a cheaper collate when busy workers spend their time
  there (08); the main process's share when it, not the workers, bounds the step (11). More workers
  only when the model saves at least ``WORTH`` of a step; an ``IterableDataset`` is told the
  sharding more workers need; workers that take turns on a lock they share are told so, not given more;
- **where a sample's time goes**, when the loop waits for batches not yet built: a few samples
  profiled with ``cProfile`` where the loader builds them (:mod:`.profile`), read as the learner's
  costliest functions with their file and line, and the library call inside (:mod:`.profiled`); the
  advice names the function, the call and the cause it recognises (the same arguments every call, a
  whole file read for a part, values converted one by one, more decoded than kept), with its remedy
  and the step predicted without it. A dataset that exposes its stages (a ``loader``, a ``Compose``)
  also gets each stage's time (:mod:`.stages`).

``verify=True`` then follows the advice: it applies the first recommendation that is a
``DataLoader`` setting to a copy of the loader, runs again, reports the measured time per step
(once every worker is up) beside the prediction (and the noise of the measurement), then the next one.
A run after that came out slower than predicted is recorded once more and the faster kept: whatever
else the machine does only ever slows a run down.

One picture (:meth:`Diagnosis.plot`), one table (:meth:`Diagnosis.table`), one Perfetto trace
(:meth:`Diagnosis.trace`). From a terminal, for a script outside Jupyter::

    dataloader-lab diagnose my_module:make_loader --step-ms 30 --verify

:func:`helpers.timing.trace.profile` records the same run under ``torch.profiler``.

The package flows one way: ``run`` measures (:func:`diagnose`; ``profile``, ``stages``, ``batches``),
``result`` holds the facts (:class:`Diagnosis`, :class:`Followed`; ``profiled`` reads the profile),
``rules`` turns facts into advice (one small function per rule, :func:`recommend`; numbers in
``thresholds``, the advice's shape in ``advice``), and the views report it. ``loaders`` copies a
loader with changes (:func:`with_changes`). The mystery loaders of notebook 16 are a workload:
:mod:`helpers.data.mysteries`.
"""

from __future__ import annotations

from .result import Diagnosis, Followed
from .rules import SCALE, Recommendation, input_scale, recommend
from .run import diagnose, with_changes

__all__ = ["SCALE", "Diagnosis", "Followed", "Recommendation", "diagnose", "input_scale", "recommend",
           "with_changes"]
