"""A pytest plugin for ``tests/test_check_coverage.py``: records where each lesson check was built.

Loaded with ``-p check_recorder`` in a pytest run of the lesson tests (a subprocess of that test),
and active only when ``DLLAB_CHECK_RECORD_DIR`` names a folder. For every
:class:`helpers.classroom.checks.Check` created during a test, it notes the call site that built
it — the innermost frame in
``helpers/lessons/``, as file and the source span of the call being executed there — with the
verdict and the claim. A test's records are written only when the test passed, so a failing case
counts only where the test that builds it (and asserts on it) succeeds.

Each process appends to its own file (``records-<pid>.jsonl``): the records do not depend on the
order the tests run in, and a run split across pytest-xdist workers writes one file per worker.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

_FOLDER = os.environ.get("DLLAB_CHECK_RECORD_DIR")
_pending: list[dict] = []  # records of the test that is running now


def _call_site(lessons_dir: str) -> tuple[str, list[int | None]] | None:
    """The innermost frame in ``helpers/lessons/`` and the span of the instruction it is executing."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.realpath(frame.f_code.co_filename)
        if path.startswith(lessons_dir):
            positions = list(frame.f_code.co_positions())[frame.f_lasti // 2]
            line, end_line, col, end_col = positions
            if line is None:  # no position information (python -X no_debug_ranges): the line alone
                line, end_line, col, end_col = frame.f_lineno, frame.f_lineno, None, None
            root = Path(lessons_dir).parents[1]  # the repository: .../helpers/lessons/ -> ...
            return Path(path).relative_to(root).as_posix(), [line, end_line, col, end_col]
        frame = frame.f_back
    return None


def pytest_configure(config):
    if not _FOLDER:
        return
    import helpers.classroom.checks
    import helpers.lessons

    lessons_dir = os.path.realpath(os.path.dirname(helpers.lessons.__file__)) + os.sep
    build = helpers.classroom.checks.Check.__init__

    def recording_init(self, *args, **kwargs):
        build(self, *args, **kwargs)
        site = _call_site(lessons_dir)
        if site is not None:
            _pending.append({"file": site[0], "span": site[1], "claim": self.claim, "passed": self.passed})

    helpers.classroom.checks.Check.__init__ = recording_init


def pytest_runtest_setup(item):
    _pending.clear()


def pytest_runtest_logreport(report):
    if not _FOLDER or report.when != "call":
        return
    if report.passed and _pending:
        with open(Path(_FOLDER) / f"records-{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
            for record in _pending:
                out.write(json.dumps({**record, "test": report.nodeid}) + "\n")
    _pending.clear()
