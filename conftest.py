"""pytest's root conftest (every run: the unit tests and nbmake's notebook tests).

It installs the workaround for a missed wake-up in the notebook client (``scripts/nbclient_poll.py``):
nbmake's wait for a cell's reply is polled in slices, so a missed zmq wake-up costs a second, not
the 300 s cell timeout.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))
import nbclient_poll  # noqa: E402

nbclient_poll.install()
