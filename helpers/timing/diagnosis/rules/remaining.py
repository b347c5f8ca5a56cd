"""What is left once the data rules have spoken: pinning for a copy worth overlapping (notebook 06), a
diagnosis without a step, and a loop that still waits — its own share of each batch named, with its
remedy and the step the model predicts without it; "the loader keeps up" only under 5 %."""

from __future__ import annotations

from ..advice import Recommendation, ms
from ..thresholds import COPY_SHARE, INPUT_BOUND, WORTH, input_scale
from .context import Context
from .main_process import main_process_advice


def no_step(c: Context) -> Recommendation | None:
    """Without a step, whether the loader keeps up cannot be said."""
    d = c.d
    if d.replay_step_s is not None:
        return None
    rate = 1 / d.steady_step_s if d.steady_step_s > 0 else float("nan")
    return Recommendation(
        "step", "diagnose again with your training step (a function, or --step-ms with its time): "
        "whether the loader keeps up depends on it",
        f"without a step the loader alone delivered {rate:.1f} batches/s ({ms(d.steady_step_s)} per "
        f"batch) after start-up, a fetch taking {ms(d.fetch_mean_s)} on average")


def pin_memory(c: Context) -> Recommendation | None:
    parts = c.d.breakdown()
    copy = parts["copy to the device"]
    if c.device is None or c.loader.pin_memory or copy < COPY_SHARE * max(parts["step"], 1e-9):
        return None
    return Recommendation(
        "pin_memory", "pin_memory=True and non_blocking copies (notebook 06)",
        f"the copy takes {ms(copy)} per step, {copy / parts['step']:.0%} of the step", {"pin_memory": True})


def what_remains(c: Context) -> Recommendation:
    """Advice when no other rule spoke: under ``INPUT_BOUND`` the loader keeps up; otherwise the part
    of the wait that is the loop's own work on batches already built (m) is named with its remedy,
    and a wait for batches not yet built that no knob the lab models explains says so."""
    d = c.d
    wait, data = d.steady_wait_share, d.steady_data_wait_share
    taking_in = max(wait - data, 0.0)
    waited = (f"after each worker's first batch the loop waited {wait:.0%} ({input_scale(wait)}), "
              f"{data:.0%} for batches not yet built and {taking_in:.0%} taking built ones in")
    if wait < INPUT_BOUND:
        return Recommendation("none", "the loader keeps up: make the step faster, not the data",
                              f"{waited}; start-up took {c.startup_share:.0%} of the run")
    if taking_in >= data:
        # The workers keep up; the wait is the loop's own work taking the batches in (m: receiving each
        # from a worker, the sampler, pinning). No worker knob shortens it (a dict loader can wait 57 %,
        # only 2 % of it for batches not yet built).
        advice = main_process_advice(d, c.loader, c.own_m, c.y, c.workers_pace, c.m)
        return Recommendation(advice.knob, "the workers build each batch in time; the loop's wait is its "
                              "own work taking them in: " + advice.advice, f"{waited}; {advice.because}",
                              advice.change, advice.predicted_s, advice.measure)
    if data < WORTH:
        return Recommendation(
            "none", "the loader nearly keeps up: no knob the lab models is worth turning; make the step "
            "faster",
            f"{waited}, with {c.workers} workers (the sizing rule's {c.needed}): under {WORTH:.0%}, within "
            "what a batch's hand-over from a worker costs; without the wait a step would take "
            f"{ms(d.steady_step_s * (1 - wait))} instead of {ms(d.steady_step_s)}",
            None, d.steady_step_s * (1 - wait))
    return Recommendation(
        "unexplained", "the loop waits, and no knob the lab models explains it: read the timeline "
        "(the loop's own work between batches, a slow first epoch)",
        f"{waited} ({input_scale(data)}), with {c.workers} workers (the sizing rule asks for {c.needed})")
