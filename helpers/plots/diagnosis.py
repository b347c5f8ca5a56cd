"""A diagnosis's picture (``Diagnosis.plot`` calls :func:`plot_diagnosis`)."""

from __future__ import annotations

from ..timing.diagnosis.advice import describe_change as _describe_change
from ..timing.diagnosis.result import Diagnosis
from .timeline import plot_timeline, plot_timelines


def plot_diagnosis(diagnosis: Diagnosis, title: str | None = None):
    """The run's timeline with the headroom and the recommendations in its title; with
    ``verify=True``, the timelines before and after each followed recommendation."""
    advice = "; ".join(r.knob for r in diagnosis.recommendations) or "none"
    headline = title or (f"headroom {diagnosis.headroom:.2f}× · waiting {diagnosis.steady_wait_share:.0%} "
                         f"({diagnosis.scale}) · recommendations: {advice}")
    if diagnosis.followed:
        titles = [f"before: {headline}"] + [
            f"after {f.recommendation.knob} ({_describe_change(f.recommendation.change)}): "
            f"{f.before_s * 1e3:.1f} → {f.after_s * 1e3:.1f} ms per step, "
            f"predicted {f.predicted_s * 1e3:.1f}"
            for f in diagnosis.followed]
        return plot_timelines([diagnosis.timeline] + [f.after.timeline for f in diagnosis.followed],
                              titles=titles)
    return plot_timeline(diagnosis.timeline, title=headline)
