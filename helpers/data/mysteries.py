"""Three loaders with a planted problem (notebook 16): :func:`mystery_loader`, their causes in
:data:`PLANTED` (``helpers.diagnosis.PLANTED`` in the notebook), and :class:`SlowCollate`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader


# -- three loaders with a planted problem (notebook 16) -------------------------------------------
class SlowCollate:
    """``default_collate`` plus ``cpu_s`` of CPU work per batch (a collate that decodes, pads
    or augments in Python)."""

    def __init__(self, cpu_s: float):
        self.cpu_s = cpu_s

    def __call__(self, samples: list[Any]) -> Any:
        from torch.utils.data import default_collate

        from .datasets import burn_cpu

        burn_cpu(self.cpu_s)
        return default_collate(samples)


#: The mystery loaders' planted causes, for the tests (the notebook does not print them first).
PLANTED = {"A": "num_workers", "B": "collate_fn", "C": "persistent_workers"}


def mystery_loader(name: str, *, smoke: bool | None = None) -> tuple[DataLoader, Callable[[Any], Any], int]:
    """One of three loaders with a planted problem: ``(loader, step, steps to diagnose)``."""
    from ..config import is_smoke
    from ..models import ModelledStep
    from .datasets import WorkDataset

    smoke = is_smoke() if smoke is None else smoke
    if name == "A":
        loader = DataLoader(WorkDataset(1024, item_wait_s=0.004), batch_size=16, shuffle=True, num_workers=1)
        return loader, ModelledStep(0.02), 24 if smoke else 48
    if name == "B":
        loader = DataLoader(
            WorkDataset(1024, item_wait_s=0.0005),
            batch_size=16,
            shuffle=True,
            num_workers=2,
            collate_fn=SlowCollate(0.03),
        )
        return loader, ModelledStep(0.01), 24 if smoke else 48
    if name == "C":
        loader = DataLoader(
            WorkDataset(64, item_wait_s=0.001),
            batch_size=16,
            shuffle=True,
            num_workers=2,
            multiprocessing_context="spawn",
            persistent_workers=False,
        )
        return loader, ModelledStep(0.01), 12 if smoke else 20
    raise ValueError(f"mystery loaders are 'A', 'B' and 'C', got {name!r}")
