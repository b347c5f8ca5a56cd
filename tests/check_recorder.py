"""A pytest plugin for ``tests/test_check_coverage.py``: records the ids each passing test asserted
failing with :func:`lesson_checks.assert_fails`.

Loaded by every process of a pytest run of the lesson tests (``PYTEST_PLUGINS=check_recorder``, in
a subprocess of that test), and active only when ``DLLAB_CHECK_RECORD_DIR`` names a folder. Before
each test it clears :data:`lesson_checks.ASSERTED`; after a test that passed it writes one record per
id asserted: ``{"id": ..., "test": <node id>}``. A test that failed, or one that never called
``assert_fails``, writes nothing.

Each process appends to its own file (``records-<pid>.jsonl``): the records do not depend on the
order the tests run in, and a run split across pytest-xdist workers writes one file per worker.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import lesson_checks

_FOLDER = os.environ.get("DLLAB_CHECK_RECORD_DIR")


def pytest_runtest_setup(item):
    lesson_checks.ASSERTED.clear()


def pytest_runtest_logreport(report):
    if not _FOLDER or report.when != "call":
        return
    if report.passed and lesson_checks.ASSERTED:
        with open(Path(_FOLDER) / f"records-{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
            for id in lesson_checks.ASSERTED:
                out.write(json.dumps({"id": id, "test": report.nodeid}) + "\n")
    lesson_checks.ASSERTED.clear()
