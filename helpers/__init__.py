"""DataLoader Lab helpers: workloads, the timeline instrument, the step-time model,
lesson checks, plots and the explorer widget.

Notebooks call these; nothing that runs in a DataLoader worker is defined in a
notebook cell. Plots and widgets load lazily (they still appear in ``dir(helpers)``
and tab completion), so a worker process that imports ``helpers`` under spawn or
forkserver does not pay for matplotlib or ipywidgets.

Layers, bottom to top: ``config``, ``torch_internals``, ``system``, ``transfer`` →
``datasets``, ``storage``, ``models``, ``settings``, ``hooks``, ``timeline``,
``recorder``, ``workers``, ``copy_on_read``, ``remote``, ``images``, ``resume``, ``distributed``,
``failures``,
``prefetch``, ``predict`` → ``theory``, ``checks``, ``diagnosis``,
``analysis``, ``lessons``, ``setup_check`` → ``plots``, ``widgets``.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import config, lessons, pauses, startup, torch_internals
from .analysis import (
    cycle,
    epoch_first_batch_gaps,
    median_interval_s,
    predicted_fetch_speedup,
    shutdown_gaps,
    time_per_batch_after_startup,
)
from .checks import Check, LessonCheckFailed, LessonChecks, show_checks, timing_noise_s
from .config import available_cores, cache_dir, is_smoke, results_dir, seconds, sized, start_method
from .copy_on_read import (
    STORAGES,
    MemoryRun,
    PathDataset,
    WorkerMemory,
    encoded_bytes,
    epoch_workers,
    extra_private,
    extra_uss,
    make_paths,
    measure_memory,
    memory_table,
    sent_bytes,
    summarise,
)
from .cores import cpu_limits, effective_cores
from .datasets import (
    BatchedTensorDataset,
    BatchedTutorialDataset,
    BatchedWorkDataset,
    HostTransform,
    TaggedDataset,
    TutorialDataset,
    WorkDataset,
    WorkStream,
    burn_cpu,
    mnist_like,
)
from .diagnosis import (
    Diagnosis,
    Recommendation,
    SlowCollate,
    diagnose,
    mystery_loader,
    profile,
    profiler_agreement,
)
from .distributed import DistRun, RankRecord, SetEpochSampler, SlowIds, SyncStep, launch
from .failures import (
    ShmMonitor,
    child_processes,
    run_demo,
    shm_sandbox_available,
    shm_used_bytes,
    torch_segments,
)
from .hooks import MAIN_PROCESS
from .models import ForumMLP, ModelledStep, TrainStep, TutorialNet
from .predict import Prediction
from .prefetch import BatchTransform, DevicePrefetcher, SerialisedDevicePrefetcher, ThreadPrefetcher
from .recorder import record
from .remote import (
    Endpoint,
    ObjectStore,
    ObjectTiming,
    Requests,
    S3Dataset,
    StoreError,
    client_setup_s,
    download,
    error_of,
    measure_requests,
    median_timing,
    port_open,
    request_slowdown,
    samples_per_s,
    time_endpoints,
    time_files,
    time_objects,
    timing_table,
)
from .report import Table, progress, table
from .resume import (
    SET_VITAL_FILTER,
    IdDataset,
    ResumeResult,
    kill_and_resume,
    set_vital_warning,
    stateful_loader,
)
from .settings import HAS_IN_ORDER, LoaderSettings
from .setup_check import checks_html, run_setup_checks
from .storage import BatchedSqliteDataset, SqliteDataset, make_sqlite_db
from .system import (
    accelerator_name,
    describe_machine,
    format_shm,
    free_cores,
    get_device,
    save_results,
    shm_info,
    torch_threads,
    use_start_method,
)
from .theory import (
    as_timeline,
    first_batch_time,
    recommend_num_workers,
    simulate,
    simulated_intervals,
    step_time,
)
from .timeline import BatchRecord, EpochRecord, Pause, Span, Timeline
from .transfer import (
    batch_nbytes,
    copy_bandwidth,
    nonblocking_readback_trap,
    pin_memory_warning,
    pinned_budget_bytes,
    to_device,
)
from .workers import (
    EpochEchoDataset,
    EpochSampler,
    SharedEpoch,
    epochs_seen,
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
    "plot_speedup_curves": "plots",
    "show_reference_figure": "plots",
    "plot_worker_memory": "plots",
    "plot_object_timings": "plots",
    "plot_requests": "plots",
    "plot_concurrency": "plots",
    "plot_image_rates": "plots",
    "plot_resume": "plots",
    "plot_ranks": "plots",
    "show_image": "plots",
    "JpegDataset": "images",
    "cost_per_image": "images",
    "deprecation_notice": "images",
    "decode_rate": "images",
    "gpu_decode_rate": "images",
    "images_per_s": "images",
    "make_jpegs": "images",
    "normalize_on_device": "images",
    "pack_tar": "images",
    "tar_index": "images",
    "train_transform": "images",
    "ImageExplorer": "widgets",
    "TimelineExplorer": "widgets",
    "MemoryExplorer": "widgets",
    "RemoteExplorer": "widgets",
    "ResumeExplorer": "widgets",
    "DiagnoseExplorer": "widgets",
    "DistExplorer": "widgets",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "config", "lessons", "pauses", "startup", "torch_internals",
    "MAIN_PROCESS", "HAS_IN_ORDER", "BatchRecord", "EpochRecord", "Pause", "Span", "Timeline", "record",
    "LoaderSettings", "Table", "progress", "table",
    "available_cores", "cache_dir", "cpu_limits", "effective_cores", "is_smoke", "results_dir", "seconds",
    "sized", "start_method",
    "BatchedTensorDataset", "BatchedTutorialDataset", "BatchedWorkDataset", "HostTransform",
    "TaggedDataset", "TutorialDataset", "WorkDataset", "WorkStream", "burn_cpu", "mnist_like",
    "STORAGES", "MemoryRun", "PathDataset", "WorkerMemory", "encoded_bytes", "epoch_workers", "extra_private",
    "extra_uss",
    "make_paths", "measure_memory", "memory_table", "sent_bytes", "summarise",
    "ShmMonitor", "child_processes", "run_demo", "shm_sandbox_available", "shm_used_bytes", "torch_segments",



    "Diagnosis", "Recommendation", "SlowCollate", "diagnose", "mystery_loader", "profile",
    "profiler_agreement",
    "DistRun", "SetEpochSampler", "RankRecord", "SlowIds", "SyncStep", "launch",
    "SET_VITAL_FILTER", "IdDataset", "ResumeResult", "kill_and_resume", "set_vital_warning",
    "stateful_loader",
    "ForumMLP", "ModelledStep", "TrainStep", "TutorialNet",
    "Prediction", "BatchTransform", "DevicePrefetcher", "SerialisedDevicePrefetcher", "ThreadPrefetcher",
    "batch_nbytes", "copy_bandwidth", "nonblocking_readback_trap", "pin_memory_warning",
    "pinned_budget_bytes", "to_device",
    "EpochEchoDataset", "EpochSampler", "SharedEpoch", "epochs_seen", "process_memory", "worker_memory",
    "Endpoint", "ObjectStore", "ObjectTiming", "Requests", "S3Dataset", "StoreError", "client_setup_s",
    "download", "error_of",
    "measure_requests", "median_timing", "port_open", "request_slowdown", "samples_per_s", "time_endpoints",
    "time_files", "time_objects", "timing_table",
    "BatchedSqliteDataset", "SqliteDataset", "make_sqlite_db",
    "accelerator_name", "describe_machine", "format_shm", "free_cores", "get_device", "save_results",
    "shm_info", "torch_threads", "use_start_method",
    "checks_html", "run_setup_checks",
    "Check", "LessonCheckFailed", "LessonChecks", "show_checks", "timing_noise_s",
    "cycle", "epoch_first_batch_gaps", "median_interval_s", "predicted_fetch_speedup", "shutdown_gaps",
    "time_per_batch_after_startup",
    "as_timeline", "first_batch_time", "recommend_num_workers", "simulate", "simulated_intervals",
    "step_time",
    *_LAZY,
]
