"""The notebook client's wait for a cell's reply, polled in slices: a workaround for a missed
wake-up that can cost `make test` 300 s (a stalled notebook client),
and `make handouts` up to its 900 s cell timeout.

nbclient (nbmake's and scripts/handouts.py's notebook runner) waits for a cell's reply with one
``zmq.asyncio`` poll on the shell channel that lasts the whole cell timeout. pyzmq joins zmq to
asyncio through zmq's *edge-triggered* file descriptor: when a wake-up is missed, the poll returns
only at its timeout, where pyzmq's last non-blocking check (``zmq/_future.py``, ``on_poll_ready``)
finds the reply that had been waiting all along. The run then goes on, a cell timeout late, with
the kernel idle the whole time — what py-spy showed in the stalls (nbmake's and a handout's).

:func:`install` makes the client poll in slices of ``SLICE_S``: each slice ends with that same
non-blocking check, so a missed wake-up costs at most a slice. It changes when a reply already
there is noticed, not what is waited for: a cell that runs past the timeout fails at the same
moment as before. A reply found only at the end of a slice is reported as a ``RuntimeWarning``
starting ``MissedWakeUp:`` (a missed wake-up, or a reply that came in the slice's last instant), so
the summary of each run says how often it happened. Imported by the root ``conftest.py`` (every
pytest run) and by ``scripts/handouts.py``.
"""

from __future__ import annotations

import math
import time
import warnings
from queue import Empty

SLICE_S = 0.25


#: The warnings' category is a builtin one: pytest-xdist sends each warning to the controller by its
#: class's module and name, and a class of this module's could not be found there by that name.
MISSED_WAKE_UP = "MissedWakeUp"


def _sliced_get_msg():
    async def get_msg(self, timeout: float | None = None):
        """Get a message, polling in slices of ``SLICE_S`` until ``timeout`` (None: no limit)."""
        assert self.socket is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            slice_s = SLICE_S if left is None else min(SLICE_S, left)
            started = time.monotonic()
            # whole milliseconds, rounded up: a slice rounded down ended before the deadline (a fresh
            # clone's make test: the timeout test saw Empty after 0.29993 s of a 0.3 s timeout)
            ready = await self.socket.poll(math.ceil(slice_s * 1000))
            if ready:
                if slice_s > 0 and time.monotonic() - started >= slice_s:
                    warnings.warn(f"{MISSED_WAKE_UP}: the notebook client's poll did not wake for a zmq "
                                  f"message; found at the end of a {slice_s:g} s slice (unpatched: at the "
                                  f"cell timeout)", RuntimeWarning, stacklevel=2)
                return await self._recv()
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty

    return get_msg


def install() -> bool:
    """Patch the notebook client's channels (once per process); False where Jupyter is missing."""
    try:
        from jupyter_client.channels import AsyncZMQSocketChannel
    except ImportError:  # no Jupyter in this environment: nothing to patch
        return False
    AsyncZMQSocketChannel.get_msg = _sliced_get_msg()
    return True
