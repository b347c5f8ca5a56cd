"""The helper scripts: stress.py runs a command beside busy processes and always stops them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def test_stress_passes_the_exit_status_on_and_leaves_no_competitor():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    probe = "import psutil, sys; print(len(psutil.Process().parent().children())); sys.exit(3)"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "stress.py"), "--competitors", "2", "--",
                           sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "2 CPU-bound competitor(s)" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "3"  # the command saw 2 competitors beside it
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_stress_refuses_a_missing_command():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "stress.py"), "--competitors", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "give a command after --" in done.stderr
