"""Lesson checks: compare a lesson's claim with what this run measured.

Every notebook ends with its lesson checks, built by functions in
:mod:`helpers.lessons` and rendered as a table a learner reads — claim · measured ·
verdict. :func:`show_checks` displays the table and raises when a claim failed, so a
notebook run (and CI) goes red. Each check can fail: the unit tests run each notebook's
checks on a configuration where its lesson does not hold.

Timing checks follow one rule: they hold with a margin set from noise measured in the
same run (medians rather than means, ratios of runs made side by side, a margin that
grows with the measured jitter), or they measure that their premise failed and say so
(verdict "premise failed": the claim was not tested, and the table says why, with the
number). They are never red because the machine hiccuped.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..palette import TEXT

#: The smallest margin a timing comparison gets: sleeps overshoot by up to about a
#: millisecond even on an idle machine.
TIMER_FLOOR_S = 0.002


@dataclass(frozen=True)
class Check:
    """One lesson check. ``passed`` is None when its premise did not hold."""

    claim: str  #: the lesson's claim, in words
    measured: str  #: what was measured, formatted for the table
    passed: bool | None
    premise: str = ""  #: why the claim could not be tested here (with the measured number)

    @property
    def verdict(self) -> str:
        if self.passed is None:
            return "premise failed"
        return "✓" if self.passed else "✗"


class LessonCheckFailed(AssertionError):
    """A lesson's claim did not hold on this run."""


class LessonChecks(list):
    """A notebook's checks; shows as a table (claim · measured · verdict)."""

    def failed(self) -> list[Check]:
        return [c for c in self if c.passed is False]

    def not_tested(self) -> list[Check]:
        return [c for c in self if c.passed is None]

    def rows(self) -> list[tuple[str, str, str]]:
        return [(c.claim, c.measured + (f" — {c.premise}" if c.premise else ""), c.verdict) for c in self]

    def __str__(self) -> str:
        return "\n".join(f"[{verdict}] {claim}: {measured}" for claim, measured, verdict in self.rows())

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        colour = {"✓": TEXT["ok"], "✗": TEXT["fail"], "premise failed": TEXT["premise"]}
        body = "".join(
            f"<tr><td style='text-align:left'>{html.escape(claim)}</td>"
            f"<td style='text-align:left'>{html.escape(measured)}</td>"
            f"<td style='color:{colour[verdict]};font-weight:bold'>{html.escape(verdict)}</td></tr>"
            for claim, measured, verdict in self.rows())
        return ("<table><tr><th style='text-align:left'>claim</th><th style='text-align:left'>measured</th>"
                f"<th>verdict</th></tr>{body}</table>")

    def raise_if_failed(self) -> None:
        failed = self.failed()
        if failed:
            raise LessonCheckFailed(
                f"{len(failed)} of {len(self)} lesson checks failed on this run:\n"
                + "\n".join(f"- {c.claim} (measured: {c.measured})" for c in failed))


def show_checks(checks: Iterable[Check]) -> None:
    """Display the checks as a table, then raise :class:`LessonCheckFailed` if any failed."""
    table = LessonChecks(checks)
    try:
        from IPython.display import display

        display(table)
    except ImportError:  # outside IPython: print the table
        print(table)
    table.raise_if_failed()
    untested = len(table.not_tested())
    print(f"all lesson checks passed: {len(table) - untested} claims held"
          + (f", {untested} could not be tested here (see why above)" if untested else ""))


# -- noise -----------------------------------------------------------------------------------
def spread_s(values: Sequence[float]) -> float:
    """A robust spread of timings: the distance from the 10th to the 90th percentile (s).

    One or two outliers (a garbage-collection pause, a late wake-up) do not move it;
    a machine busy with other work widens it."""
    values = sorted(values)
    if len(values) < 3:
        return 0.0
    cuts = statistics.quantiles(values, n=10, method="inclusive")
    return cuts[-1] - cuts[0]


def timing_noise_s(step_durations: Sequence[float]) -> float:
    """The timing noise of this machine right now, from steps that should all take the same
    time (the modelled step sleeps a fixed time: every deviation is the machine's)."""
    return spread_s(step_durations)


def margin_s(expected_s: float, rel: float, noise_s: float = 0.0) -> float:
    """The tolerance of a timing comparison: ``rel`` of the expected value, or three times the
    measured noise when that is larger (never below :data:`TIMER_FLOOR_S`)."""
    return max(rel * abs(expected_s), 3 * noise_s, TIMER_FLOOR_S)


# -- building checks ---------------------------------------------------------------------------
def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e3:.1f} ms" if abs(value) < 1 else f"{value:.3f} s"
    if unit == "×":
        return f"{value:.2f}×"
    if unit == "%":
        return f"{value:.0%}"
    return f"{value:.3g}{unit}"


#: Why a comparison with nothing measured is not judged: a NaN or an infinity is a missing
#: measurement (no batch of that kind, a run that did not happen), not a claim found false.
UNMEASURED = "nothing was measured to compare (a missing value)"


def _unmeasured(*values: float) -> bool:
    return not all(math.isfinite(v) for v in values)


def near(claim: str, measured: float, expected: float, *, rel: float, noise_s: float = 0.0,
         unit: str = "s") -> Check:
    """``measured`` is within the margin (:func:`margin_s`) of ``expected``; "premise failed"
    when either is not a finite number."""
    tolerance = margin_s(expected, rel, noise_s) if unit == "s" else rel * abs(expected)
    text = f"{_fmt(measured, unit)} (expected {_fmt(expected, unit)} ± {_fmt(tolerance, unit)})"
    if _unmeasured(measured, expected, tolerance):
        return Check(claim, text, None, UNMEASURED)
    return Check(claim, text, abs(measured - expected) <= tolerance)


def at_most(claim: str, measured: float, bound: float, *, unit: str = "s", what: str = "bound") -> Check:
    """``measured <= bound``; "premise failed" when either is not a finite number."""
    text = f"{_fmt(measured, unit)} (at most {_fmt(bound, unit)}: {what})"
    if _unmeasured(measured, bound):
        return Check(claim, text, None, UNMEASURED)
    return Check(claim, text, measured <= bound)


def at_least(claim: str, measured: float, bound: float, *, unit: str = "s", what: str = "bound") -> Check:
    """``measured >= bound``; "premise failed" when either is not a finite number."""
    text = f"{_fmt(measured, unit)} (at least {_fmt(bound, unit)}: {what})"
    if _unmeasured(measured, bound):
        return Check(claim, text, None, UNMEASURED)
    return Check(claim, text, measured >= bound)


def no_effect(claim: str, measured: float, reference: float, *, rel: float, noise: float, effect: float,
              unit: str = "s", what: str = "") -> Check:
    """A claim of no effect: ``measured`` is within the tolerance of ``reference`` (``rel`` of it, or three
    times the ``noise``). Judged only where the effect the claim denies (``effect``: the difference
    expected if the claim were false) would stand out of that tolerance; else "premise failed": the run
    could not have shown the effect, so its absence says nothing."""
    tolerance = max(rel * abs(reference), 3 * noise, TIMER_FLOOR_S if unit == "s" else 0.0)
    text = (f"{_fmt(measured, unit)} vs {_fmt(reference, unit)} ± {_fmt(tolerance, unit)}"
            + (f" ({what})" if what else ""))
    if _unmeasured(measured, reference, tolerance, effect):
        return Check(claim, text, None, UNMEASURED)
    if abs(effect) <= tolerance:
        return Check(claim, text, None, f"the effect this run would show if the claim were false "
                                        f"({_fmt(abs(effect), unit)}) is within its tolerance: it could not "
                                        "tell no effect from one")
    return Check(claim, text, abs(measured - reference) <= tolerance)


def holds(claim: str, ok: bool, measured: str) -> Check:
    """A claim whose test is computed by the caller (a count, an order, a set)."""
    return Check(claim, measured, bool(ok))


def premise_failed(claim: str, measured: str, premise: str) -> Check:
    """The claim could not be tested on this run; ``premise`` says why, with the number."""
    return Check(claim, measured, None, premise)



def exceeds(claim: str, measured: float, reference: float, *, gap: float, noise: float, unit: str = "s",
            what: str = "") -> Check:
    """``measured`` is above ``reference`` by about ``gap`` (the predicted effect): passes when it
    is above by at least half the gap, fails otherwise — unless the noise cannot resolve half the
    gap (``3 × noise >= gap / 2``), which is reported as a failed premise."""
    text = (f"{_fmt(measured, unit)} vs {_fmt(reference, unit)}, predicted gap {_fmt(gap, unit)}"
            + (f" ({what})" if what else ""))
    if _unmeasured(measured, reference, gap, noise):
        return Check(claim, text, None, UNMEASURED)
    if 3 * noise >= gap / 2:
        return Check(claim, text, None, f"the predicted gap is within this run's timing noise "
                                        f"(± {_fmt(3 * noise, unit)})")
    return Check(claim, text, measured >= reference + gap / 2)


def clearly_above(claim: str, measured: float, reference: float, *, noise: float, unit: str = "s",
                  what: str = "") -> Check:
    """``measured`` is above ``reference`` (no effect size is predicted): passes when above by more
    than three times the noise (and :data:`TIMER_FLOOR_S`), fails when not above at all, and
    reports a failed premise in between."""
    margin = max(3 * noise, TIMER_FLOOR_S) if unit == "s" else 3 * noise
    text = f"{_fmt(measured, unit)} vs {_fmt(reference, unit)}" + (f" ({what})" if what else "")
    if _unmeasured(measured, reference, noise):
        return Check(claim, text, None, UNMEASURED)
    if measured <= reference:
        return Check(claim, text, False)
    if measured >= reference + margin:
        return Check(claim, text, True)
    return Check(claim, text, None, f"the difference is within this run's noise (± {_fmt(margin, unit)})")
