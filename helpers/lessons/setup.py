"""Notebook 00 · setup check: the verdict on this environment, as lesson checks."""

from __future__ import annotations

import multiprocessing as mp

from ..classroom import setup_check
from ..classroom.checks import Check, holds


def checks(found: list[setup_check.Check], methods: list[str] | None = None) -> list[Check]:
    """Every blocking setup check must pass (the lab will not work otherwise), and every start
    method this platform offers must have been tried and started its workers."""
    methods = methods if methods is not None else mp.get_all_start_methods()
    out = [holds(f"{c.name}: ready for the lab", c.ok,
                 c.detail + (f" — fix: {c.fix}" if c.fix and not c.ok else ""), id="00.setup.ready")
           for c in found if c.blocking and not c.name.startswith("workers (")]
    by_name = {c.name: c for c in found}
    for method in methods:
        c = by_name.get(f"workers ({method})")
        out.append(holds(f"workers start under {method} and name themselves correctly",
                         c is not None and c.ok, c.detail if c is not None else "not tried",
                         id="00.setup.workers_start"))
    return out


def advisories(found: list[setup_check.Check]) -> list[str]:
    """The non-blocking problems, each with its fix (the lab runs, some lessons look different)."""
    return [f"{c.name}: {c.detail}. {c.fix}" for c in found if not c.ok and not c.blocking]
