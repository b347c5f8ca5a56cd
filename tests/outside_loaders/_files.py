"""Where the outside-loader cases keep their generated files."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

MARKER = ".complete"


def root() -> str:
    """The folder that holds one sub-folder per case."""
    default = os.path.join(tempfile.gettempdir(), "dllab-outside-loaders")
    return os.environ.get("OUTSIDE_LOADERS_DIR") or default


def case_dir(name: str) -> str:
    """The sub-folder of one case (it may not exist yet)."""
    return os.path.join(root(), name)


def ensure(name: str, build: Callable[[str], None]) -> str:
    """The case's folder, built by ``build(folder)`` on first use and reused once complete."""
    final = case_dir(name)
    if os.path.exists(os.path.join(final, MARKER)):
        return final
    os.makedirs(root(), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{name}-", dir=root())
    try:
        build(staging)
        with open(os.path.join(staging, MARKER), "w"):
            pass
        if os.path.exists(final) and not os.path.exists(os.path.join(final, MARKER)):
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(staging, final)
        except OSError:
            if not os.path.exists(os.path.join(final, MARKER)):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def remove(name: str) -> None:
    """Delete the case's folder, if any."""
    shutil.rmtree(case_dir(name), ignore_errors=True)
