"""Effective cores: the CPU a learner's processes can actually use.

Two limits decide it, and the core count shows only the first:

- the **affinity mask** (``os.sched_getaffinity``: the cores this process may run on —
  ``taskset``, a cpuset, Docker's ``--cpuset-cpus``);
- a **CPU quota** (CFS bandwidth control: JupyterHub's ``cpu_limit``, Docker's ``--cpus``,
  Kubernetes' CPU limits). The processes of the group may use ``quota / period`` CPUs in
  total, however many cores they see; one that has spent its quota is stopped until the
  next period. cgroup v2 keeps it in ``cpu.max`` (``"max 100000"``: none,
  ``"50000 100000"``: half a CPU), cgroup v1 in ``cpu.cfs_quota_us`` (−1: none) and
  ``cpu.cfs_period_us``. A quota on any ancestor of the process's group limits it too.

PyTorch's worker warning ("Our suggested max number of worker in current system is N") and
``os.cpu_count()`` read the first at most, never the second: under a quota they suggest
more workers than the CPU allows. :func:`cpu_limits` reads both, from the process's own
cgroup (``/proc/self/cgroup`` and ``/proc/self/mountinfo``), with where each came from.
Only the standard library: cheap enough to call from anywhere.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuQuota:
    """A CPU quota found on one cgroup: ``cpus`` = quota / period."""

    cpus: float
    source: str  #: where it was read, e.g. "cgroup v2 /sys/fs/cgroup/hub/cpu.max = '50000 100000'"


@dataclass(frozen=True)
class CpuLimits:
    """The cores in the affinity mask and the tightest CPU quota over them.

    ``cores`` is what the lab sizes work from (a float: a quota can be half a CPU);
    ``whole`` is it as a count of busy processes: the fewest that can use all of it."""

    affinity: int
    affinity_source: str
    quota: CpuQuota | None

    @property
    def cores(self) -> float:
        """Effective cores: the affinity mask, capped by the quota (CPUs, may be fractional)."""
        return float(self.affinity) if self.quota is None else min(float(self.affinity), self.quota.cpus)

    @property
    def whole(self) -> int:
        """The effective cores rounded up to a count of busy processes, at least 1 (a sweep of
        workers, :func:`helpers.free_cores`): the fewest that can use all of the CPU. A quota is a
        pool the group's processes share, so under 1.5 CPUs two busy processes get 0.75 each, 1.5
        in all, where one would leave half a CPU unused; under half a CPU one process takes it all."""
        return max(1, math.ceil(self.cores - 1e-9))

    @property
    def quota_limits(self) -> bool:
        """True when a quota, not the affinity mask, sets the effective cores."""
        return self.quota is not None and self.quota.cpus < self.affinity

    def describe(self) -> str:
        """One line: the effective cores and where each limit came from."""
        mask = f"{self.affinity} in the affinity mask ({self.affinity_source})"
        if self.quota is None:
            return f"{format_cores(self.cores)} effective: {mask}; no CPU quota"
        verb = "capped by" if self.quota_limits else "with"
        return (f"{format_cores(self.cores)} effective: {mask}, {verb} a CPU quota of "
                f"{self.quota.cpus:g} CPU ({self.quota.source})")


def format_cores(cores: float) -> str:
    """``2`` for 2.0, ``0.5`` for a half — how many CPUs, as a person writes it."""
    return f"{cores:g}"


def affinity() -> tuple[int, str]:
    """The cores in this process's affinity mask, and how they were read."""
    try:
        return len(os.sched_getaffinity(0)), "os.sched_getaffinity"
    except AttributeError:  # macOS, Windows: no affinity mask to read
        return os.cpu_count() or 1, "os.cpu_count, no affinity mask on this OS"


# -- reading the cgroup files --------------------------------------------------------------------
def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(root inside the hierarchy, mount point, filesystem type, options) of each cgroup mount."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3 or after[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(after[2].split(",")) | set(fields[5].split(","))
        found.append((fields[3], fields[4], after[0], options))
    return found


def _within(mount_root: str, group: str) -> str | None:
    """``group`` relative to the mount's root, or None when the mount does not contain it. A group
    outside the process's cgroup namespace shows as ``/../x``: not below this mount either."""
    if mount_root == "/":
        relative: str | None = group.lstrip("/")
    elif group == mount_root or group.startswith(mount_root.rstrip("/") + "/"):
        relative = group[len(mount_root):].lstrip("/")
    else:
        relative = None
    return None if relative is None or ".." in relative.split("/") else relative


def _v2_quota(folder: Path) -> CpuQuota | None:
    text = _read(folder / "cpu.max")
    if text is None:
        return None
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = float(fields[0]), float(fields[1])
    if quota <= 0 or period <= 0:
        return None
    return CpuQuota(quota / period, f"cgroup v2 {folder}/cpu.max = {text!r}")


def _v1_quota(folder: Path) -> CpuQuota | None:
    quota_text, period_text = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota_text is None or period_text is None:
        return None
    quota, period = int(quota_text), int(period_text)
    if quota <= 0 or period <= 0:  # -1: no limit
        return None
    return CpuQuota(quota / period,
                    f"cgroup v1 {folder}: cpu.cfs_quota_us={quota}, cpu.cfs_period_us={period}")


@dataclass(frozen=True)
class CpuCgroup:
    """One hierarchy that can hold a CPU quota for this process: its version ("v1" with the
    ``cpu`` controller, or "v2"), where it is mounted and the process's own group folder."""

    version: str
    mount: Path
    group: Path

    def upward(self) -> list[Path]:
        """The group folder and each ancestor up to the mount (a quota on any of them applies)."""
        folders = [self.group]
        while folders[-1] != self.mount and self.mount in folders[-1].parents:
            folders.append(folders[-1].parent)
        return folders


def cpu_cgroups(root: str | Path = "/", proc: str = "proc/self") -> list[CpuCgroup]:
    """This process's group in each cgroup hierarchy that can hold a CPU quota.

    ``root`` is where the filesystem starts (tests pass a folder of fake cgroup files);
    ``proc`` the process's folder below it. Reads ``/proc/self/cgroup`` for the group's path
    and ``/proc/self/mountinfo`` for where each hierarchy is mounted, so it also works inside a
    container (whose group shows as ``/``) and with v1 and v2 side by side."""
    root = Path(root)
    cgroup_text = _read(root / proc / "cgroup")
    mountinfo = _read(root / proc / "mountinfo")
    if cgroup_text is None or mountinfo is None:
        return []
    v2_group, v1_groups = None, {}
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, group = parts
        if hierarchy == "0" and controllers == "":
            v2_group = group
        for controller in controllers.split(","):
            v1_groups[controller] = group
    found = []
    for mount_root, mount_point, fstype, options in _mounts(mountinfo):
        if fstype == "cgroup2" and v2_group is not None:
            version, relative = "v2", _within(mount_root, v2_group)
        elif fstype == "cgroup" and "cpu" in options and "cpu" in v1_groups:
            version, relative = "v1", _within(mount_root, v1_groups["cpu"])
        else:
            continue
        if relative is not None:
            mount = root / mount_point.lstrip("/")
            found.append(CpuCgroup(version, mount, mount.joinpath(*[p for p in relative.split("/") if p])))
    return found


def cgroup_quota(root: str | Path = "/", proc: str = "proc/self") -> CpuQuota | None:
    """The tightest CPU quota over this process's cgroup and its ancestors, or None."""
    quotas = [q for cgroup in cpu_cgroups(root, proc)
              for q in map(_v2_quota if cgroup.version == "v2" else _v1_quota, cgroup.upward())
              if q is not None]
    return min(quotas, key=lambda q: q.cpus) if quotas else None


def quota_stat_files(root: str | Path = "/", proc: str = "proc/self") -> list[Path]:
    """The ``cpu.stat`` file of every group over this process that holds a CPU quota (its own and
    its ancestors', in each hierarchy): where the kernel counts the quota's stops. Empty without a
    quota, so callers that read :func:`stopped_s` pay nothing then."""
    return [folder / "cpu.stat" for cgroup in cpu_cgroups(root, proc) for folder in cgroup.upward()
            if (_v2_quota if cgroup.version == "v2" else _v1_quota)(folder) is not None
            and (folder / "cpu.stat").is_file()]


def cpu_stat(path: Path) -> dict[str, str] | None:
    """A cgroup ``cpu.stat`` file as ``{name: value}`` (None when it cannot be read)."""
    text = _read(path)
    if text is None:
        return None
    return dict(line.split()[:2] for line in text.splitlines() if len(line.split()) >= 2)


def stat_stopped_s(stat: dict[str, str]) -> float:
    """The stops one ``cpu.stat`` counts (s): ``throttled_time`` (v1, ns) or ``throttled_usec`` (v2, µs).
    Raises KeyError or ValueError when it holds neither as a number."""
    key, scale = ("throttled_time", 1e9) if "throttled_time" in stat else ("throttled_usec", 1e6)
    return int(stat[key]) / scale


def stopped_s(stat_files: list[Path]) -> float | None:
    """How long the quota has stopped this process's groups so far (s), from each file of
    :func:`quota_stat_files`: ``throttled_time`` (cgroup v1, ns) or ``throttled_usec`` (v2, µs) —
    the time the group's run queue was stopped on each core, summed over the cores (so up to the cores
    × the wall time; a group's counter also counts stops that met only its other members, and a stop
    is added when it ends). Cumulative: the difference of two readings is what a stretch of work met,
    at most. None when there is no quota (nothing to read), a file cannot be read any more or holds no
    such counter."""
    if not stat_files:
        return None
    total = 0.0
    for path in stat_files:
        stat = cpu_stat(path)
        if stat is None:
            return None
        try:
            total += stat_stopped_s(stat)
        except (KeyError, ValueError):  # not a quota's counter as the kernel writes it: no number
            return None
    return total


def cpu_limits(root: str | Path = "/", proc: str = "proc/self") -> CpuLimits:
    """The affinity mask and the cgroup CPU quota of this process (see the module's docstring)."""
    count, source = affinity()
    return CpuLimits(count, source, cgroup_quota(root, proc))


def effective_cores() -> float:
    """The CPUs this process and its children can use: affinity mask capped by any CPU quota."""
    return cpu_limits().cores
