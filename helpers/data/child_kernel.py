"""Notebook 20 · a Dataset defined in a notebook cell: the learner's cells, run for real in a child
Jupyter kernel.

A class or function defined in a notebook cell lives in the kernel's ``__main__``, a module with
no file. Workers started by ``spawn`` or ``forkserver`` receive the loader's dataset,
``collate_fn`` and ``worker_init_fn`` pickled *by name* (``__main__.Squares``) and look the name up
in their own ``__main__``, which has none of it. The lesson notebook keeps its own code in
``helpers`` (it runs under every start method); the cells below are the learner's, run in a
kernel of their own (:class:`ChildKernel`) exactly as a learner's notebook runs them. Each begins
with ``# runs in a child kernel``; notebook 20 shows them, and ``tests/test_patterns.py`` keeps its
copies equal to these.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

#: The learner's first cell: a Dataset, a collate_fn and a worker_init_fn, defined in the notebook.
CELL_DEFINITIONS = '''\
# runs in a child kernel: a learner's cell
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i * i])


stack = lambda samples: torch.stack(samples)


def seed_worker(worker_id):
    torch.manual_seed(1234 + worker_id)
'''

#: The fix: the same code in a module beside the notebook, written from a cell, then imported.
CELL_MODULE = '''\
%%writefile squares.py
# runs in a child kernel: the same code, in a module beside the notebook
import torch
from torch.utils.data import Dataset


class Squares(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i * i])


def stack(samples):
    return torch.stack(samples)


def seed_worker(worker_id):
    torch.manual_seed(1234 + worker_id)
'''

#: The module edited (each square times ten), written again without reloading it.
CELL_MODULE_EDITED = CELL_MODULE.replace("return torch.tensor([i * i])", "return torch.tensor([i * i * 10])")

#: One loader per row of the failure table: what is taken from the cell, the rest from squares.py.
ROWS = {
    "Dataset class in a cell": ("DataLoader(Squares(), batch_size=4, num_workers=2, "
                                "multiprocessing_context=method)"),
    "lambda collate_fn in a cell": ("DataLoader(squares.Squares(), batch_size=4, num_workers=2, "
                                    "multiprocessing_context=method, collate_fn=stack)"),
    "worker_init_fn in a cell": ("DataLoader(squares.Squares(), batch_size=4, num_workers=2, "
                                 "multiprocessing_context=method, worker_init_fn=seed_worker)"),
    "all three from squares.py": ("DataLoader(squares.Squares(), batch_size=4, num_workers=2, "
                                  "multiprocessing_context=method, collate_fn=squares.stack, "
                                  "worker_init_fn=squares.seed_worker)"),
}

#: What a loader's cell prints: its batches, flat.
SHOW = "print([batch.flatten().tolist() for batch in loader])"
#: ...for squares.py as first written, and as edited (each square times ten), batches of 4.
SQUARES = str([[i * i for i in range(k, k + 4)] for k in (0, 4)])
EDITED = str([[i * i * 10 for i in range(k, k + 4)] for k in (0, 4)])

#: While editing squares.py: reload it after each edit, and make the dataset again.
CELL_RELOAD = '''\
# runs in a child kernel: after each edit of squares.py
import importlib

importlib.reload(squares)
dataset = squares.Squares()  # a dataset made before the reload no longer pickles
'''

#: What does not help: the guard a script needs under spawn. In a kernel ``__name__`` is "__main__".
CELL_GUARD = '''\
# runs in a child kernel: the guard a script needs under spawn
if __name__ == "__main__":
    loader = DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context=method)
    print([batch.flatten().tolist() for batch in loader])
'''


@dataclass
class CellRun:
    """One cell run in a child kernel: how it ended, in how long, and what it showed."""

    code: str
    status: str  #: "ok", "error", or "hung" (stopped by the timeout, then interrupted)
    seconds: float
    stream: str = ""  #: what the cell printed (stdout and stderr, the workers' included)
    error: tuple[str, str] | None = None  #: (name, value) of the exception the cell ended with
    value: str = ""  #: the cell's result, as text
    log: str = ""  #: what the kernel's own stderr and stdout got meanwhile (its log, a terminal's view)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def worker_error(self) -> str:
        """The last line of the first traceback a worker printed (``AttributeError: Can't get ...``)."""
        lines = [line for line in (self.stream + self.log).splitlines()
                 if "Error: " in line and not line.startswith(" ")]
        return lines[0] if lines else ""

    def outcome(self) -> str:
        """The cell's outcome in a few words: its output, or the error it ended with."""
        if self.status == "hung":
            return f"no answer in {self.seconds:.0f} s: stopped"
        if self.error is None:
            return (self.stream.strip().splitlines() or [self.value or "ok"])[-1]
        name, value = self.error
        return f"{name}: {value}"


@dataclass
class ChildKernel:
    """A fresh Jupyter kernel (this environment's ``python3``) in a temporary folder of its own.

    Use it as a context manager: on exit the kernel shuts down, every process it started (workers,
    a forkserver, the resource tracker) is waited for and killed if still there, and the folder
    (the kernel's connection file, its log, the modules its cells wrote) is removed. ``log`` then
    holds the kernel's own stdout and stderr: what a terminal running ``jupyter lab`` shows."""

    timeout_s: float = 120.0
    folder: str = ""
    log: str = ""
    _manager: Any = None
    _client: Any = None
    _log_file: Any = None

    def __enter__(self) -> ChildKernel:
        from jupyter_client.manager import KernelManager

        self.folder = tempfile.mkdtemp(prefix="dllab-kernel-")
        self._log_file = open(os.path.join(self.folder, "kernel.log"), "w")  # noqa: SIM115 (closed on exit)
        self._manager = KernelManager(kernel_name="python3",
                                      connection_file=os.path.join(self.folder, "kernel.json"))
        try:
            # as a learner's kernel: under pytest, ipykernel would not forward the workers' output to the
            # cell (it leaves fd 1 and 2 alone when PYTEST_CURRENT_TEST is set)
            env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
            self._manager.start_kernel(cwd=self.folder, stdout=self._log_file, stderr=self._log_file, env=env)
            self._client = self._manager.client()
            self._client.start_channels()
            self._client.wait_for_ready(timeout=self.timeout_s)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def run(self, code: str, timeout_s: float | None = None) -> CellRun:
        """Run ``code`` as one cell; a cell that does not finish within ``timeout_s`` is interrupted
        and reported as "hung"."""
        stream: list[str] = []
        error: list[tuple[str, str]] = []
        value: list[str] = []

        def output(message: dict) -> None:
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                stream.append(content["text"])
            elif kind == "error":
                error.append((content["ename"], content["evalue"]))
            elif kind == "execute_result":
                value.append(content["data"].get("text/plain", ""))

        logged = os.path.getsize(self._log_file.name)
        start = time.perf_counter()
        try:
            self._client.execute_interactive(code, output_hook=output, timeout=timeout_s or self.timeout_s)
            status = "error" if error else "ok"
        except TimeoutError:
            status = "hung"
            self._manager.interrupt_kernel()
            self._drain(10.0)
        seconds = time.perf_counter() - start
        with open(self._log_file.name, errors="replace") as log:
            log.seek(logged)
            new = log.read()
        run = CellRun(code, status, seconds, "".join(stream), error[0] if error else None, "".join(value),
                      new)
        return run

    def _drain(self, seconds: float) -> None:
        """Read the interrupted cell's last messages, so the next cell's are its own."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                message = self._client.get_iopub_msg(timeout=max(0.0, end - time.monotonic()))
            except Exception:  # queue.Empty: nothing more came
                return
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return

    def __exit__(self, *exc: Any) -> None:
        import psutil

        descendants: list[psutil.Process] = []
        process = getattr(getattr(self._manager, "provisioner", None), "process", None)
        if process is not None:
            try:
                descendants = psutil.Process(process.pid).children(recursive=True)
            except psutil.Error:
                pass
        if self._client is not None:
            # The lab's clean shutdown (helpers.system), installed only now so that the learner's cells ran in
            # a kernel as it comes: without it ipykernel waits for the forkserver and the resource tracker,
            # is stopped by a signal, and leaves multiprocessing's pymp-* folder behind.
            try:
                self._client.execute_interactive(
                    "import helpers.system as _lab_system\n_lab_system.reap_children_at_kernel_shutdown()",
                    store_history=False, timeout=60)
            except Exception:  # a kernel that no longer answers: the kill below still ends it
                pass
            self._client.stop_channels()
        if self._manager is not None and self._manager.has_kernel:
            self._manager.shutdown_kernel(now=False)
        _, alive = psutil.wait_procs(descendants, timeout=5)
        for leftover in alive:
            try:
                leftover.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=5)
        if self._log_file is not None:
            self._log_file.close()
            with open(self._log_file.name, errors="replace") as log:
                self.log = log.read()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def pickled_names(obj: Any) -> list[str]:
    """The module-qualified names ``obj``'s pickle asks for as it is unpickled: what a worker imports and
    looks up (recorded by the unpickler's ``find_class``, which does both)."""
    import io
    import pickle

    names: list[str] = []

    class Recorder(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            names.append(f"{module}.{name}")
            return super().find_class(module, name)

    Recorder(io.BytesIO(pickle.dumps(obj))).load()
    return names
