"""Shared test helpers."""

from __future__ import annotations

from typing import Any

import pytest

import helpers

#: Test files whose assertions compare real timings (sleeps, CPU shares, run-ahead, rates). `make unit`
#: runs them one at a time after the others, which run two at a time (pytest-xdist): another test's
#: processes then never share their cores. Every other test asserts ids, values, errors or memory.
TIMING_FILES = {
    "test_datasets_models.py", "test_diagnose.py", "test_distributed.py", "test_images.py",
    "test_prefetch.py", "test_remote.py", "test_storage.py", "test_system.py", "test_timeline.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        # A test in a timing file that compares no timings says so (@pytest.mark.untimed) and runs
        # with the others, two at a time: it only makes `make unit` shorter.
        if item.path.name in TIMING_FILES and item.get_closest_marker("untimed") is None:
            item.add_marker(pytest.mark.timing)


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """One JupyterLab for every browser test (tests/test_browser.py, tests/test_browser_overview.py)."""
    from test_browser import serve_lab

    yield from serve_lab(tmp_path_factory)


def make_loader(dataset: Any, *, sampler: Any = None, collate_fn: Any = None, worker_init_fn: Any = None,
                **settings: Any):
    """A DataLoader with the lab's settings type (keyword knobs as in ``helpers.LoaderSettings``)."""
    return helpers.LoaderSettings(**settings).loader(dataset, sampler=sampler, collate_fn=collate_fn,
                                                     worker_init_fn=worker_init_fn)
