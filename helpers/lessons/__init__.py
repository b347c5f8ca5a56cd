"""Each notebook's lesson checks and the verdicts its prose reads, as tested functions.

One module per notebook topic; each has a ``checks(...)`` function that takes what the
notebook measured and returns :class:`helpers.Check` objects, each with its id written here as a
string literal, and :class:`~helpers.classroom.checks.Expected` rows for what the lab's own
workload fixes (``helpers.show_checks`` renders both and raises when a check fails).
``tests/test_lessons.py`` shows every check failing by its id (``assert_fails``) on a
configuration where its claim does not hold and its premise does. Every module here is a topic
(the check framework is ``helpers/classroom/checks.py``).

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
