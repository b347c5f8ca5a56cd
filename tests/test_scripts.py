"""The helper scripts: stress.py runs a command beside busy processes and always stops them."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

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


# -- quota.py: a command inside a CPU quota -------------------------------------------------------
def run_quota(*args, timeout=60):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "quota.py"), *args],
                          capture_output=True, text=True, timeout=timeout)


def quota_possible() -> bool:
    probe = run_quota("--cpus", "1", "--", sys.executable, "-c", "pass")
    return probe.returncode == 0


def test_quota_refuses_nonsense_with_the_fix():
    assert "give a command after --" in run_quota("--cpus", "1").stderr
    done = run_quota("--cpus", "0", "--", "true")
    assert done.returncode == 2 and "--cpus must be above 0 (e.g. 1 or 0.5)" in done.stderr


def test_quota_caps_the_command_and_its_children_and_leaves_no_group():
    if not quota_possible():
        pytest.skip("no CPU quota group can be made here (needs Linux and root): "
                    + run_quota("--", "true").stderr.strip())
    # The command sees half a CPU through helpers.cpu_limits (its own cgroup), and so does its child.
    child = "import helpers.cores as c; print(c.effective_cores())"
    probe = ("import subprocess, sys; import helpers; print(helpers.effective_cores()); "
             f"print(subprocess.run([sys.executable, '-c', {child!r}],"
             " capture_output=True, text=True).stdout.strip()); sys.exit(4)")
    done = run_quota("--cpus", "0.5", "--", sys.executable, "-c", probe, timeout=120)
    assert done.returncode == 4, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1:3] == ["0.5", "0.5"], done.stdout
    assert "throttled in" in lines[-1]
    group = lines[0].split("cgroup ")[1].split()[1].rstrip(")")
    assert not Path(group).exists()  # removed afterwards


# -- leftovers.py: make test fails when a run leaves something behind ---------------------------------
def run_leftovers(code: str):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "leftovers.py"), "--grace-s", "1", "--",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_leftovers_passes_a_clean_command_on_with_its_exit_status():
    done = run_leftovers("import os, sys, tempfile\n"
                         "with tempfile.TemporaryDirectory() as d:\n"
                         "    assert d.startswith(os.environ['TMPDIR'])\n"
                         "sys.exit(4)")
    assert done.returncode == 4, done.stderr
    assert "left these behind" not in done.stderr


@pytest.mark.skipif(not Path("/proc").is_dir() or not Path("/dev/shm").is_dir(), reason="needs Linux")
def test_leftovers_finds_a_folder_a_detached_process_and_a_segment_and_removes_them():
    # The detached process carries a tag of its own: other tests running beside this one (make test
    # runs three at a time) start `time.sleep(60)` children too (one of theirs could match the last
    # assertion, found by the command line alone).
    tag = f"dllab-leftovers-test-{uuid.uuid4().hex}"
    code = ("import os, subprocess, sys, tempfile\n"
            "tempfile.mkdtemp(prefix='pymp-')\n"
            "tempfile.mkdtemp(prefix='pytest-of-')\n"  # pytest's own, kept by design
            "os.mkdir(os.path.join(tempfile.gettempdir(), 'torchinductor_me'))\n"  # torch.compile's
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{tag}'],\n"
            "                 start_new_session=True)\n"
            "open(f'/dev/shm/torch_{os.getpid()}_0_0', 'wb').close()\n")
    done = run_leftovers(code)
    assert done.returncode == 1
    assert "in its temporary folder: pymp-" in done.stderr
    assert "pytest-of-" not in done.stderr and "torchinductor_" not in done.stderr
    assert "a process still running" in done.stderr and "time.sleep(60)" in done.stderr
    assert "a shared-memory segment: /dev/shm/torch_" in done.stderr
    assert not [p for p in psutil.process_iter(["cmdline"]) if tag in (p.info["cmdline"] or [])]
    assert not [p for p in Path("/dev/shm").glob("torch_*_0_0")]


@pytest.mark.skipif(not Path("/proc").is_dir() or not Path("/dev/shm").is_dir(), reason="needs Linux")
def test_leftovers_leaves_alone_a_segment_of_a_program_running_beside_the_command():
    # A DataLoader worker beside the run (this test process stands in for it) holds a segment for a
    # moment between creating and unlinking it: removing it made that worker drop a batch for good.
    beside = Path(f"/dev/shm/torch_{os.getpid()}_0_7")
    try:
        done = run_leftovers(f"open({str(beside)!r}, 'wb').close()\n")
        assert done.returncode == 0, done.stderr
        assert beside.exists()
    finally:
        beside.unlink(missing_ok=True)


@pytest.mark.skipif(not Path("/proc").is_dir() or not Path("/dev/shm").is_dir(), reason="needs Linux")
def test_leftovers_leaves_alone_a_segment_a_program_beside_the_command_still_maps(tmp_path):
    # With the file_system strategy a batch the loop holds stays a named segment after its worker (its
    # maker) has exited; removing it made PyTorch abort the loop's process when it let the batch go
    # (CI: a pytest worker died, "Fatal Python error: Aborted"). This test process stands in for that
    # loop: it maps a segment named after an exited process, made while the command runs.
    exited = psutil.Popen(["true"])
    exited.wait()
    segment = Path(f"/dev/shm/torch_{exited.pid}_{os.getpid()}_9")
    started, go = tmp_path / "started", tmp_path / "go"
    run = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "leftovers.py"), "--grace-s", "1", "--", sys.executable, "-c",
         f"import os, time\nopen({str(started)!r}, 'w').close()\n"
         f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(segment, "w+b") as held:
            held.write(b"\0" * mmap.PAGESIZE)
            held.flush()
            with mmap.mmap(held.fileno(), mmap.PAGESIZE):
                go.touch()
                _out, err = run.communicate(timeout=60)
                assert run.returncode == 0, err
                assert segment.exists()
    finally:
        go.touch()
        run.wait(timeout=60)
        segment.unlink(missing_ok=True)


def test_leftovers_names_a_left_probe_file_as_python_s_temporary_folder_probe():
    done = run_leftovers("import os, tempfile\n"
                         "open(os.path.join(tempfile.gettempdir(), 'nexgf1h_'), 'wb').close()\n"
                         "open(os.path.join(tempfile.gettempdir(), 'notes.txt'), 'wb').close()\n")
    assert done.returncode == 1
    lines = {line.split()[0]: line for line in done.stderr.splitlines() if line.startswith("  ")
             for line in [line.strip().removeprefix("in its temporary folder: ")]}
    assert "probe of the temporary folder" in lines["nexgf1h_"]
    assert "probe" not in lines["notes.txt"]


def test_leftovers_refuses_a_missing_command():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "leftovers.py")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "give the command to run after --" in done.stderr


# -- run_notebooks.py: the GPU machine's runner ----------------------------------------------------
def test_run_notebooks_reports_each_cell_and_a_failure(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# a"),
                                         nbformat.v4.new_code_cell("print('measured 7')"),
                                         nbformat.v4.new_code_cell("raise ValueError('premise failed')"),
                                         nbformat.v4.new_code_cell("print('never')")])
    path = tmp_path / "99_probe.ipynb"
    nbformat.write(nb, path)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_notebooks.py"), "--out", str(out),
                           "--timeout", "60", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    progress = (out / "progress.txt").read_text().splitlines()
    assert progress[0] == "99_probe.ipynb" and progress[1:3] == ["  [1] started", progress[2]]
    assert progress[2].endswith(" s") and progress[3] == "  [2] started" and len(progress) == 4
    report = (out / "notebooks.txt").read_text()
    assert "[1] measured 7" in report and "[2] ValueError: premise failed" in report and "never" not in report
    summary = json.loads((out / "summary.json").read_text())
    assert summary["99_probe.ipynb"]["status"].startswith("CellExecutionError")


def test_run_notebooks_names_the_choices_for_an_unknown_notebook(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_notebooks.py"), "--out", str(tmp_path),
                           "42"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "'42' names 0 notebooks; give one of: 00, 00b, 01" in done.stderr
