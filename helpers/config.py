"""The lab's one switch and its sizes: smoke mode.

Smoke mode shrinks every workload so that the whole notebook collection runs in
minutes on 2 cores (CI runs it with ``pytest --nbmake``). It changes sizes and
durations only, never which code runs: every notebook calls the same helpers
with smaller numbers.

Turn it on with the environment variable ``DLLAB_SMOKE=1`` (before starting
JupyterLab or pytest). The value is parsed strictly: ``1/true/yes/on`` or
``0/false/no/off`` (any case), or unset/empty for off. Anything else raises, so
a typo never silently runs the full workload in CI.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

SMOKE_ENV = "DLLAB_SMOKE"
RESULTS_ENV = "DLLAB_RESULTS_DIR"

#: Durations (load and step times) are multiplied by this in smoke mode.
SMOKE_TIME_SCALE = 0.2

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}

T = TypeVar("T")


def parse_flag(value: str | None, name: str = SMOKE_ENV) -> bool:
    """Parse an on/off environment value strictly; raise ``ValueError`` naming the fix."""
    if value is None:
        return False
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(
        f"{name}={value!r} is not understood. Set {name}=1 for smoke mode, "
        f"{name}=0 (or unset it) for the full workloads."
    )


def is_smoke() -> bool:
    """True when the environment asks for smoke mode (read each call, so tests can set it)."""
    return parse_flag(os.environ.get(SMOKE_ENV), SMOKE_ENV)


def sized(full: T, smoke: T) -> T:
    """Return ``smoke`` in smoke mode and ``full`` otherwise (e.g. a number of items)."""
    if type(full) is not type(smoke):
        raise TypeError(f"sized() needs two values of one type, got {full!r} and {smoke!r}")
    return smoke if is_smoke() else full


def seconds(full_s: float) -> float:
    """A duration in seconds, scaled by ``SMOKE_TIME_SCALE`` in smoke mode."""
    if full_s < 0:
        raise ValueError(f"a duration cannot be negative, got {full_s} s")
    return full_s * SMOKE_TIME_SCALE if is_smoke() else full_s


def available_cores() -> int:
    """Cores this process may run on (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def repo_root() -> Path:
    """The lab's checkout (``helpers`` is installed editable, so it sits inside it)."""
    return Path(__file__).resolve().parent.parent


def results_dir() -> Path:
    """Where notebooks write ``<notebook>.json`` (``DLLAB_RESULTS_DIR`` overrides)."""
    override = os.environ.get(RESULTS_ENV)
    return Path(override) if override else repo_root() / "results"
