"""``python -m helpers.startup`` (the command the lab's child processes run) and ``helpers.startup.*``:
the code is in :mod:`helpers.data.startup`; this file keeps the command's module name runnable."""

import sys

from helpers.data import startup as _impl


def __getattr__(name: str):  # helpers.startup.X is helpers.data.startup.X
    return getattr(_impl, name)


if __name__ == "__main__":
    sys.exit(_impl.main())
