"""The plots: every picture a notebook draws, from what the instrument and the workloads measured.

``style`` (the palette's colours as matplotlib draws them, text sizes, legends beside the data),
``timeline`` (timelines), ``model`` (the models beside the measurements), ``remote`` (notebook
13), ``runs`` (notebooks 12, 14, 15, 17), ``diagnosis``
(:func:`plot_diagnosis`, which ``Diagnosis.plot`` calls), ``bugs`` (notebook 18), ``cells`` (notebook 20),
``provenance``
(the reference figures' proof of origin, read by ``scripts/make_figures.py --check``).

May import: the base (helpers.config, helpers.palette), helpers.timing, helpers.data (and
matplotlib). Imported lazily by :mod:`helpers` (a DataLoader worker never pays for matplotlib).
"""

from __future__ import annotations

from .bugs import plot_batch_sizes, plot_draws, plot_step_times, plot_stream_ids
from .cells import plot_cell_outcomes
from .diagnosis import plot_diagnosis, plot_profile
from .model import (
    plot_bandwidth,
    plot_intervals,
    plot_ratios,
    plot_speedup_curves,
    plot_step_time_model,
    show_reference_figure,
)
from .remote import plot_concurrency, plot_object_timings, plot_requests
from .runs import plot_image_rates, plot_ranks, plot_resume, plot_worker_memory, show_image
from .style import COLORS
from .timeline import plot_timeline, plot_timelines, summary_line

__all__ = [
    "COLORS", "plot_timeline", "plot_timelines", "summary_line", "plot_bandwidth", "plot_intervals",
    "plot_ratios", "plot_speedup_curves", "plot_step_time_model", "show_reference_figure",
    "plot_concurrency", "plot_object_timings", "plot_requests", "plot_image_rates", "plot_ranks",
    "plot_resume", "plot_worker_memory", "show_image", "plot_diagnosis",
    "plot_profile", "plot_batch_sizes", "plot_draws",
    "plot_step_times", "plot_stream_ids", "plot_cell_outcomes",
]
