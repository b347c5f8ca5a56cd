"""``python -m helpers.failures`` (the command the lab's child processes run) and ``helpers.failures.*``:
the code is in :mod:`helpers.data.failures`; this file keeps the command's module name runnable."""

import sys

from helpers.data import failures as _impl


def __getattr__(name: str):  # helpers.failures.X is helpers.data.failures.X
    return getattr(_impl, name)


if __name__ == "__main__":
    sys.exit(_impl.main())
