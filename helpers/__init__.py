"""DataLoader Lab helpers: workloads, the timeline instrument, the step-time model,
plots and the explorer widget.

Notebooks call these; nothing that runs in a DataLoader worker is defined in a
notebook cell. Plots and widgets load lazily, so a worker process that imports
``helpers`` (under spawn or forkserver) does not pay for matplotlib or ipywidgets.
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import available_cores, is_smoke, seconds, sized
from .datasets import (
    BatchedTensorDataset,
    BatchedTutorialDataset,
    BatchedWorkDataset,
    SleepDataset,
    SleepStream,
    StragglerDataset,
    TaggedDataset,
    TutorialDataset,
    WorkDataset,
    burn_cpu,
    mnist_like,
)
from .failures import ShmMonitor, run_demo, shm_sandbox_available, shm_used_bytes, torch_segments
from .loaders import HAS_IN_ORDER, check_loader_args, make_loader
from .models import ForumMLP, ModelledStep, TrainStep, TutorialNet
from .prefetch import BatchTransform, DevicePrefetcher, HostTransform, ThreadPrefetcher
from .setup_check import checks_html, run_setup_checks
from .storage import BatchedSqliteDataset, SqliteDataset, make_sqlite_db
from .system import describe_machine, free_cores, get_device, save_results, torch_threads
from .theory import (
    first_batch_time,
    recommend_num_workers,
    simulate,
    simulated_intervals,
    step_time,
)
from .timeline import MAIN_PROCESS, BatchRecord, EpochRecord, Span, Timeline, record
from .transfer import (
    batch_nbytes,
    copy_bandwidth,
    nonblocking_readback_trap,
    pin_memory_warning,
    to_device,
)
from .workers import (
    EpochEchoDataset,
    EpochSampler,
    SharedEpoch,
    process_memory,
    worker_memory,
)

_LAZY = {
    "plot_timeline": "plots",
    "plot_timelines": "plots",
    "plot_intervals": "plots",
    "plot_step_time_model": "plots",
    "plot_bandwidth": "plots",
    "plot_ratios": "plots",
    "show_reference_figure": "plots",
    "TimelineExplorer": "widgets",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")


__all__ = [
    "MAIN_PROCESS", "HAS_IN_ORDER", "BatchRecord", "EpochRecord", "Span", "Timeline", "record",
    "available_cores", "is_smoke", "seconds", "sized",
    "BatchedTensorDataset", "BatchedTutorialDataset", "BatchedWorkDataset", "SleepDataset", "SleepStream",
    "StragglerDataset", "TaggedDataset",
    "TutorialDataset", "WorkDataset", "burn_cpu", "mnist_like",
    "check_loader_args", "make_loader",
    "ShmMonitor", "run_demo", "shm_sandbox_available", "shm_used_bytes", "torch_segments",
    "ForumMLP", "ModelledStep", "TrainStep", "TutorialNet",
    "BatchTransform", "DevicePrefetcher", "HostTransform", "ThreadPrefetcher",
    "batch_nbytes", "copy_bandwidth", "nonblocking_readback_trap", "pin_memory_warning", "to_device",
    "EpochEchoDataset", "EpochSampler", "SharedEpoch", "process_memory", "worker_memory",
    "BatchedSqliteDataset", "SqliteDataset", "make_sqlite_db",
    "describe_machine", "free_cores", "get_device", "save_results", "torch_threads",
    "checks_html", "run_setup_checks",
    "first_batch_time", "recommend_num_workers", "simulate", "simulated_intervals", "step_time",
    *_LAZY,
]
