"""The workaround for the notebook client's missed zmq wake-ups (scripts/nbclient_poll.py), installed
by the root conftest and by scripts/handouts.py."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty

import pytest

ROOT = Path(__file__).resolve().parent.parent


def poll_module():
    """scripts/nbclient_poll.py, loaded afresh (a test may change its SLICE_S)."""
    path = ROOT / "scripts" / "nbclient_poll.py"
    spec = importlib.util.spec_from_file_location("dllab_nbclient_poll", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MissedSocket:
    """A socket whose reply is there from ``ready_at`` on, but whose poll does not wake for it: it
    returns at its timeout and finds it then, as pyzmq does after a missed edge."""

    def __init__(self, ready_at: float):
        self.ready_at, self.polls = ready_at, []

    async def poll(self, timeout_ms):
        self.polls.append(timeout_ms)
        await asyncio.sleep(timeout_ms / 1000)
        return 1 if time.monotonic() >= self.ready_at else 0


class Channel:
    def __init__(self, socket):
        self.socket = socket

    async def _recv(self):
        return {"msg": "reply"}


def test_a_missed_wake_up_costs_a_slice_not_the_timeout(monkeypatch):
    poll = poll_module()
    monkeypatch.setattr(poll, "SLICE_S", 0.05)
    get_msg = poll._sliced_get_msg()
    channel = Channel(MissedSocket(ready_at=time.monotonic() + 0.1))
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match=poll.MISSED_WAKE_UP):
        assert asyncio.run(get_msg(channel, timeout=30)) == {"msg": "reply"}
    assert time.monotonic() - start < 10  # unpatched: one poll of 30 s


def test_no_reply_still_fails_at_the_timeout_not_before(monkeypatch):
    poll = poll_module()
    monkeypatch.setattr(poll, "SLICE_S", 0.05)
    get_msg = poll._sliced_get_msg()
    channel = Channel(MissedSocket(ready_at=float("inf")))
    start = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(get_msg(channel, timeout=0.3))
    assert 0.3 <= time.monotonic() - start < 10
    assert all(ms <= 50 for ms in channel.socket.polls)


def test_the_notebook_client_uses_the_sliced_poll():
    from jupyter_client.asynchronous.client import AsyncKernelClient

    channel = AsyncKernelClient.shell_channel_class.default_value
    assert channel.get_msg.__qualname__.startswith("_sliced_get_msg")


def test_handouts_use_the_sliced_poll_too():
    # make handouts runs notebooks with nbclient outside pytest: unpatched, one missed wake-up held
    # make test's handout test (a subprocess limited to 600 s) past its limit, the kernel idle.
    probe = ("import sys; sys.path.insert(0, 'scripts'); import handouts; "
             "from jupyter_client.asynchronous.client import AsyncKernelClient as C; "
             "print(C.shell_channel_class.default_value.get_msg.__qualname__)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("_sliced_get_msg")
