"""Every private part of torch the lab touches, in one place, with a self-check.

The instrument (:func:`helpers.record`) needs a few things PyTorch does not expose:
the fetcher classes whose ``fetch`` it wraps in each worker, the main process's
fetcher when there are no workers, the function the pin thread uses, and a way to
shut down a loader's persistent workers. They are private: any torch release may
move them. The lab pins ``torch==2.14.1`` (``pyproject.toml``), which is what
protects them; :func:`self_check` fails loudly, naming what moved, if another torch
is installed. Notebook 00 and a unit test call it.

Notebook 18 also reads what ``torch.compile`` compiled (Dynamo's own record, in ``torch._dynamo``)
and marks a batch's dimension dynamic: :func:`compile_events`, :func:`reset_compiles`,
:func:`mark_batch_dynamic` (``torch._dynamo`` is imported only when they are called); and it keeps
torch's own log of recompiles (:class:`RecompileLog`: the logger ``TORCH_LOGS=recompiles`` writes to).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader


def _private(module: str, name: str) -> Any:
    """``module.name``, or None where this torch moved it: :func:`self_check` then names it, rather
    than ``import helpers`` failing with a traceback before anything can say what moved."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


_PRIVATE = {  # what self_check reports, by the name a reader finds in torch's source
    "torch.utils.data._utils.fetch._MapDatasetFetcher":
        _private("torch.utils.data._utils.fetch", "_MapDatasetFetcher"),
    "torch.utils.data._utils.fetch._IterableDatasetFetcher":
        _private("torch.utils.data._utils.fetch", "_IterableDatasetFetcher"),
    "torch.utils.data.dataloader._SingleProcessDataLoaderIter":
        _private("torch.utils.data.dataloader", "_SingleProcessDataLoaderIter"),
    "torch.utils.data.dataloader._MultiProcessingDataLoaderIter":
        _private("torch.utils.data.dataloader", "_MultiProcessingDataLoaderIter"),
    "torch.utils.data._utils.pin_memory.pin_memory":
        _private("torch.utils.data._utils.pin_memory", "pin_memory"),
}
_found = list(_PRIVATE.values())
#: The classes whose ``fetch(possibly_batched_index)`` runs the dataset and ``collate_fn``.
FETCHER_CLASSES = tuple(c for c in _found[:2] if c is not None)
#: The iterator ``iter(loader)`` returns with ``num_workers=0``.
SingleProcessIterator = _found[2]
#: The iterator ``iter(loader)`` returns with workers.
MultiProcessIterator = _found[3]
#: What the DataLoader's pin thread calls on each batch.
pin_batch = _found[4]

#: How often a waiting loop checks whether its workers are alive (s): a worker that is not the loop's own
#: child (forkserver's) sends the loop no SIGCHLD, and its death is noticed only then.
STATUS_CHECK_INTERVAL_S = float(_private("torch.utils.data._utils", "MP_STATUS_CHECK_INTERVAL") or 5.0)

PINNED_TORCH = "2.14.1"


def main_process_fetcher(iterator: Any) -> Any | None:
    """The fetcher of a ``num_workers=0`` iterator (None for an iterator with workers)."""
    if SingleProcessIterator is not None and isinstance(iterator, SingleProcessIterator):
        return iterator._dataset_fetcher
    return None


def worker_processes(iterator: Any) -> list[Any]:
    """The worker processes (``multiprocessing.Process``) of an iterator; [] with 0 workers."""
    return list(getattr(iterator, "_workers", None) or [])


class WorkerDiedAtShutdown(RuntimeWarning):
    """A worker ended abnormally while being shut down, after its work was done."""


def shutdown_workers(iterator: Any) -> None:
    """Stop an iterator's workers now (what the DataLoader does at the end of an epoch
    without persistent workers, and when the iterator is garbage-collected).

    A worker that dies *while exiting* (one that aborts with "terminate called without an active
    exception" during ``_shutdown_workers``, notebook 05, so that PyTorch's SIGCHLD handler
    raises in the main process) did its
    work already: that is reported as a :class:`WorkerDiedAtShutdown` warning, with PyTorch's
    message, instead of failing the measurement it followed. Errors before shutdown still raise.
    """
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is None:
        return
    try:
        shutdown()
    except RuntimeError as error:
        if "DataLoader worker" not in str(error):
            raise
        import warnings

        warnings.warn(f"a DataLoader worker ended abnormally while shutting down, after its work: {error}",
                      WorkerDiedAtShutdown, stacklevel=2)
        # PyTorch's `finally` already terminated any worker still alive and dropped the pids;
        # the loop it left closes the index queues.
        for queue in getattr(iterator, "_index_queues", []):
            queue.cancel_join_thread()
            queue.close()


def empty_host_cache() -> None:
    """Give the caching host (pinned) allocator's unused blocks back to CUDA:
    ``torch.accelerator.empty_host_cache()`` where this torch has it (2.14 does), else the same
    allocator's private entry point ``torch._C._host_emptyCache`` (``torch/cuda/graphs.py`` calls
    it). The lent GPU machine's torch 2.11 has only the private one: notebook 06 stopped there."""
    public = getattr(torch.accelerator, "empty_host_cache", None)
    (public if public is not None else torch._C._host_emptyCache)()


def drop_persistent_iterator(loader: DataLoader) -> None:
    """Shut down the persistent iterator a loader keeps (``persistent_workers=True``), so
    the next ``iter(loader)`` starts fresh workers."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        shutdown_workers(iterator)
        loader._iterator = None


class TorchInternalsChanged(RuntimeError):
    """This torch moved something the lab relies on."""


@dataclass(frozen=True)
class InternalCheck:
    name: str
    ok: bool
    detail: str


def require() -> None:
    """Raise :class:`TorchInternalsChanged` naming each private name above that this torch lacks
    (no loader runs: :func:`helpers.record` and each recording worker call it)."""
    missing = [name for name, found in _PRIVATE.items() if found is None]
    if missing:
        raise _changed([InternalCheck(name, False, "not in this torch") for name in missing])


def self_check() -> list[InternalCheck]:
    """Check every private name above against the installed torch, for real (a 0-worker and
    a 1-worker loader are iterated). Raises :class:`TorchInternalsChanged` naming what moved
    and the fix; returns the checks when all hold."""
    checks: list[InternalCheck] = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append(InternalCheck(name, bool(ok), detail))

    require()  # the checks below use them
    for cls in FETCHER_CLASSES:
        params = list(inspect.signature(cls.fetch).parameters)
        check(f"{cls.__name__}.fetch", params == ["self", "possibly_batched_index"],
              f"signature {params}")
    check("pin_memory.pin_memory", "device" in inspect.signature(pin_batch).parameters,
          f"signature {list(inspect.signature(pin_batch).parameters)}")

    single = iter(DataLoader(list(range(4)), batch_size=2))
    fetcher = main_process_fetcher(single)
    check("_SingleProcessDataLoaderIter._dataset_fetcher", fetcher is not None and hasattr(fetcher, "fetch"),
          type(fetcher).__name__)
    check("single-process fetcher class", isinstance(fetcher, FETCHER_CLASSES), type(fetcher).__name__)
    del single

    loader = DataLoader(list(range(4)), batch_size=2, num_workers=1, persistent_workers=True)
    iterator = iter(loader)
    try:
        next(iterator)
        check("_MultiProcessingDataLoaderIter", isinstance(iterator, MultiProcessIterator),
              type(iterator).__name__)
        check("iterator._workers", len(worker_processes(iterator)) == 1, "one worker process listed")
        check("iterator._shutdown_workers", callable(getattr(iterator, "_shutdown_workers", None)),
              "callable")
        check("loader._iterator (persistent)", getattr(loader, "_iterator", None) is iterator,
              "the loader keeps its persistent iterator")
    finally:
        drop_persistent_iterator(loader)
    check("workers stopped", not any(w.is_alive() for w in worker_processes(iterator)),
          "no worker left after drop_persistent_iterator")

    broken = [c for c in checks if not c.ok]
    if broken:
        raise _changed(broken)
    return checks


def _changed(broken: list[InternalCheck]) -> TorchInternalsChanged:
    return TorchInternalsChanged(
        f"torch {torch.__version__} moved private DataLoader internals the lab's instrument uses: "
        + "; ".join(f"{c.name} ({c.detail})" for c in broken)
        + f". The lab pins torch=={PINNED_TORCH}: reinstall its environment (`make lab`), or update "
        "helpers/timing/torch_internals.py for this torch."
    )



# -- torch.compile (notebook 18): what Dynamo compiled, from its own record ------------------------------
@dataclass(frozen=True)
class CompileEvent:
    """One frame Dynamo compiled (a first compile, or a recompile with the guard that failed)."""

    name: str  #: the compiled function's code name
    recompile_reason: str | None  #: None: a first compile; else why the cached code did not fit
    seconds: float | None  #: the whole frame's compile time

    @property
    def recompile(self) -> bool:
        return self.recompile_reason is not None


def compile_events() -> list[CompileEvent]:
    """Every frame ``torch.compile`` compiled in this process since :func:`reset_compiles`, in order:
    ``torch._dynamo.utils.get_compilation_metrics()`` (what ``TORCH_LOGS=recompiles`` reports). A
    backward graph compiled for a frame is part of that frame's compile, not an event of its own."""
    from torch._dynamo.utils import get_compilation_metrics

    return [CompileEvent(m.co_name, m.recompile_reason, m.entire_frame_compile_time_s)
            for m in get_compilation_metrics() if m.co_name is not None]


def reset_compiles() -> None:
    """Forget every compiled frame (``torch.compiler.reset()``: caches, automatic-dynamic state) and
    Dynamo's record of compiles, so that the next compile is counted as a first one."""
    from torch._dynamo.utils import clear_compilation_metrics

    torch.compiler.reset()
    clear_compilation_metrics()


def mark_batch_dynamic(batch: torch.Tensor) -> torch.Tensor:
    """Tell ``torch.compile`` that dimension 0 (the batch) of this tensor may change size: the first
    compile then makes code for any batch size instead of this one (``torch._dynamo.mark_dynamic``)."""
    torch._dynamo.mark_dynamic(batch, 0)
    return batch


class RecompileLog(logging.Handler):
    """torch's own log of recompiles, the lines ``TORCH_LOGS=recompiles`` prints, kept as a list:
    ``with RecompileLog() as log: ...``, then ``len(log.messages)``."""

    LOGGER = "torch._dynamo.guards.__recompiles"  # torch._logging's artifact logger for "recompiles"

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def __enter__(self):
        torch._logging.set_logs(recompiles=True)
        logging.getLogger(self.LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger(self.LOGGER).removeHandler(self)
        torch._logging.set_logs()
