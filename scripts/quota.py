"""Run a command inside a CPU quota, as a class server sets one:
``python scripts/quota.py --cpus 1 -- make notebooks`` (``make quota``, ``QUOTA=0.5``).

JupyterHub's ``cpu_limit``, Docker's ``--cpus`` and Kubernetes' CPU limits are CFS quotas: the
processes of a group may use ``cpus`` CPUs in total, however many cores they see, and a group
that has spent its quota is stopped until the next period. This script makes such a group — a
cgroup v1 ``cpu`` folder (``cpu.cfs_quota_us``/``cpu.cfs_period_us``) or a cgroup v2 child with
``cpu.max`` — inside the caller's own group, runs the command in it (every process the command
starts stays inside), prints how often the quota stopped it, stops whatever the command left in
the group and removes the group, on success, failure or Ctrl-C. The exit status is the command's.

It needs Linux and the right to make a cgroup (root, or a delegated cgroup v2 subtree); where
that is missing it says so and exits 3 without running anything.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _load_cores():
    """helpers/cores.py alone (standard library only), without importing helpers and torch."""
    spec = importlib.util.spec_from_file_location(
        "dllab_cores", Path(__file__).resolve().parent.parent / "helpers" / "cores.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


cores = _load_cores()

UNAVAILABLE = 3


class QuotaUnavailable(RuntimeError):
    """No CPU quota group can be made here; the message says why and what to do."""


class QuotaGroup:
    """A cgroup with a CPU quota, made inside this process's own group and removed by ``close``."""

    def __init__(self, cpus: float, period_us: int = 100_000):
        if not cpus > 0 or period_us < 1000:
            raise ValueError(
                f"a quota needs cpus > 0 and a period of at least 1000 us, got {cpus}, {period_us}")
        self.cpus, self.period_us = cpus, period_us
        self.quota_us = max(1000, round(cpus * period_us))
        found = cores.cpu_cgroups()
        if not found:
            raise QuotaUnavailable(
                "no cgroup hierarchy with a CPU controller was found (/proc/self/cgroup, "
                "/proc/self/mountinfo): CPU quotas are a Linux feature. On macOS or Windows, run the "
                "lab in a Linux container with --cpus=1 instead (docker run --cpus=1 ...).")
        errors = []
        for cgroup in sorted(found, key=lambda c: c.version):  # v1 first where both exist
            try:
                self._make(cgroup)
                return
            except OSError as error:
                errors.append(f"{cgroup.version} at {cgroup.group}: {error.strerror or error}")
        raise QuotaUnavailable(
            "could not make a CPU quota group (" + "; ".join(errors) + "). Run it as root "
            "(sudo make quota), or on a machine whose cgroup v2 subtree is delegated to you "
            "(systemd-run --user --scope -p CPUQuota=100% make notebooks does the same there).")

    def _make(self, cgroup: cores.CpuCgroup) -> None:
        folder = cgroup.group / f"dllab-quota-{os.getpid()}"
        if cgroup.version == "v2":
            controllers = (cgroup.group / "cgroup.subtree_control").read_text().split()
            if "cpu" not in controllers:
                (cgroup.group / "cgroup.subtree_control").write_text("+cpu")
        folder.mkdir()
        try:
            if cgroup.version == "v1":
                (folder / "cpu.cfs_period_us").write_text(str(self.period_us))
                (folder / "cpu.cfs_quota_us").write_text(str(self.quota_us))
            else:
                (folder / "cpu.max").write_text(f"{self.quota_us} {self.period_us}")
        except OSError:
            folder.rmdir()
            raise
        self.version, self.folder, self.procs = cgroup.version, folder, folder / "cgroup.procs"

    def enter(self) -> None:
        """Move the calling process into the group (used between fork and exec)."""
        self.procs.write_text(str(os.getpid()))

    def throttling(self) -> str:
        """How often and how long the quota stopped the group, from its ``cpu.stat``."""
        stat = cores.cpu_stat(self.folder / "cpu.stat")
        if stat is None:
            raise OSError(f"cannot read {self.folder / 'cpu.stat'}")
        periods, throttled = int(stat.get("nr_periods", 0)), int(stat.get("nr_throttled", 0))
        stopped_s = cores.stat_stopped_s({"throttled_usec": "0", **stat})
        share = throttled / periods if periods else 0.0
        return (f"throttled in {throttled} of {periods} periods ({share:.0%}), "
                f"stopped for {stopped_s:.1f} s in all")

    def close(self) -> None:
        """Stop what the command left in the group, then remove the group."""
        for _ in range(50):
            pids = [int(p) for p in self.procs.read_text().split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        self.folder.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/quota.py")
    parser.add_argument("--cpus", type=float, default=1.0,
                        help="CPUs the command may use in total (e.g. 0.5)")
    parser.add_argument("--period-ms", type=float, default=100.0, help="the quota's period (default 100 ms)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("give a command after --, e.g. -- make notebooks")
    if not options.cpus > 0:
        parser.error(f"--cpus must be above 0 (e.g. 1 or 0.5), got {options.cpus}")
    if not options.period_ms >= 1:
        parser.error(f"--period-ms must be at least 1, got {options.period_ms}")
    try:
        group = QuotaGroup(options.cpus, round(options.period_ms * 1000))
    except QuotaUnavailable as error:
        print(f"quota: {error}", file=sys.stderr)
        return UNAVAILABLE
    print(f"quota: {options.cpus:g} CPU in all ({group.quota_us} us every {group.period_us} us, "
          f"cgroup {group.version} {group.folder}) for: {' '.join(command)}", flush=True)
    started = time.perf_counter()
    try:
        return subprocess.run(command, preexec_fn=group.enter).returncode
    finally:
        took_s = time.perf_counter() - started
        print(f"quota: {took_s:.0f} s inside {options.cpus:g} CPU; {group.throttling()}", flush=True)
        group.close()


if __name__ == "__main__":
    sys.exit(main())
