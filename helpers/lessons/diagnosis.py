"""Notebook 16 · diagnose your own loader: the diagnosis names the planted cause of each
mystery loader; a loader that keeps up gets no data knob; the cache replay shows the
headroom of an input-bound loader; following the advice brings the time per step it predicted;
torch.profiler's DataLoader spans agree with the lab's waits."""

from __future__ import annotations

import statistics

from ..classroom.checks import Check, at_least, holds, premise_failed
from ..timing.diagnosis.result import ramp_share

#: Above this share of the steady run spent with workers still starting, the fed loader is not
#: judged: its wait share counts the loop's waits for workers not yet there.
RAMP_SHARE = 0.25
#: The followed advice is measured once every worker is up; above this share of the run spent
#: with some still starting, too little of it is left to measure the pace all of them keep.
FOLLOW_RAMP_SHARE = 0.5


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
) -> list[Check]:
    """``mysteries``: name → :class:`helpers.Diagnosis`; ``planted``: name → the knob planted;
    ``fed``: the diagnosis of a loader that keeps up; ``profiler_diffs``: per batch, the
    profiler's ``__next__`` span minus the lab's wait (s); ``profiler_batches``: batches recorded;
    ``profiler_spans``: the profiler's DataLoader spans (default: as many as differences);
    ``followed``: :class:`helpers.timing.diagnosis.Followed` of loader A's advice (``verify=True``)."""
    spans = len(profiler_diffs) if profiler_spans is None else profiler_spans
    out: list[Check] = []
    for name, d in mysteries.items():
        out.append(
            holds(
                f"the diagnosis of loader {name} names its planted cause ({planted[name]})",
                planted[name] in d.knobs(),
                f"recommended: {', '.join(d.knobs()) or 'nothing'}",
            )
        )
    claim = "a loader that keeps up gets no data knob, only 'make the step faster'"
    advice = next((r.advice for r in fed.recommendations), None)
    waited = (f"recommended: {', '.join(fed.knobs())}"
              + (f" ({advice})" if advice and fed.knobs() == ["none"] else "")
              + f"; after each worker's first batch the loop waited {fed.steady_wait_share:.0%}")
    collected = getattr(fed, "steady_gc_wait_share", 0.0)
    if collected >= 0.005:
        waited += f", and {collected:.0%} more while the main process collected garbage (not the loader's)"
    timeline = getattr(fed, "timeline", None)
    ramp = ramp_share(timeline) if timeline is not None else None
    if fed.knobs() != ["none"] and ramp is not None and ramp > RAMP_SHARE:
        # make notebooks START_METHOD=spawn on the slower kind: "unexplained", the loop waited 25 %
        out.append(premise_failed(
            claim, waited,
            f"its workers were still starting for {ramp:.0%} of the run after the first batch (more than "
            f"{RAMP_SHARE:.0%}; under spawn and forkserver every new worker imports torch first): the "
            "loop waited for workers not yet there, not for a loader that cannot keep up; longer runs would"))
    else:
        out.append(holds(claim, fed.knobs() == ["none"], waited))
    a = mysteries.get("A")
    if a is not None:
        out.append(
            at_least(
                "an input-bound loader has headroom: the cache replay runs at least 1.5× faster",
                a.headroom,
                1.5,
                unit="×",
                what=f"loader A, waiting {a.wait_share:.0%}",
            )
        )
    if followed is not None:
        claim = ("following loader A's first recommendation makes a step faster, and as fast as the "
                 "diagnosis predicted (within 15 % or the measurements' noise, plus the model's miss on the "
                 "loader before the change)")
        if not followed:
            # nothing to follow: the claim about following it cannot be tested (that loader A is
            # diagnosed right is the mystery checks' claim)
            out.append(premise_failed(claim, "", "no recommendation was a loader setting to follow"))
        elif (followed[0].ramp_share() or 0.0) > FOLLOW_RAMP_SHARE:
            # spawn on the slower kind, smoke sizes: 4 new workers each imported torch while the
            # epoch ran (68.3 → 48.2 ms against a predicted 21.6, when the ramp still counted)
            first = followed[0]
            out.append(premise_failed(
                claim, first.describe(),
                f"the changed loader's workers were still starting for {first.ramp_share():.0%} of its run "
                f"after each first batch (more than {FOLLOW_RAMP_SHARE:.0%}; under spawn and forkserver "
                "every new worker imports torch first): too little of the run had all of them up to measure "
                "the pace the advice predicts; persistent_workers=True, or longer epochs, would"))
        else:
            first = followed[0]
            ramp = first.ramp_share()
            starting = "" if ramp is None else f"; workers still starting for {ramp:.0%} of it"
            out.append(holds(claim, first.after_s < first.before_s and first.as_predicted,
                             first.describe() + starting))
    worst = max((abs(x) for x in profiler_diffs), default=float("inf"))
    out.append(
        holds(
            f"torch.profiler's DataLoader spans agree with the lab's waits (one per batch, "
            f"within {tolerance_s * 1e3:.0f} ms each)",
            spans == len(profiler_diffs) == profiler_batches > 0 and worst <= tolerance_s,
            f"{spans} spans for {profiler_batches} batches; largest difference "
            f"{worst * 1e3:.2f} ms, median "
            f"{statistics.median(profiler_diffs) * 1e3 if profiler_diffs else float('nan'):.2f} ms",
        )
    )
    return out
