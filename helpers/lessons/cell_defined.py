"""Notebook 20 · a Dataset defined in a notebook cell: the learner's cells run in a child kernel under
each start method, the fixes, what Python 3.14's default (``forkserver``) costs when it works, and
the lesson's checks."""

from __future__ import annotations

import math
import multiprocessing
import re
import time
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import DataLoader

from ..classroom.checks import Check, at_least, holds, premise_failed
from ..data import child_kernel as cells
from ..data.child_kernel import CellRun, ChildKernel, pickled_names  # noqa: F401 (notebook 20 reads it here)
from ..data.workers import worker_memory
from ..timing import torch_internals
from .startup import mean

#: The start method the lesson's single runs use: Python 3.14's default on Linux.
DEFAULT_314 = "forkserver"

#: The parts a cell defines that a spawned worker looks up by name (the lambda fails before that).
BY_NAME_ROWS = ("Dataset class in a cell", "worker_init_fn in a cell")
LAMBDA_ROW = "lambda collate_fn in a cell"
MODULE_ROW = "all three from squares.py"

#: How the lab's own tools meet the same loader, in the child kernel.
TOOLS = {
    "helpers.record": "helpers.record(DataLoader(Squares(), batch_size=4, num_workers=2, "
                      "multiprocessing_context=method), progress=False)",
    "helpers.diagnose": "helpers.diagnose(DataLoader(Squares(), batch_size=4, num_workers=2, "
                        "multiprocessing_context=method), steps=8, progress=False)",
}


def shown_method(methods: list[str]) -> str:
    """The start method the lesson's single runs and its vote use: forkserver (Python 3.14's default on
    Linux) where there is one, else spawn (Windows), else the last there is."""
    return next((m for m in (DEFAULT_314, "spawn") if m in methods), methods[-1])


def loader_cell(call: str, method: str, workers: int | None = None) -> str:
    """A cell that builds ``call`` under ``method`` and prints its batches."""
    if workers == 0:  # the main process: no start method to name
        call = call.replace("num_workers=2, multiprocessing_context=method", "num_workers=0")
    return f"method = {method!r}\nloader = {call}\n{cells.SHOW}"


@dataclass
class CellLesson:
    """Everything the child kernel ran and showed."""

    methods: list[str]
    kernel: dict[str, Any] = field(default_factory=dict)  #: its Python, default method, threads
    table: dict[tuple[str, str], CellRun] = field(default_factory=dict)  #: (row, method) -> run
    guard: CellRun | None = None
    edited: dict[str, CellRun] = field(default_factory=dict)  #: after an edit, no reload: where -> run
    reloaded: dict[str, CellRun] = field(default_factory=dict)  #: after reload: old/new dataset runs
    tools: dict[tuple[str, str], CellRun] = field(default_factory=dict)  #: (tool, method) -> run

    def outcome(self, run: CellRun | None) -> str:
        """"works", "fails in the kernel" (nothing started), "workers die" or "hangs"."""
        if run is None:
            return "not run"
        if run.status == "hung":
            return "hangs"
        if run.ok:
            return "works"
        return "workers die" if run.worker_error() else "fails in the kernel"


def run_the_cells(methods: list[str], timeout_s: float = 120.0) -> CellLesson:
    """Run the learner's cells in one fresh kernel: the failure table (each row under each method), the
    guard, an edit of squares.py without and with ``importlib.reload``, and the lab's tools."""
    lesson = CellLesson(methods=list(methods))
    default = shown_method(methods)
    with ChildKernel(timeout_s=timeout_s) as kernel:
        info = kernel.run("import multiprocessing, sys, threading, __main__\n"
                          "print(sys.version.split()[0], multiprocessing.get_start_method(), "
                          "threading.active_count(), hasattr(__main__, '__file__'), "
                          "getattr(__main__, '__spec__', None) is not None)")
        version, start, threads, has_file, has_spec = info.stream.split()
        lesson.kernel = {"python": version, "default_method": start, "threads": int(threads),
                         "main_has_file": has_file == "True", "main_has_spec": has_spec == "True"}
        for code in (cells.CELL_DEFINITIONS, cells.CELL_MODULE, "import squares"):
            _must_work(kernel.run(code))
        for method in methods:
            for row, call in cells.ROWS.items():
                lesson.table[row, method] = kernel.run(loader_cell(call, method))
        guarded = "spawn" if "spawn" in methods else default  # the start method the guard is for
        lesson.guard = kernel.run(f"method = {guarded!r}\n" + cells.CELL_GUARD)
        # an edit of squares.py, without reloading it: a dataset made before the edit
        _must_work(kernel.run("old = squares.Squares()"))
        _must_work(kernel.run(cells.CELL_MODULE_EDITED))
        old = "DataLoader(old, batch_size=4, num_workers=2, multiprocessing_context=method)"
        lesson.edited["main process"] = kernel.run(loader_cell(old, default, workers=0))
        for method in dict.fromkeys(["fork", default]):
            if method in methods:
                lesson.edited[method] = kernel.run(loader_cell(old, method))
        _must_work(kernel.run(cells.CELL_RELOAD))
        lesson.reloaded["made before the reload"] = kernel.run(loader_cell(old, default))
        new = old.replace("DataLoader(old", "DataLoader(dataset")
        lesson.reloaded["made again"] = kernel.run(loader_cell(new, default))
        _must_work(kernel.run("import helpers"))
        for method in methods:
            if method != "fork":
                for tool, call in TOOLS.items():
                    lesson.tools[tool, method] = kernel.run(f"method = {method!r}\n{call}")
    return lesson


def _must_work(run: CellRun) -> None:
    if not run.ok:
        raise RuntimeError(f"the child kernel could not run a setup cell ({run.outcome()}):\n{run.code}\n"
                           "Check that `make lab` installed the lab (jupyter_client, ipykernel) in this "
                           "kernel.")


def short(run: CellRun) -> str:
    """A table cell: the outcome, the time, and the worker's error where one printed it."""
    if run.status == "hung":
        return run.outcome()
    if run.ok:
        return f"works ({run.seconds:.1f} s)"
    name, value = run.error or ("", "")
    text = f"{name}: {re.sub(r' at 0x[0-9a-f]+', '', value)} ({run.seconds:.1f} s)"
    worker = run.worker_error()
    return text + (f"; each worker: {worker}" if worker else "")


def edit_rows(lesson: CellLesson) -> list[list[str]]:
    """Section 3's table: where a dataset ran after the edit of squares.py, and what it gave."""
    where = {"main process": "the kernel itself (num_workers=0)", "made before the reload":
             "after the reload: the dataset made before it", "made again": "after the reload: made again"}
    runs = {**lesson.edited, **lesson.reloaded}
    return [[where.get(k, f"{k} workers"), run.stream.strip() if run.ok else short(run)]
            for k, run in runs.items()]


def failure_rows(lesson: CellLesson) -> list[list[str]]:
    """The failure table: what the cell defines × start method."""
    return [[row, *(short(lesson.table[row, m]) for m in lesson.methods)] for row in cells.ROWS]


def outcome_cells(lesson: CellLesson) -> dict[tuple[str, str], tuple[str, str]]:
    """For the figure: (row, method) -> (outcome, a short label of what the cell ended with)."""
    out = {}
    for (row, method), run in lesson.table.items():
        outcome = lesson.outcome(run)
        if outcome == "works":
            label = f"works · {run.seconds:.1f} s"
        elif outcome == "workers die":
            worker = run.worker_error().split(": ", 1)[-1].split(" on <")[0]
            label = f"each worker: {worker} · {(run.error or ('error',))[0]} after {run.seconds:.1f} s"
        elif outcome == "fails in the kernel":
            label = f"{(run.error or ('error',))[0]} in the kernel, no worker started · {run.seconds:.1f} s"
        else:
            label = run.outcome()
        out[row, method] = (outcome, label)
    return out


# -- what the default costs when it works -------------------------------------------------------------
@dataclass
class StartupRun:
    """One loader over a few epochs: the first batch of each epoch, and its workers' own memory."""

    method: str
    persistent: bool
    first_batch_s: list[float]
    uss: list[int]  #: each worker's USS at the first batch of epoch 1 (bytes)


def startup_run(dataset: Any, method: str, *, persistent: bool, epochs: int = 2, batches: int = 4,
                batch_size: int = 8) -> StartupRun:
    """Time from ``iter(loader)`` to the first batch in each epoch (the workers' start-up, or their
    resumption), and measure each worker's USS at the first batch of the first epoch."""
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=2, persistent_workers=persistent,
                        sampler=range(batches * batch_size), multiprocessing_context=method)
    first, uss = [], []
    for epoch in range(epochs):
        start = time.perf_counter()
        iterator = iter(loader)
        next(iterator)
        first.append(time.perf_counter() - start)
        if epoch == 0:
            uss = [w.uss for w in worker_memory(iterator)]
        for _ in iterator:
            pass
        del iterator
    torch_internals.drop_persistent_iterator(loader)
    return StartupRun(method, persistent, first, uss)


Costs = dict[tuple[str, bool, bool], StartupRun]  #: (method, persistent, with the index) -> run


def startup_costs(methods: list[str], names: int) -> tuple[Costs, int, int]:
    """The same loader over an index of ``names`` file names, per start method: two epochs without and
    with ``persistent_workers``; and, for fork and forkserver, a worker without the index (the same
    dataset holding nothing). Returns the runs by (method, persistent, with the index), the index's
    size in this process and the bytes each worker is sent at each start (pickled)."""
    from ..data.copy_on_read import PathDataset, make_paths, sent_bytes

    paths = make_paths(names)
    index, bare = PathDataset(paths, "list"), PathDataset(paths, "none")
    runs = {}
    for method in methods:
        for persistent in (False, True):
            runs[method, persistent, True] = startup_run(index, method, persistent=persistent)
        if method in ("fork", DEFAULT_314):
            runs[method, False, False] = startup_run(bare, method, persistent=False, epochs=1)
    return runs, index.data_bytes(), sent_bytes(index)


def cost_methods(methods: list[str]) -> list[str]:
    """The start methods section 4 times: all of them at full size; in quick mode spawn is left out
    where forkserver is there (both import torch in each worker; notebook 05 times both)."""
    from ..config import is_smoke

    return [m for m in methods if not (is_smoke() and m == "spawn" and DEFAULT_314 in methods)]


def cost_rows(costs: Costs) -> list[list[str]]:
    """Section 4's table: method, persistence, the first batch of each epoch, the workers' USS."""
    return [[method, ("yes" if persistent else "no") + ("" if indexed else " (no index)"),
             f"{run.first_batch_s[0]:.3f}",
             f"{run.first_batch_s[1]:.3f}" if len(run.first_batch_s) > 1 else "—",
             " · ".join(f"{u / 2**20:.0f}" for u in run.uss)]
            for (method, persistent, indexed), run in costs.items()]


def python314_rows(lesson: CellLesson, costs: Costs, index_bytes: int,
                   sent_bytes: int) -> list[list[str]]:
    """Section 5: fork (Linux's default to Python 3.13) against forkserver (3.14), each cell measured in
    this run, with the one-line change for each row."""
    def cell(row: str, method: str) -> str:
        run = lesson.table.get((row, method))
        if run is None:
            return "not on this platform"
        return f"{lesson.outcome(run)} ({run.seconds:.1f} s)"

    def epoch2(method: str) -> str:
        run = costs.get((method, False, True))
        return "not on this platform" if run is None else f"{run.first_batch_s[-1]:.2f} s"

    def own(method: str) -> str:
        run, bare = costs.get((method, False, True)), costs.get((method, False, False))
        if run is None or bare is None:
            return "not on this platform"
        extra = (mean(run.uss) - mean(bare.uss)) / 2**20
        return f"{extra:.0f} MiB (the index: {index_bytes / 2**20:.0f} MiB)"

    fork, new = "fork", DEFAULT_314
    return [
        ["the default start method on Linux", "fork", "forkserver",
         'multiprocessing_context="fork" on a loader (where safe: section 3)'],
        ["a Dataset defined in a cell", cell(BY_NAME_ROWS[0], fork), cell(BY_NAME_ROWS[0], new),
         "move it to a module beside the notebook: %%writefile squares.py, import squares"],
        ["a worker_init_fn defined in a cell", cell(BY_NAME_ROWS[1], fork), cell(BY_NAME_ROWS[1], new),
         "the same module"],
        ["a lambda as collate_fn", cell(LAMBDA_ROW, fork), cell(LAMBDA_ROW, new),
         "def it at the top level of that module"],
        ["workers' start-up, every epoch", epoch2(fork), epoch2(new), "persistent_workers=True"],
        ["the dataset sent to each worker, every start", "nothing: inherited",
         f"{sent_bytes / 2**20:.1f} MiB, pickled", "persistent_workers=True; an index in an array (12)"],
        ["a worker's own memory for the index, at its first batch", own(fork), own(new),
         "an index in a NumPy or Arrow array (12)"],
    ]


# -- the lesson's checks --------------------------------------------------------------------------------
CLAIMS = {
    "status_check": "forkserver: the loop learns of a dead worker only at its status check, every "
                    "5 s (a whole number of 5 s, + 0.8 s at most)",
    "startup": "{method} workers start far slower than fork workers, at every epoch without "
               "persistent_workers (5× or more)",
}


def checks(lesson: CellLesson, costs: Costs, index_bytes: int) -> list[Check]:
    """``costs``: (method, persistent, with the index) -> run; ``index_bytes``: the index's size in the
    kernel.

    Not checks, shown by the notebook's tables: which rows work under which start method (fork copies
    the process; the others pickle by qualified name, and a lambda does not pickle), what an edit or a
    reload reaches (Python's import and pickle semantics), what persistent workers spare epoch 2
    (PyTorch keeps them alive), and each worker's memory for the index (fork shares it until written;
    the others unpickle their own copy)."""
    out: list[Check] = []
    pickled = [m for m in lesson.methods if m != "fork"]
    if DEFAULT_314 in pickled:
        died = [lesson.table[row, DEFAULT_314] for row in BY_NAME_ROWS]
        if any(lesson.outcome(r) != "workers die" for r in died):
            out.append(premise_failed(CLAIMS["status_check"], "; ".join(short(r) for r in died),
                                      "a forkserver worker did not die in both rows",
                                      id="20.forkserver.dead_worker_found_at_status_check"))
        else:
            out.append(holds(CLAIMS["status_check"], all(on_status_check(r.seconds) for r in died),
                             ", ".join(f"{r.seconds:.1f} s" for r in died),
                             id="20.forkserver.dead_worker_found_at_status_check",
                             inputs=[r.seconds for r in died]))
    out.extend(cost_checks(costs, index_bytes))
    return out


#: How often the loop checks its workers while it waits for a batch (s): torch's MP_STATUS_CHECK_INTERVAL.
STATUS_CHECK_S = torch_internals.STATUS_CHECK_INTERVAL_S


def on_status_check(seconds: float, slack_s: float = 0.8) -> bool:
    """Whether a failure after ``seconds`` came at one of the loop's status checks: a whole number (at
    least one) of :data:`STATUS_CHECK_S` after the wait began, plus the cell's own setup (``slack_s``)."""
    checks_passed = math.floor(seconds / STATUS_CHECK_S)
    return checks_passed >= 1 and seconds - checks_passed * STATUS_CHECK_S <= slack_s


def cost_checks(costs: Costs, index_bytes: int) -> list[Check]:
    """The start-up claim (see :data:`CLAIMS`). ``index_bytes``: the notebook's to show (the index's
    memory in each worker is its table's, not a check)."""
    out: list[Check] = []
    fork = costs.get(("fork", False, True))
    for (method, persistent, indexed), run in costs.items():
        if method == "fork" or persistent or not indexed:
            continue
        claim = CLAIMS["startup"].format(method=method)
        if fork is None:
            out.append(premise_failed(claim, "", "fork is not available on this platform",
                                      id="20.start.slower_than_fork_every_epoch"))
        else:
            pairs = list(zip(run.first_batch_s, fork.first_batch_s, strict=False))
            ratio = min(a / max(b, 1e-3) for a, b in pairs)
            out.append(at_least(claim, ratio, 5.0, unit="×",
                                what="the smaller of the epochs' ratios: "
                                     + ", ".join(f"{a:.2f} vs {b:.3f} s" for a, b in pairs),
                                id="20.start.slower_than_fork_every_epoch"))
    return out


def available_methods() -> list[str]:
    """fork, spawn and forkserver, where this platform has them."""
    return [m for m in ("fork", "spawn", "forkserver") if m in multiprocessing.get_all_start_methods()]
