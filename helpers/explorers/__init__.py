"""The explorers: widgets a notebook shows (knobs → Run → a figure and a summary).

One base (:class:`~helpers.explorers.base.Explorer`: the Run button, the run and its errors, the
layout), one short module per explorer. A new lesson's explorer subclasses it in a module here.

May import: ``helpers.config``, ``helpers.cores``, ``helpers.system``, ``helpers.models``,
``helpers.timing``, ``helpers.data``, ``helpers.plots`` and ``helpers.explorers`` (and ipywidgets,
matplotlib). Loaded lazily by :mod:`helpers`.
"""

from __future__ import annotations

from .base import Explorer
from .diagnose import DiagnoseExplorer
from .distributed import DistExplorer
from .images import ImageExplorer
from .memory import MemoryExplorer
from .randomness import RandomnessExplorer
from .remote import RemoteExplorer
from .resume import ResumeExplorer
from .timeline import SLOW_FACTOR, ExplorerSettings, TimelineExplorer

__all__ = ["SLOW_FACTOR", "DiagnoseExplorer", "DistExplorer", "Explorer", "ExplorerSettings", "ImageExplorer",
           "MemoryExplorer", "RandomnessExplorer", "RemoteExplorer", "ResumeExplorer", "TimelineExplorer"]
