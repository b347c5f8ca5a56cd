"""Notebook 20's child kernel: a real Jupyter kernel runs a learner's cells, and leaves nothing behind;
the lab's own tools, called from such a kernel on a Dataset defined in one of its cells, stop with the fix
named before any worker starts (under spawn and forkserver) and run the loader under fork."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from helpers.data import child_kernel
from helpers.data.child_kernel import ChildKernel
from helpers.lessons import cell_defined


def test_record_and_diagnose_name_the_fix_for_a_cell_dataset_in_a_real_kernel():
    with ChildKernel(timeout_s=120) as kernel:
        assert kernel.run(child_kernel.CELL_DEFINITIONS).ok
        assert kernel.run("import helpers").ok
        for method in ("spawn", "forkserver"):
            for tool, call in cell_defined.TOOLS.items():
                run = kernel.run(f"method = {method!r}\n{call}")
                assert run.error is not None and run.error[0] == "NotImportable", (tool, method, run)
                message = run.error[1]
                assert "defined in a notebook cell (Squares)" in message
                assert "top level of a .py file" in message
                assert f"start by {method}" in message
                # refused before any worker started: no worker's traceback, in the cell or in the log
                assert "Can't get attribute" not in run.stream + run.log, (tool, method)
        # under fork the cell's Dataset is inherited: the lab's record runs it
        forked = kernel.run("method = 'fork'\n"
                            "timeline = helpers.record(DataLoader(Squares(), batch_size=4, num_workers=2, "
                            "multiprocessing_context=method), progress=False)\nprint(len(timeline.batches))")
        assert forked.ok and forked.stream.strip() == "2", forked


def test_a_child_kernel_leaves_no_process_or_file_behind():
    temporary = Path(tempfile.gettempdir())
    before = set(temporary.glob("pymp-*"))
    with ChildKernel(timeout_s=60) as kernel:
        folder = kernel.folder
        started = kernel.run("import multiprocessing, os\n"
                             "server = multiprocessing.get_context('forkserver')\n"
                             "p = server.Process(target=os.getpid)\np.start(); p.join()\n"
                             "print(os.getpid())")
        assert started.ok, started
        kernel_pid = int(started.stream.split()[-1])
        family = [kernel_pid, *(c.pid for c in psutil.Process(kernel_pid).children(recursive=True))]
        assert len(family) >= 2  # the kernel and at least the forkserver (and its resource tracker)
        assert os.path.isdir(folder)
    assert not os.path.exists(folder)
    alive = [pid for pid in family if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert alive == []
    # the kernel exited cleanly: multiprocessing removed its folder (a kernel stopped by a signal leaves it)
    deadline = time.monotonic() + 5
    while set(temporary.glob("pymp-*")) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(temporary.glob("pymp-*")) - before == set()


def test_a_cell_that_never_ends_is_stopped_and_the_kernel_goes_on():
    with ChildKernel(timeout_s=60) as kernel:
        run = kernel.run("import time\ntime.sleep(60)", timeout_s=1.5)
        assert run.status == "hung" and run.outcome().startswith("no answer in") and run.seconds < 15
        after = kernel.run("print(6 * 7)")
        assert after.ok and after.stream.strip() == "42"


@pytest.mark.parametrize("stream, log, expected", [
    ("AttributeError: Can't get attribute 'Squares' on <module '__main__'>\n", "", "workers die"),
    ("", "  File x\nAttributeError: Can't get attribute 'Squares'\n", "workers die"),
    ("", "", "fails in the kernel"),
])
def test_a_cells_outcome_reads_the_workers_error_from_the_cell_or_the_log(stream, log, expected):
    run = child_kernel.CellRun("", "error", 1.0, stream, ("RuntimeError", "worker exited"), log=log)
    assert cell_defined.CellLesson(methods=[]).outcome(run) == expected
