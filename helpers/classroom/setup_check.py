"""Checks behind notebook 00: is this environment ready for the lab, and if not, what to fix."""

from __future__ import annotations

import html
import multiprocessing as mp
import sys
from dataclasses import dataclass
from importlib import metadata

from torch.utils.data import DataLoader

from .. import config, cores
from ..data.datasets import TaggedDataset
from ..system import format_shm, shm_info
from ..timing import torch_internals
from ..timing.recorder import record

PINNED = {"torch": "2.14.1", "torchvision": "0.29.1"}
MINIMUM_SHM_BYTES = 1 * 2**30  # Docker's default of 64 MB breaks multi-worker loading
MINIMUM_OPEN_FILES = 4096


@dataclass(frozen=True)
class Check:
    """One check: ``ok`` False with ``blocking`` True means the lab will not work."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    blocking: bool = True


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check_python() -> Check:
    ok = sys.version_info >= (3, 10)
    return Check("python", ok, sys.version.split()[0],
                 "" if ok else "use Python 3.10 or newer (make lab creates .venv with python3)")


def check_packages() -> list[Check]:
    checks = []
    for package, wanted in PINNED.items():
        found = _version(package)
        ok = found is not None and found.split("+")[0] == wanted
        checks.append(Check(package, ok, f"{found or 'missing'} (lab pins {wanted})",
                            "" if ok else "run `make lab` (or `pip install -e .`) from the lab's "
                                          "folder and pick the lab's kernel"))
    for package, minimum in {"ipywidgets": "8", "matplotlib": "3.7", "jupyterlab": "4"}.items():
        found = _version(package)
        ok = found is not None and int(found.split(".")[0]) >= int(minimum.split(".")[0])
        checks.append(Check(package, ok, found or "missing",
                            "" if ok else f"install {package}>={minimum} (`make lab` does)"))
    return checks


def check_lab_checkout() -> Check:
    root = config.repo_root()
    ok = (root / "notebooks").is_dir()
    return Check("helpers package", ok, f"imported from {root / 'helpers'}",
                 "" if ok else "install the lab editable: `pip install -e .` in its folder")


def check_start_method(method: str, item_wait_s: float = 0.05) -> Check:
    """Start 2 workers with ``method`` and check each batch names the worker that built it."""
    try:
        loader = DataLoader(TaggedDataset(4, item_wait_s=item_wait_s), batch_size=1, num_workers=2,
                            prefetch_factor=1, multiprocessing_context=method)
        received: list = []
        tl = record(loader, received.append, progress=False)
        workers_ok = all(batch["worker"].item() == b.worker
                         for batch, b in zip(received, tl.batches, strict=True))
        ok = workers_ok and sorted({b.worker for b in tl.batches}) == [0, 1]
        detail = f"2 workers started; first batch after {tl.summary()['first_batch_s']:.2f} s"
        return Check(f"workers ({method})", ok, detail,
                     "" if ok else "workers did not report their ids: see README troubleshooting")
    except Exception as error:  # reported as a failed check, with the real message
        return Check(f"workers ({method})", False, f"{type(error).__name__}: {error}",
                     "see README troubleshooting (start methods)")


def check_torch_internals() -> Check:
    """The private DataLoader internals the instrument uses are where the lab expects them."""
    try:
        checks = torch_internals.self_check()
    except torch_internals.TorchInternalsChanged as error:
        return Check("instrument vs this torch", False, str(error),
                     "run `make lab` (it installs the pinned torch)")
    return Check("instrument vs this torch", True, f"{len(checks)} private DataLoader internals in place")


def check_shm() -> Check:
    info = shm_info()
    if info is None:
        return Check("/dev/shm", True, "not present on this OS (macOS/Windows share memory "
                     "differently)", blocking=False)
    ok = info["total_bytes"] >= MINIMUM_SHM_BYTES
    return Check("/dev/shm", ok, format_shm(info),
                 "" if ok else "too small for several workers: in Docker use --shm-size=2g "
                               "or --ipc=host (notebook 10 shows the failure)",
                 blocking=False)


def check_open_files() -> Check:
    try:
        import resource
    except ImportError:  # Windows
        return Check("open files limit", True, "no RLIMIT_NOFILE on this OS", blocking=False)
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ok = soft == resource.RLIM_INFINITY or soft >= MINIMUM_OPEN_FILES
    return Check("open files limit", ok, f"soft limit {soft}",
                 "" if ok else f"raise it (`ulimit -n {MINIMUM_OPEN_FILES}`) before starting "
                               "JupyterLab; keeping many batches alive uses one fd each",
                 blocking=False)


def check_cores() -> Check:
    limits = cores.cpu_limits()
    ok = limits.cores >= 2
    if limits.quota_limits:
        fix = ("a CPU quota (a class server's cpu_limit, Docker's --cpus) lets this kernel and its "
               f"workers use {cores.format_cores(limits.cores)} CPU in all, though {limits.affinity} cores "
               "show: CPU-bound loading stops there, and PyTorch's worker warning (it counts the "
               "affinity mask) does not see it. The lessons size their work from the effective cores"
               + ("" if ok else "; below 2 the lessons about parallel workers report their premise failed"))
    else:
        fix = "" if ok else "one core hides most lessons about workers; use 2 or more"
    return Check("cores", ok and not limits.quota_limits, limits.describe(), fix, blocking=False)


def run_setup_checks(start_methods: list[str] | None = None) -> list[Check]:
    """Every check of notebook 00, in order. Starts real workers for each start method."""
    methods = start_methods if start_methods is not None else mp.get_all_start_methods()
    return [check_python(), *check_packages(), check_lab_checkout(), check_torch_internals(),
            *[check_start_method(m) for m in methods],
            check_shm(), check_open_files(), check_cores()]


def checks_html(checks: list[Check]) -> str:
    """The checks as an HTML table (what, result, how to fix)."""
    def mark(c: Check) -> str:
        return "✅" if c.ok else ("❌" if c.blocking else "⚠️")

    rows = "".join(
        f"<tr><td>{mark(c)}</td><td style='text-align:left'>{html.escape(c.name)}</td>"
        f"<td style='text-align:left'>{html.escape(c.detail)}</td>"
        f"<td style='text-align:left'>{html.escape(c.fix)}</td></tr>"
        for c in checks
    )
    return ("<table><tr><th></th><th>check</th><th>found</th><th>what to do</th></tr>"
            f"{rows}</table>")
