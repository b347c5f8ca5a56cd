"""The root conftest's workaround for the notebook client's missed zmq wake-ups (see conftest.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path
from queue import Empty

import pytest

ROOT = Path(__file__).resolve().parent.parent


def root_conftest():
    spec = importlib.util.spec_from_file_location("dllab_root_conftest", ROOT / "conftest.py")
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
    conftest = root_conftest()
    monkeypatch.setattr(conftest, "SLICE_S", 0.05)
    get_msg = conftest._sliced_get_msg()
    channel = Channel(MissedSocket(ready_at=time.monotonic() + 0.1))
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match=conftest.MISSED_WAKE_UP):
        assert asyncio.run(get_msg(channel, timeout=30)) == {"msg": "reply"}
    assert time.monotonic() - start < 10  # unpatched: one poll of 30 s


def test_no_reply_still_fails_at_the_timeout_not_before(monkeypatch):
    conftest = root_conftest()
    monkeypatch.setattr(conftest, "SLICE_S", 0.05)
    get_msg = conftest._sliced_get_msg()
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
