"""Notebook 16 · diagnose your own loader: what the diagnosis names for each mystery loader beside
its planted cause, and for a loader that keeps up; torch.profiler's DataLoader spans agree with the
lab's waits."""

from __future__ import annotations

import statistics

from ..classroom.checks import Check, Expected, holds
from ..timing.diagnosis.result import ramp_share

#: Above this share of the steady run spent with workers still starting, the fed loader's row says
#: so: its wait share counts the loop's waits for workers not yet there.
RAMP_SHARE = 0.25


def checks(
    mysteries: dict,
    planted: dict[str, str],
    fed,
    profiler_diffs: list[float],
    profiler_batches: int,
    profiler_spans: int | None = None,
    *,
    tolerance_s: float = 0.002,
    followed: list | None = None,
    captions=None,
) -> list[Check | Expected]:
    """``mysteries``: name → :class:`helpers.Diagnosis`; ``planted``: name → the knob planted;
    ``fed``: the diagnosis of a loader that keeps up; ``profiler_diffs``: per batch, the
    profiler's ``__next__`` span minus the lab's wait (s); ``profiler_batches``: batches recorded;
    ``profiler_spans``: the profiler's DataLoader spans (default: as many as differences);
    ``captions``: loader D's diagnosis, whose profile names a line of its ``__getitem__``.

    One check: torch.profiler's spans against the lab's waits. What the diagnosis names for the lab's
    loaders is :class:`Expected` rows beside what was planted: the lab's own instrument on loaders
    whose sleeps decide the cause (``tests/test_diagnose.py`` tests the diagnosis). Not shown here:
    loader A's cache replay and its advice followed (``followed``), which the notebook prints beside
    their predictions."""
    spans = len(profiler_diffs) if profiler_spans is None else profiler_spans
    out: list[Check | Expected] = [
        Expected(f"loader {name}: the knob the diagnosis names", ", ".join(d.knobs()) or "nothing",
                 planted[name], unit="")
        for name, d in mysteries.items()]
    if captions is not None:
        top = captions.profile.lines[0] if captions.profile is not None and captions.profile.lines else None
        out.append(Expected("loader D: the line of Captions.__getitem__ the profile saw most",
                            costliest_line(captions) or "none", "vocabulary", unit="",
                            note=f"{top}, {top.share:.0%} of the samples" if top else "no profile"))
    advice = next((r.advice for r in fed.recommendations), None)
    waited = (f"after each worker's first batch the loop waited {fed.steady_wait_share:.0%}"
              + (f" ({advice})" if advice and fed.knobs() == ["none"] else ""))
    collected = getattr(fed, "steady_gc_wait_share", 0.0)
    if collected >= 0.005:
        waited += f", and {collected:.0%} more while the main process collected garbage (not the loader's)"
    timeline = getattr(fed, "timeline", None)
    ramp = ramp_share(timeline) if timeline is not None else None
    if fed.knobs() != ["none"] and ramp is not None and ramp > RAMP_SHARE:
        # under spawn on a slow machine the loop can wait 25 % while workers still import torch
        waited += (f"; its workers were still starting for {ramp:.0%} of the run after the first batch: the "
                   "loop waited for workers not yet there")
    out.append(Expected("a loader that keeps up: the diagnosis names no data knob, only 'make the step "
                        "faster'", ", ".join(fed.knobs()), "none", unit="", note=waited))
    worst = max((abs(x) for x in profiler_diffs), default=float("inf"))
    # nine in ten within the tolerance: one batch that a garbage collection or a CPU quota's stop
    # lands in lengthens that batch's span and wait unevenly, and says nothing about the spans
    within = sum(abs(x) <= tolerance_s for x in profiler_diffs)
    out.append(
        holds(
            f"torch.profiler's DataLoader spans agree with the lab's waits (one per batch, nine in "
            f"ten within {tolerance_s * 1e3:.0f} ms)",
            spans == len(profiler_diffs) == profiler_batches > 0 and within >= 0.9 * len(profiler_diffs),
            f"{spans} spans for {profiler_batches} batches; {within} within {tolerance_s * 1e3:.0f} ms; "
            f"largest difference {worst * 1e3:.2f} ms, median "
            f"{statistics.median(profiler_diffs) * 1e3 if profiler_diffs else float('nan'):.2f} ms",
            id="16.profiler.spans_agree",
            inputs=profiler_diffs,
        )
    )
    return out


#: The lines of ``Captions.__getitem__`` (loader D) the vote offers, each by a piece of its text.
CAPTION_LINES = {"vocabulary": "sorted(self.words)", "caption": "for k in range(12)",
                 "tokens": "ids[word] for word", "tensor": "torch.tensor("}


def costliest_line(d) -> str | None:
    """Which of :data:`CAPTION_LINES` the diagnosis's profile saw most (its line sampler's top line in
    ``Captions.__getitem__``); None without a profile, or when the top line is none of them."""
    if d.profile is None:
        return None
    inside = [line for line in d.profile.lines if line.function == "Captions.__getitem__"]
    if not inside:
        return None
    return next((name for name, piece in CAPTION_LINES.items() if piece in inside[0].text), None)
