"""The instrument: what a learner can take to their own training loop.

- ``recorder`` — :func:`helpers.record`: iterate a ``DataLoader`` and a step, get a timeline;
- ``hooks`` — what runs inside the loader to stamp each fetch (workers, the main process, GC);
- ``timeline`` — :class:`Timeline` (batches, epochs, spans, pauses) and its Perfetto trace export;
- ``torch_internals`` — the **only** module that touches private ``torch.utils.data`` names, with
  :func:`torch_internals.self_check` that says when a torch release moved them;
- ``settings``, ``analysis``, ``report``, ``pauses``, ``device`` (batches to the device, the clock);
- ``theory`` — the step-time model (how many workers, what the loop waits);
- ``diagnosis`` — :func:`helpers.diagnose`: record, replay from kept batches, advise; ``trace`` —
  ``torch.profiler`` interop. The command line is ``python -m helpers.diagnose``.

May import: ``helpers.config``, ``helpers.cores``, ``helpers.system`` and ``helpers.timing`` — nothing
from the workloads (``helpers.data``), the model, the lessons, the classroom, the explorers or the
plots (``tests/test_layout.py`` holds the rule). A picture of a result is drawn by
:mod:`helpers.plots`, which takes the result.
"""
