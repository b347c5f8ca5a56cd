"""Lesson checks: compare a lesson's claim with what this run measured.

Every notebook ends with its lesson checks, built by functions in :mod:`helpers.lessons` and
rendered as a table a learner reads — claim · measured · verdict. :func:`show_checks` displays the
table and raises when a claim failed, so a notebook run (and CI) goes red.

A lesson check states something about PyTorch, Python or the machine that could come out otherwise
on another machine, another torch or another start method: each ✓ could have been ✗. Each check
carries an ``id`` (``"<notebook>.<topic>.<claim>"``, e.g. ``"02.gc.freeze_shortens_collections"``),
a required keyword of every constructor here that can return ✓ or ✗, written as a string literal
where a lesson builds it. A unit test names that id in ``assert_fails(checks, id)``
(``tests/lesson_checks.py``) on a configuration where the claim is false and its premise holds, and
``tests/test_check_coverage.py`` is red for an id that no passing test asserts failing that way.

What cannot come out otherwise is not a check. A number the lab's own workload fixes (its sleeps,
its delays, its settings) is shown as an :class:`Expected` row: what the model or PyTorch's
documented behaviour predicts, beside what this run measured, in a second table after the checks,
with no verdict, no id, and nothing that raises.

Timing checks follow one rule: they hold with a margin set from noise measured in the same run
(medians rather than means, ratios of runs made side by side, a margin that grows with the measured
jitter), or they measure that their premise failed and say so (verdict "premise failed": the claim
was not tested, and the table says why, with the number). They are never red because the machine
hiccuped. Nothing measured is not a pass: a NaN or an infinity among the numbers a verdict is
computed from gives "premise failed" in every constructor (``holds`` receives them as ``inputs``).
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..palette import TEXT

#: The smallest margin a timing comparison gets: sleeps overshoot by up to about a
#: millisecond even on an idle machine.
TIMER_FLOOR_S = 0.002


@dataclass(frozen=True)
class Check:
    """One lesson check. ``passed`` is None when its premise did not hold. ``id`` names the claim
    (``"<notebook>.<topic>.<claim>"``): the unit test that shows it failing asserts it by that id."""

    claim: str  #: the lesson's claim, in words
    measured: str  #: what was measured, formatted for the table
    passed: bool | None
    premise: str = ""  #: why the claim could not be tested here (with the measured number)
    id: str = field(kw_only=True)

    @property
    def verdict(self) -> str:
        if self.passed is None:
            return "premise failed"
        return "✓" if self.passed else "✗"


@dataclass(frozen=True)
class Expected:
    """What the model (or PyTorch's documented behaviour) predicts for the lab's own workload,
    beside what this run measured. Not a check: the lab's sleeps and settings fix the outcome, so
    it has no verdict and never raises. Numbers are formatted with ``unit`` (as the checks' are);
    text is shown as it is; a NaN reads "not measured"."""

    what: str
    measured: float | str
    expected: float | str
    unit: str = "s"
    note: str = ""  #: what else the run measured around it, or why it differs

    def row(self) -> tuple[str, str, str]:
        measured = _shown(self.measured, self.unit) + (f" — {self.note}" if self.note else "")
        return self.what, measured, _shown(self.expected, self.unit)


def _shown(value: float | str, unit: str) -> str:
    if isinstance(value, str):
        return value
    return "not measured" if _unmeasured(value) else _fmt(value, unit)


class LessonCheckFailed(AssertionError):
    """A lesson's claim did not hold on this run."""


#: The heading of the second table: its rows are predictions, not claims judged.
EXPECTED_HEADING = ("Expected, not checked: what the model and PyTorch's documented behaviour predict for "
                    "this lab's own workload (its sleeps and settings fix these numbers), beside what this "
                    "run measured")


class LessonChecks(list):
    """A notebook's lesson checks and :class:`Expected` rows; shows as a table of the checks
    (claim · measured · verdict), then one of the expected rows (what · measured · expected)."""

    @property
    def checks(self) -> list[Check]:
        return [c for c in self if isinstance(c, Check)]

    @property
    def expected(self) -> list[Expected]:
        return [e for e in self if isinstance(e, Expected)]

    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.passed is False]

    def not_tested(self) -> list[Check]:
        return [c for c in self.checks if c.passed is None]

    def rows(self) -> list[tuple[str, str, str]]:
        return [(c.claim, c.measured + (f" — {c.premise}" if c.premise else ""), c.verdict)
                for c in self.checks]

    def __str__(self) -> str:
        lines = [f"[{verdict}] {claim}: {measured}" for claim, measured, verdict in self.rows()]
        if self.expected:
            lines.append(f"{EXPECTED_HEADING}:")
            lines += [f"  {what}: {measured} (expected {expected})"
                      for what, measured, expected in (e.row() for e in self.expected)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        colour = {"✓": TEXT["ok"], "✗": TEXT["fail"], "premise failed": TEXT["premise"]}
        out = ""
        if self.checks:
            body = "".join(
                f"<tr><td style='text-align:left' title='{html.escape(c.id)}'>{html.escape(claim)}</td>"
                f"<td style='text-align:left'>{html.escape(measured)}</td>"
                f"<td style='color:{colour[verdict]};font-weight:bold'>{html.escape(verdict)}</td></tr>"
                for c, (claim, measured, verdict) in zip(self.checks, self.rows(), strict=True))
            out += ("<table><tr><th style='text-align:left'>claim</th>"
                    f"<th style='text-align:left'>measured</th><th>verdict</th></tr>{body}</table>")
        if self.expected:
            body = "".join(
                f"<tr><td style='text-align:left'>{html.escape(what)}</td>"
                f"<td style='text-align:left'>{html.escape(measured)}</td>"
                f"<td style='text-align:left'>{html.escape(expected)}</td></tr>"
                for what, measured, expected in (e.row() for e in self.expected))
            out += (f"<p style='color:{TEXT['premise']}'>{html.escape(EXPECTED_HEADING)}</p>"
                    "<table><tr><th style='text-align:left'>what</th><th style='text-align:left'>measured"
                    f"</th><th style='text-align:left'>expected</th></tr>{body}</table>")
        return out

    def raise_if_failed(self) -> None:
        failed = self.failed()
        if failed:
            raise LessonCheckFailed(
                f"{len(failed)} of {len(self.checks)} lesson checks failed on this run:\n"
                + "\n".join(f"- {c.claim} (measured: {c.measured}) — {c.id}" for c in failed))


def show_checks(checks: Iterable[Check | Expected]) -> None:
    """Display the checks as a table (and any :class:`Expected` rows in a second one), then raise
    :class:`LessonCheckFailed` if a check failed."""
    table = LessonChecks(checks)
    try:
        from IPython.display import display

        display(table)
    except ImportError:  # outside IPython: print the table
        print(table)
    table.raise_if_failed()
    if not table.checks:
        print("no lesson check here: every row above is the model's prediction for the lab's own "
              "workload, shown beside the measurement")
        return
    untested = len(table.not_tested())
    held = len(table.checks) - untested
    print(f"all lesson checks passed: {held} claim{'' if held == 1 else 's'} held"
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


def _unmeasured(*values: float | None) -> bool:
    return not all(v is not None and math.isfinite(v) for v in values)


def _fmt_or_nan(value: float, unit: str) -> str:
    return "nan" if _unmeasured(value) else _fmt(value, unit)


def near(claim: str, measured: float, expected: float, *, rel: float, id: str, noise_s: float = 0.0,
         unit: str = "s") -> Check:
    """``measured`` is within the margin (:func:`margin_s`) of ``expected``; "premise failed"
    when either is not a finite number."""
    if _unmeasured(measured, expected, noise_s):
        return Check(claim, f"{_fmt_or_nan(measured, unit)} (expected {_fmt_or_nan(expected, unit)})", None,
                     UNMEASURED, id=id)
    tolerance = margin_s(expected, rel, noise_s) if unit == "s" else rel * abs(expected)
    text = f"{_fmt(measured, unit)} (expected {_fmt(expected, unit)} ± {_fmt(tolerance, unit)})"
    return Check(claim, text, abs(measured - expected) <= tolerance, id=id)


def at_most(claim: str, measured: float, bound: float, *, id: str, unit: str = "s",
            what: str = "bound") -> Check:
    """``measured <= bound``; "premise failed" when either is not a finite number."""
    text = f"{_fmt_or_nan(measured, unit)} (at most {_fmt_or_nan(bound, unit)}: {what})"
    if _unmeasured(measured, bound):
        return Check(claim, text, None, UNMEASURED, id=id)
    return Check(claim, text, measured <= bound, id=id)


def at_least(claim: str, measured: float, bound: float, *, id: str, unit: str = "s",
             what: str = "bound") -> Check:
    """``measured >= bound``; "premise failed" when either is not a finite number."""
    text = f"{_fmt_or_nan(measured, unit)} (at least {_fmt_or_nan(bound, unit)}: {what})"
    if _unmeasured(measured, bound):
        return Check(claim, text, None, UNMEASURED, id=id)
    return Check(claim, text, measured >= bound, id=id)


def no_effect(claim: str, measured: float, reference: float, *, rel: float, noise: float, effect: float,
              id: str, unit: str = "s", what: str = "") -> Check:
    """A claim of no effect: ``measured`` is within the tolerance of ``reference`` (``rel`` of it, or three
    times the ``noise``). Judged only where the effect the claim denies (``effect``: the difference
    expected if the claim were false) would stand out of that tolerance; else "premise failed": the run
    could not have shown the effect, so its absence says nothing."""
    if _unmeasured(measured, reference, noise, effect):
        return Check(claim, f"{_fmt_or_nan(measured, unit)} vs {_fmt_or_nan(reference, unit)}"
                     + (f" ({what})" if what else ""), None, UNMEASURED, id=id)
    tolerance = max(rel * abs(reference), 3 * noise, TIMER_FLOOR_S if unit == "s" else 0.0)
    text = (f"{_fmt(measured, unit)} vs {_fmt(reference, unit)} ± {_fmt(tolerance, unit)}"
            + (f" ({what})" if what else ""))
    if abs(effect) <= tolerance:
        return Check(claim, text, None, f"the effect this run would show if the claim were false "
                                        f"({_fmt(abs(effect), unit)}) is within its tolerance: it could not "
                                        "tell no effect from one", id=id)
    return Check(claim, text, abs(measured - reference) <= tolerance, id=id)


def holds(claim: str, ok: bool, measured: str, *, id: str, inputs: Sequence[float | None] = ()) -> Check:
    """A claim whose test is computed by the caller (a count, an order, a set). ``inputs``: the
    numbers ``ok`` was computed from, where it comes from measured numbers: a NaN, an infinity or a
    None among them gives "premise failed" (a comparison with NaN is False, which is not a ✗)."""
    if _unmeasured(*inputs):
        return Check(claim, measured, None, UNMEASURED, id=id)
    return Check(claim, measured, bool(ok), id=id)


def premise_failed(claim: str, measured: str, premise: str, *, id: str = "") -> Check:
    """The claim could not be tested on this run; ``premise`` says why, with the number. ``id``: the
    claim's, where it is judged on other runs (a premise alone is no claim)."""
    return Check(claim, measured, None, premise, id=id)


def exceeds(claim: str, measured: float, reference: float, *, gap: float, noise: float, id: str,
            unit: str = "s", what: str = "") -> Check:
    """``measured`` is above ``reference`` by about ``gap`` (the predicted effect): passes when it
    is above by at least half the gap, fails otherwise — unless the noise cannot resolve half the
    gap (``3 × noise >= gap / 2``), which is reported as a failed premise."""
    text = (f"{_fmt_or_nan(measured, unit)} vs {_fmt_or_nan(reference, unit)}, predicted gap "
            f"{_fmt_or_nan(gap, unit)}" + (f" ({what})" if what else ""))
    if _unmeasured(measured, reference, gap, noise):
        return Check(claim, text, None, UNMEASURED, id=id)
    if 3 * noise >= gap / 2:
        return Check(claim, text, None, f"the predicted gap is within this run's timing noise "
                                        f"(± {_fmt(3 * noise, unit)})", id=id)
    return Check(claim, text, measured >= reference + gap / 2, id=id)


def clearly_above(claim: str, measured: float, reference: float, *, noise: float, id: str, unit: str = "s",
                  what: str = "") -> Check:
    """``measured`` is above ``reference`` (no effect size is predicted): passes when above by more
    than three times the noise (and :data:`TIMER_FLOOR_S`), fails when not above at all, and
    reports a failed premise in between."""
    text = f"{_fmt_or_nan(measured, unit)} vs {_fmt_or_nan(reference, unit)}" + (f" ({what})" if what else "")
    if _unmeasured(measured, reference, noise):
        return Check(claim, text, None, UNMEASURED, id=id)
    margin = max(3 * noise, TIMER_FLOOR_S) if unit == "s" else 3 * noise
    if measured <= reference:
        return Check(claim, text, False, id=id)
    if measured >= reference + margin:
        return Check(claim, text, True, id=id)
    return Check(claim, text, None, f"the difference is within this run's noise (± {_fmt(margin, unit)})",
                 id=id)
