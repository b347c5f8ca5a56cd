"""Shared test helpers."""

from __future__ import annotations

from typing import Any

import helpers


def make_loader(dataset: Any, *, sampler: Any = None, collate_fn: Any = None, worker_init_fn: Any = None,
                **settings: Any):
    """A DataLoader with the lab's settings type (keyword knobs as in ``helpers.LoaderSettings``)."""
    return helpers.LoaderSettings(**settings).loader(dataset, sampler=sampler, collate_fn=collate_fn,
                                                     worker_init_fn=worker_init_fn)
