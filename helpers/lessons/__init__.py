"""Each notebook's lesson checks and the verdicts its prose reads, as tested functions.

One module per notebook topic; each has a ``checks(...)`` function that takes what the
notebook measured and returns :class:`helpers.Check` objects (``helpers.show_checks``
renders them and raises when one fails). ``tests/test_lessons.py`` runs every one of them
on a configuration where its lesson does not hold, and shows it failing. Every module here is a
topic (the check framework is ``helpers/classroom/checks.py``).

May import: ``helpers.config``, ``helpers.cores``, ``helpers.system``, ``helpers.models``,
``helpers.timing``, ``helpers.data``, ``helpers.classroom`` and ``helpers.lessons``.
"""

from . import (
    baseline,
    batched,
    bugs,
    capstone,
    cell_defined,
    copy_on_read,
    device_prefetch,
    diagnosis,
    distributed,
    images,
    in_order,
    limits,
    main_process,
    num_workers,
    pinned,
    prefetch,
    remote,
    resume,
    setup,
    shared_memory,
    startup,
    way_in,
)

__all__ = [
    "baseline",
    "batched",
    "bugs",
    "capstone",
    "cell_defined",
    "copy_on_read",
    "device_prefetch",
    "diagnosis",
    "distributed",
    "images",
    "in_order",
    "limits",
    "main_process",
    "num_workers",
    "pinned",
    "prefetch",
    "remote",
    "resume",
    "setup",
    "shared_memory",
    "startup",
    "way_in",
]
