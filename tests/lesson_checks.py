"""How a unit test shows a lesson check failing: :func:`assert_fails` names the check by its id.

Every check a lesson builds (``helpers/lessons/``) carries an id, ``"<notebook>.<topic>.<claim>"``.
``assert_fails(checks, "18.reseed.no_repeats")`` asserts that the check with that id came out ✗ —
judged on a held premise and found false, not "premise failed" — and notes the id. A test that
calls it and passes is what ``tests/test_check_coverage.py`` counts: every id written in a lesson
must be asserted failing by at least one passing test. A test that counts the ✗s, or reads
verdicts some other way, shows no particular claim failing and counts for none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from helpers.classroom.checks import Check, Expected

#: The ids :func:`assert_fails` saw fail in the test running now (``tests/check_recorder.py`` clears it
#: before each test and writes it out when the test passed).
ASSERTED: list[str] = []


def checks_of(rows: Iterable[Any]) -> list[Check]:
    """The checks among a lesson's rows (its :class:`Expected` rows left out)."""
    return [r for r in rows if isinstance(r, Check)]


def expected_of(rows: Iterable[Any]) -> dict[str, Expected]:
    """A lesson's :class:`Expected` rows, by what they show."""
    return {r.what: r for r in rows if isinstance(r, Expected)}


def with_id(rows: Iterable[Any], id: str) -> list[Check]:
    """Every check with this id (a check built in a loop has one id for all its instances)."""
    return [c for c in checks_of(rows) if c.id == id]


def verdict(rows: Iterable[Any], id: str) -> bool | None:
    """The verdict of the one check with this id: True (✓), False (✗) or None (premise failed)."""
    (check,) = with_id(rows, id)
    return check.passed


def assert_fails(rows: Iterable[Any], id: str) -> Check:
    """Assert that the check ``id`` came out ✗ with its premise held, and note the id; returns that
    check (the first ✗ among its instances)."""
    rows = list(rows)
    found = with_id(rows, id)
    assert found, f"no check {id!r} was built; the checks built: {sorted({c.id for c in checks_of(rows)})}"
    failed = [c for c in found if c.passed is False]
    assert failed, f"{id} did not fail:\n" + "\n".join(
        f"  [{c.verdict}] {c.claim}: {c.measured}" + (f" — {c.premise}" if c.premise else "") for c in found)
    assert not failed[0].premise, f"{id} failed with a premise attached: {failed[0]}"
    ASSERTED.append(id)
    return failed[0]
