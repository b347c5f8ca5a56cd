"""helpers.free_cores (the CPU busy processes actually get) and helpers.torch_threads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import helpers


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_free_cores_is_at_most_the_processes_started(start_method):
    got = helpers.free_cores(1, seconds=0.2, start_method=start_method)
    assert 0.3 < got <= 1.05, got


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_a_competing_program_takes_cores_away():
    alone = helpers.free_cores(2, seconds=0.4)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        shared = helpers.free_cores(2, seconds=0.4)
    finally:
        hog.kill()
        hog.wait()
    # Three busy processes on two cores: ours get about 4/3 instead of about 2.
    assert shared < alone - 0.25, (alone, shared)


@pytest.mark.parametrize("processes, seconds", [(0, 0.1), (1, 0.0)])
def test_free_cores_refuses_nonsense(processes, seconds):
    with pytest.raises(ValueError, match="processes >= 1 and seconds > 0"):
        helpers.free_cores(processes, seconds)


def test_torch_threads_sets_and_restores_even_on_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with helpers.torch_threads(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n >= 1"):
        with helpers.torch_threads(0):
            pass
