"""The lab's two settings, both read from the environment and parsed strictly.

**Smoke mode** shrinks every workload so that the whole notebook collection runs in
minutes on 2 cores (CI runs it with ``pytest --nbmake``). It changes sizes and
durations only, never which code runs: every notebook calls the same helpers with
smaller numbers. Turn it on with ``DLLAB_SMOKE=1`` (before starting JupyterLab or
pytest; ``make lab QUICK=1`` does it for a class). The value is parsed strictly:
``1/true/yes/on`` or ``0/false/no/off`` (any case), or unset/empty for off. Anything
else raises, so a typo never silently runs the full workloads in CI.

**The start method** of DataLoader workers: ``DLLAB_START_METHOD=fork``, ``spawn`` or
``forkserver`` (unset: the platform's default — ``fork`` on Linux before Python 3.14,
``forkserver`` on Linux from 3.14, ``spawn`` on macOS and Windows). Notebooks apply it
once in their setup cell with :func:`helpers.use_start_method`, so every
``DataLoader`` without an explicit ``multiprocessing_context`` uses it; lessons about
one start method pass it explicitly and say so.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path
from typing import TypeVar

from . import cores

SMOKE_ENV = "DLLAB_SMOKE"
START_METHOD_ENV = "DLLAB_START_METHOD"
RESULTS_ENV = "DLLAB_RESULTS_DIR"
CACHE_ENV = "DLLAB_CACHE_DIR"

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
        f"{name}={value!r} is not understood. Set {name}=1 to turn it on, "
        f"{name}=0 (or unset it) to turn it off."
    )


def is_smoke() -> bool:
    """True when the environment asks for smoke mode (read each call, so tests can set it)."""
    return parse_flag(os.environ.get(SMOKE_ENV), SMOKE_ENV)


def parse_start_method(value: str | None, available: list[str] | None = None) -> str | None:
    """Parse ``DLLAB_START_METHOD`` strictly: None (unset or empty) or an available method."""
    available = available if available is not None else mp.get_all_start_methods()
    if value is None or not value.strip():
        return None
    method = value.strip().lower()
    if method not in available:
        raise ValueError(
            f"{START_METHOD_ENV}={value!r} is not a start method this platform offers. Set it to "
            f"one of {', '.join(available)}, or unset it for the platform's default."
        )
    return method


def default_start_method() -> str:
    """The start method workers get when a ``DataLoader`` names none: this process's default
    (the platform's, unless ``multiprocessing.set_start_method`` changed it)."""
    return mp.get_start_method(allow_none=True) or mp.get_context().get_start_method()


def start_method() -> str:
    """The lab's start method for DataLoader workers: ``DLLAB_START_METHOD`` if set, else the
    platform's default (what a learner's own script gets)."""
    chosen = parse_start_method(os.environ.get(START_METHOD_ENV))
    return chosen if chosen is not None else default_start_method()


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
    """Effective cores, as a count of busy processes (at least 1): the affinity mask capped by a
    cgroup CPU quota (:mod:`helpers.cores`), rounded up — the fewest processes that use all of
    it (1.5 CPUs: 2). ``helpers.effective_cores()`` gives the CPUs themselves (1.5; 0.5 under half
    a CPU); ``helpers.cpu_limits()`` says where each limit came from."""
    return cores.cpu_limits().whole


def repo_root() -> Path:
    """The lab's checkout (``helpers`` is installed editable, so it sits inside it)."""
    return Path(__file__).resolve().parent.parent


def results_dir() -> Path:
    """Where notebooks write ``<notebook>.json`` (``DLLAB_RESULTS_DIR`` overrides)."""
    override = os.environ.get(RESULTS_ENV)
    return Path(override) if override else repo_root() / "results"


def cache_dir(name: str, *, empty: bool = True) -> Path:
    """The lab's folder for the files a notebook writes (downloads, caches, traces):
    ``<repo>/cache/<name>`` (``DLLAB_CACHE_DIR`` replaces ``<repo>/cache``; git ignores it,
    ``make clean`` removes it). Made if missing. ``empty=True`` clears it first, so each run
    starts from nothing — and the next Run All reuses the same folder instead of leaving
    another one behind in the temporary folder. ``name``: a relative path such as
    ``"13_remote_storage/local"``."""
    import shutil

    parts = Path(name).parts
    if not name or Path(name).is_absolute() or ".." in parts:
        raise ValueError(
            f"name must be a relative folder name inside the cache, like '13_remote/local', got {name!r}"
        )
    override = os.environ.get(CACHE_ENV)
    folder = (Path(override) if override else repo_root() / "cache") / name
    if empty and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
