"""DataLoader Lab helpers: every public name the notebooks use, as ``helpers.X``.

The parts (``helpers/README.md`` has the map and where a new lesson's code goes):

- ``helpers/timing/`` — the instrument a learner takes to their own code: :func:`record`, the
  timeline and its trace export, the step-time model, :func:`diagnose`; imports no other part;
- ``helpers/data/`` — the course's workloads and stores (datasets, S3, images, torchrun, …);
- ``helpers/models.py`` — the model side of a step;
- ``helpers/lessons/`` — each notebook's lesson checks; ``helpers/classroom/`` — their framework,
  predictions and the setup checks;
- ``helpers/explorers/`` — the widgets (one base: settings → run → figure);
- ``helpers/plots/`` — the figures;
- ``config``, ``cores``, ``system`` — the base every part may use.

Plots, explorers and ``helpers.data.images`` load lazily (they still appear in ``dir(helpers)``
and tab completion), so a worker process that imports ``helpers`` under spawn or forkserver does
not pay for matplotlib, ipywidgets or torchvision.

Old module names that notebooks use (``helpers.theory``, ``helpers.transfer``, …) are the moved
modules themselves (:data:`_MOVED`): the same objects, registered in ``sys.modules``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from . import config, failures, lessons, startup
from .classroom.checks import Check, LessonCheckFailed, LessonChecks, show_checks, timing_noise_s
from .classroom.predict import Prediction
from .classroom.setup_check import checks_html, run_setup_checks
from .config import available_cores, cache_dir, is_smoke, results_dir, seconds, sized, start_method
from .cores import cpu_limits, effective_cores
from .data.bugs.compiled import CompiledStep, Features, PadToBatch, compile_backend, compiled_run
from .data.bugs.randomness import (
    EpochCountingSampler,
    GlobalDraws,
    InitGeneratorDraws,
    KeepBatches,
    PerSampleDraws,
    draws_of,
    reseed_from_worker,
    same_draws,
)
from .data.bugs.streams import ShardedStream, UnshardedStream, shard_tails, stream_run
from .data.copy_on_read import (
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
from .data.datasets import (
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
from .data.distributed.launch import launch
from .data.distributed.ranks import SetEpochSampler, SlowIds, SyncStep
from .data.distributed.run import DistRun, RankRecord
from .data.failures import (
    ShmMonitor,
    child_processes,
    orphaned_segments,
    run_demo,
    shm_held_bytes,
    shm_sandbox_available,
    shm_used_bytes,
    torch_segments,
)
from .data.mainproc import HandOverDataset, ThreadedBatches
from .data.mysteries import SlowCollate, mystery_loader
from .data.prefetch import BatchTransform, DevicePrefetcher, SerialisedDevicePrefetcher, ThreadPrefetcher
from .data.remote import (
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
    slowdown_text,
    time_endpoints,
    time_files,
    time_objects,
    timing_table,
)
from .data.resume import (
    SET_VITAL_FILTER,
    IdDataset,
    ResumeResult,
    kill_and_resume,
    set_vital_warning,
    stateful_loader,
)
from .data.storage import BatchedSqliteDataset, SqliteDataset, make_sqlite_db
from .data.transfer import copy_bandwidth, nonblocking_readback_trap, pin_memory_warning, pinned_budget_bytes
from .data.workers import (
    EpochEchoDataset,
    EpochSampler,
    SharedEpoch,
    epochs_seen,
    freeze_gc,
    process_memory,
    worker_memory,
)
from .models import ForumMLP, HostDeviceStep, ModelledStep, TrainStep, TutorialNet
from .system import (
    accelerator_name,
    describe_machine,
    format_shm,
    free_cores,
    get_device,
    save_results,
    shm_info,
    slept_s,
    torch_threads,
    use_start_method,
)
from .timing import pauses, torch_internals
from .timing.analysis import (
    cycle,
    epoch_first_batch_gaps,
    median_interval_s,
    predicted_fetch_speedup,
    shutdown_gaps,
    time_per_batch_after_startup,
)
from .timing.device import batch_nbytes, to_device
from .timing.diagnosis.advice import Recommendation
from .timing.diagnosis.result import Diagnosis
from .timing.diagnosis.run import diagnose
from .timing.hooks import MAIN_PROCESS
from .timing.plain import measure_n_y_m, next_when_ready, unimportable_parts, wait_share
from .timing.recorder import record, record_fastest
from .timing.report import Table, progress, table
from .timing.settings import HAS_IN_ORDER, LoaderSettings
from .timing.theory import (
    as_timeline,
    first_batch_time,
    recommend_num_workers,
    simulate,
    simulated_intervals,
    step_time,
)
from .timing.timeline import BatchRecord, EpochRecord, Pause, Span, Timeline
from .timing.torch_internals import RecompileLog
from .timing.trace import profile, profiler_agreement

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
    "plot_diagnosis": "plots",
    "plot_draws": "plots",
    "plot_stream_ids": "plots",
    "plot_batch_sizes": "plots",
    "plot_step_times": "plots",
    "plot_cell_outcomes": "plots",
    "JpegDataset": "data.images",
    "cost_per_image": "data.images",
    "cpu_per_image": "data.images",
    "deprecation_notice": "data.images",
    "decode_rate": "data.images",
    "gpu_decode_rate": "data.images",
    "images_per_s": "data.images",
    "make_jpegs": "data.images",
    "normalize_on_device": "data.images",
    "pack_tar": "data.images",
    "record_best": "data.images",
    "tar_index": "data.images",
    "train_transform": "data.images",
    "ImageExplorer": "explorers",
    "TimelineExplorer": "explorers",
    "MemoryExplorer": "explorers",
    "RemoteExplorer": "explorers",
    "ResumeExplorer": "explorers",
    "DiagnoseExplorer": "explorers",
    "DistExplorer": "explorers",
    "RandomnessExplorer": "explorers",
}


#: Old module names the notebooks use, each the very module at its new home (one object: its
#: state, monkeypatching and pickling are the new module's). ``helpers.startup``, ``helpers.failures``
#: and ``helpers.diagnose`` are files (``python -m`` runs them); ``helpers.lessons``, ``helpers.config``
#: did not move.
_MOVED = {
    "diagnosis": "helpers.data.mysteries",  # notebook 16: helpers.diagnosis.PLANTED
    "pauses": "helpers.timing.pauses",  # notebook 02: helpers.pauses.measure_collections
    "theory": "helpers.timing.theory",  # notebooks 02, 11: helpers.theory.measured_main_s
    "torch_internals": "helpers.timing.torch_internals",  # notebook 05: .shutdown_workers
    "transfer": "helpers.data.transfer",  # notebook 06: PinnedMemoryTaken, pinned_block_bytes
}
for _old, _new in _MOVED.items():
    sys.modules[f"{__name__}.{_old}"] = globals()[_old] = importlib.import_module(_new)


def _draw_diagnosis(diagnosis: Diagnosis, title: str | None = None) -> Any:
    """``Diagnosis.plot``: the instrument imports no plots; this connects them, loading plots lazily."""
    from .plots.diagnosis import plot_diagnosis

    return plot_diagnosis(diagnosis, title)


def _draw_profile(diagnosis: Diagnosis) -> Any:
    """``Diagnosis.plot_profile``, through the plots, loaded lazily."""
    from .plots.diagnosis import plot_profile

    return plot_profile(diagnosis)


importlib.import_module("helpers.timing.diagnosis.result").draw = _draw_diagnosis
importlib.import_module("helpers.timing.diagnosis.result").draw_profile = _draw_profile

# Inside a notebook's kernel: a shutdown that does not wait 29 s for exited children, so the
# kernel exits cleanly before its frontend's SIGTERM (helpers.system, reap_children_at_kernel_shutdown).
importlib.import_module("helpers.system").reap_children_at_kernel_shutdown()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "config", "failures", "lessons", "pauses", "startup", "torch_internals", "diagnosis", "theory",
    "transfer",
    "MAIN_PROCESS", "HAS_IN_ORDER", "BatchRecord", "EpochRecord", "Pause", "Span", "Timeline", "record",
    "record_fastest", "measure_n_y_m", "next_when_ready", "unimportable_parts", "wait_share", "RecompileLog",
    "LoaderSettings", "Table", "progress", "table",
    "available_cores", "cache_dir", "cpu_limits", "effective_cores", "is_smoke", "results_dir", "seconds",
    "sized", "start_method",
    "BatchedTensorDataset", "BatchedTutorialDataset", "BatchedWorkDataset", "HostTransform",
    "TaggedDataset", "TutorialDataset", "WorkDataset", "WorkStream", "burn_cpu", "mnist_like",
    "STORAGES", "MemoryRun", "PathDataset", "WorkerMemory", "encoded_bytes", "epoch_workers", "extra_private",
    "extra_uss",
    "make_paths", "measure_memory", "memory_table", "sent_bytes", "summarise",
    "ShmMonitor", "child_processes", "orphaned_segments", "run_demo", "shm_held_bytes",
    "shm_sandbox_available", "shm_used_bytes", "torch_segments",



    "Diagnosis", "Recommendation", "SlowCollate", "diagnose", "mystery_loader", "profile",
    "profiler_agreement",
    "DistRun", "SetEpochSampler", "RankRecord", "SlowIds", "SyncStep", "launch",
    "CompiledStep", "EpochCountingSampler", "Features", "GlobalDraws", "InitGeneratorDraws", "KeepBatches",
    "PadToBatch", "PerSampleDraws", "ShardedStream", "UnshardedStream", "compile_backend", "compiled_run",
    "draws_of", "reseed_from_worker", "same_draws", "shard_tails", "stream_run",
    "SET_VITAL_FILTER", "IdDataset", "ResumeResult", "kill_and_resume", "set_vital_warning",
    "stateful_loader",
    "ForumMLP", "HostDeviceStep", "ModelledStep", "TrainStep", "TutorialNet",
    "HandOverDataset", "ThreadedBatches",
    "Prediction", "BatchTransform", "DevicePrefetcher", "SerialisedDevicePrefetcher", "ThreadPrefetcher",
    "batch_nbytes", "copy_bandwidth", "nonblocking_readback_trap", "pin_memory_warning",
    "pinned_budget_bytes", "to_device",
    "EpochEchoDataset", "EpochSampler", "SharedEpoch", "epochs_seen", "freeze_gc", "process_memory",
    "worker_memory",
    "Endpoint", "ObjectStore", "ObjectTiming", "Requests", "S3Dataset", "StoreError", "client_setup_s",
    "download", "error_of",
    "measure_requests", "median_timing", "port_open", "request_slowdown", "samples_per_s", "slowdown_text",
    "time_endpoints",
    "time_files", "time_objects", "timing_table",
    "BatchedSqliteDataset", "SqliteDataset", "make_sqlite_db",
    "accelerator_name", "describe_machine", "format_shm", "free_cores", "get_device", "save_results",
    "shm_info", "slept_s", "torch_threads", "use_start_method",
    "checks_html", "run_setup_checks",
    "Check", "LessonCheckFailed", "LessonChecks", "show_checks", "timing_noise_s",
    "cycle", "epoch_first_batch_gaps", "median_interval_s", "predicted_fetch_speedup", "shutdown_gaps",
    "time_per_batch_after_startup",
    "as_timeline", "first_batch_time", "recommend_num_workers", "simulate", "simulated_intervals",
    "step_time",
    *_LAZY,
]
