"""A pytest plugin for ``tests/test_check_coverage.py``: records where each lesson check was built.

Loaded with ``-p check_recorder`` in a pytest run of the lesson tests (a subprocess of that test),
and active only when ``DLLAB_CHECK_RECORD_DIR`` names a folder. For every
:class:`helpers.classroom.checks.Check` created during a test, it notes the call site that built
it — the innermost frame in
``helpers/lessons/``, as file and the source span of the call being executed there — with the
verdict, the claim, and whether the test read that verdict (``passed`` or ``verdict``, from a
frame in ``tests/`` or the running test's file, directly or through ``LessonChecks``). A read by
lesson code does not count by itself: a check the lesson reads to decide the next check it builds
in the same call (a comparison folded into the claim the learner sees) counts as read when the test
reads that next check's ✗.
A test's records are written only when the test passed, so a failing case counts only where the
test that builds it succeeds and looks at it: a ✗ built on the way to something else, and never
read, shows nothing.

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
_built: dict[int, tuple[object, dict]] = {}  # id(check) -> (the check, its record), this test's
_consumed: dict[int, tuple[object, list[dict]]] = {}  # id(lesson frame) -> (it, the checks it read since)
_test_file: list[str] = []  # the running test's file (it may live outside tests/)
_test_function: list[str] = []  # the running test's function (its name in the file)


def _lesson_frame(lessons_dir: str):
    """The innermost frame in ``helpers/lessons/`` of the code calling the recorder, or None."""
    frame = sys._getframe(2)
    while frame is not None:
        if os.path.realpath(frame.f_code.co_filename).startswith(lessons_dir):
            return frame
        frame = frame.f_back
    return None


def _call_site(frame, lessons_dir: str) -> tuple[str, list[int | None]]:
    """A lesson frame's file and the span of the instruction it is executing."""
    positions = list(frame.f_code.co_positions())[frame.f_lasti // 2]
    line, end_line, col, end_col = positions
    if line is None:  # no position information (python -X no_debug_ranges): the line alone
        line, end_line, col, end_col = frame.f_lineno, frame.f_lineno, None, None
    root = Path(lessons_dir).parents[1]  # the repository: .../helpers/lessons/ -> ...
    path = os.path.realpath(frame.f_code.co_filename)
    return Path(path).relative_to(root).as_posix(), [line, end_line, col, end_col]


def _reader(lessons_dir: str, tests_dir: str):
    """Who reads a check's verdict: "test" when, of the frames in ``tests/`` (or the running test's
    file) and in ``helpers/lessons/``, the innermost is a test's (helpers in between, such as
    ``LessonChecks.failed``, pass the read on); else that lesson frame; else None."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.realpath(frame.f_code.co_filename)
        if path.startswith(tests_dir) or path in _test_file:
            return "test"
        if path.startswith(lessons_dir):
            return frame
        frame = frame.f_back
    return None


def _mark_read(record: dict) -> None:
    """A test read this check's verdict: so it did every ✗ the lesson read to decide a ✗ here."""
    record["read"] = True
    if record["passed"] is False:
        for fed in record["feeds"]:
            if not fed["read"]:
                _mark_read(fed)


def pytest_configure(config):
    if not _FOLDER:
        return
    import helpers.classroom.checks
    import helpers.lessons

    lessons_dir = os.path.realpath(os.path.dirname(helpers.lessons.__file__)) + os.sep
    tests_dir = os.path.realpath(os.path.dirname(__file__)) + os.sep
    check = helpers.classroom.checks.Check
    build, get = check.__init__, check.__getattribute__

    def recording_init(self, *args, **kwargs):
        build(self, *args, **kwargs)
        frame = _lesson_frame(lessons_dir)
        if frame is not None:
            file, span = _call_site(frame, lessons_dir)
            # the checks this lesson call read before building this one decided it (a comparison
            # built as a check, then its verdict folded into the claim the learner sees)
            _, feeds = _consumed.pop(id(frame), (None, []))
            record = {"file": file, "span": span, "claim": get(self, "claim"),
                      "passed": get(self, "passed"), "read": False, "feeds": feeds}
            _pending.append(record)
            _built[id(self)] = (self, record)  # the check itself kept: its id is not reused meanwhile

    def reading(self, name):
        if name in ("passed", "verdict"):
            entry = _built.get(id(self))
            if entry is not None and entry[0] is self and not entry[1]["read"]:
                reader = _reader(lessons_dir, tests_dir)
                if reader == "test":
                    _mark_read(entry[1])
                elif reader is not None:
                    fed = _consumed.setdefault(id(reader), (reader, []))[1]
                    if not any(record is entry[1] for record in fed):  # by identity: records may be equal
                        fed.append(entry[1])
        return get(self, name)

    check.__init__ = recording_init
    check.__getattribute__ = reading


def _clear() -> None:
    _pending.clear()
    _built.clear()
    _consumed.clear()


def pytest_runtest_setup(item):
    _clear()
    _test_file[:] = [os.path.realpath(str(item.path))]
    _test_function[:] = [getattr(item, "originalname", item.name)]


def pytest_runtest_logreport(report):
    if not _FOLDER or report.when != "call":
        return
    if report.passed and _pending:
        with open(Path(_FOLDER) / f"records-{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
            for record in _pending:
                out.write(json.dumps({key: value for key, value in record.items() if key != "feeds"}
                                     | {"test": report.nodeid, "test_file": _test_file[0],
                                        "test_function": _test_function[0]}) + "\n")
    _clear()
