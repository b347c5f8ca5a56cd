"""Workers started again every epoch: ``persistent_workers=True`` when start-up is a real share of the run
(notebook 05)."""

from __future__ import annotations

from ...timeline import Timeline
from ..advice import Recommendation
from ..thresholds import STARTUP_SHARE
from .context import Context


def persistent_run_s(c: Context) -> float:
    """The run's time with workers kept between epochs: the first epoch as measured (start-up
    included, up to its last step: its end shut the workers down), then each later epoch one
    fetch for its first batch and the steady pace for the rest — no start-up, a worker still
    starting never holds a batch back, and no shutdown (notebook 05)."""
    d, tl = c.d, c.d.timeline
    first = tl.epochs[0]
    last_step = max((b.step_end for b in tl.batches if b.epoch == first.epoch), default=first.end)
    pace = max(d.fetch_mean_s / max(c.workers, 1), (d.replay_step_s or 0.0) + d.main_s)
    later = [sum(b.epoch == e.epoch for b in tl.batches) for e in tl.epochs[1:]]
    return (last_step - first.iter_start) + sum(d.fetch_mean_s + (k - 1) * pace for k in later if k)


def epoch_ends_s(tl: Timeline) -> float:
    """Seconds after each epoch's last step (the last ``next()``, which shuts the workers down
    when they are not persistent) and between epochs (the old iterator going)."""
    last: dict[int, float] = {}
    for b in tl.batches:
        last[b.epoch] = max(last.get(b.epoch, 0.0), b.step_end)
    tails = sum(max(e.end - last.get(e.epoch, e.end), 0.0) for e in tl.epochs)
    gaps = sum(max(nxt.iter_start - e.end, 0.0) for e, nxt in zip(tl.epochs[:-1], tl.epochs[1:], strict=True))
    return tails + gaps


def persistent_workers(c: Context) -> Recommendation | None:
    """Start-up at least ``STARTUP_SHARE`` of a run of several epochs, with workers that are not kept."""
    d, tl = c.d, c.d.timeline
    epochs = len(tl.epochs)
    share = d.startup_s / tl.wall_s if tl.wall_s > 0 else 0.0
    if c.workers == 0 or c.loader.persistent_workers or epochs < 2 or share < STARTUP_SHARE:
        return None
    predicted = persistent_run_s(c) / d.steps
    now = tl.wall_s / d.steps
    return Recommendation(
        "persistent_workers", "persistent_workers=True: start the workers once, not every epoch (the "
        "workers then keep the dataset's state between epochs: a change you make to it in the main "
        "process no longer reaches them, notebook 05)",
        f"start-up took {d.startup_s:.2f} s over {epochs} epochs, {share:.0%} of the run, and each "
        f"epoch's end (its workers shutting down) {epoch_ends_s(tl):.2f} s in all: the model predicts "
        f"{predicted * 1e3:.1f} ms per step over the run, against {now * 1e3:.1f} ms now",
        {"persistent_workers": True}, predicted, "run")
