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


def plot_profile(diagnosis: Diagnosis, most: int = 6):
    """Where a sample's time goes: the learner's costliest functions as bars of milliseconds per sample
    (each with its file and line), and the call inside the costliest chain's last function beside
    them. Raises when the diagnosis has no profile (it profiles only when the loop waits for batches
    not yet built)."""
    import matplotlib.pyplot as plt

    from .. import palette
    from .style import TEXT_PT

    p = diagnosis.profile
    if p is None:
        raise ValueError("this diagnosis has no profile: it profiles samples only when the loop waits for "
                         "batches not yet built")
    bars = [(f"{f.name}  ({f.where})", f.seconds * 1e3, palette.ROLES["fetch"]) for f in p.functions[:most]]
    if p.call is not None:
        bars.append((f"↳ inside {p.culprit.name}: {p.call.name}", p.call.seconds * 1e3,
                     palette.ROLES["wait"]))
    _, ax = plt.subplots(figsize=(12, 0.45 * len(bars) + 1.2), layout="constrained")
    labels = [label for label, _, _ in bars][::-1]
    values = [value for _, value, _ in bars][::-1]
    ax.barh(range(len(bars)), values, color=[colour for _, _, colour in bars][::-1])
    ax.set_yticks(range(len(bars)), labels, fontsize=TEXT_PT)
    for y, value in enumerate(values):
        ax.text(value, y, f" {value:.2f} ms ({value / (p.sample_s * 1e3):.0%})", va="center",
                fontsize=TEXT_PT)
    ax.set_xlim(0, max(values + [p.sample_s * 1e3]) * 1.35)
    ax.axvline(p.sample_s * 1e3, color=palette.ROLES["rule"], linestyle="--", linewidth=1)
    ax.set_xlabel(f"ms per sample (a sample: {p.sample_s * 1e3:.2f} ms, dashed; {p.samples} samples "
                  "profiled)")
    ax.set_title("Where a sample's time goes, function by function (each includes what it calls)", loc="left")
    return ax
