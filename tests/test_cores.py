"""Effective cores (helpers.cores): the affinity mask capped by a cgroup CPU quota, read from fake
cgroup files laid out as a container and a host show them (v1, v2, hybrid, none, below one CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

import helpers
from helpers import cores
from helpers.timing.analysis import settled_intervals_and_stops

V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_MOUNTS = "30 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"


def fake_root(tmp_path: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/self/mountinfo").write_text(mountinfo)
    for name, text in files.items():
        path = tmp_path / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return tmp_path


def test_v1_quota_of_the_process_group(tmp_path):
    root = fake_root(tmp_path, "4:memory:/x\n2:cpu,cpuacct:/hub/user\n0::/\n", V1_MOUNTS, {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
        "/sys/fs/cgroup/cpu,cpuacct/hub/user/cpu.cfs_quota_us": "150000",
        "/sys/fs/cgroup/cpu,cpuacct/hub/user/cpu.cfs_period_us": "100000",
    })
    quota = cores.cgroup_quota(root)
    assert quota.cpus == 1.5 and "cgroup v1" in quota.source and "hub/user" in quota.source


def test_v1_no_limit(tmp_path):
    root = fake_root(tmp_path, "2:cpu,cpuacct:/\n", V1_MOUNTS, {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
    })
    assert cores.cgroup_quota(root) is None


def test_v2_quota_below_one_cpu_inside_a_container(tmp_path):
    # Inside a container with a cgroup namespace the group is "/" and the quota sits on the mount.
    root = fake_root(tmp_path, "0::/\n", V2_MOUNTS, {"/sys/fs/cgroup/cpu.max": "50000 100000"})
    quota = cores.cgroup_quota(root)
    assert quota.cpus == 0.5 and quota.source.startswith("cgroup v2") and "'50000 100000'" in quota.source


def test_v2_no_limit_and_an_ancestors_quota(tmp_path):
    unlimited = fake_root(tmp_path / "a", "0::/user.slice/lab\n", V2_MOUNTS, {
        "/sys/fs/cgroup/user.slice/lab/cpu.max": "max 100000",
    })
    assert cores.cgroup_quota(unlimited) is None
    # A quota on a parent group limits its children: the tightest one counts.
    nested = fake_root(tmp_path / "b", "0::/hub/alice/kernel\n", V2_MOUNTS, {
        "/sys/fs/cgroup/hub/cpu.max": "200000 100000",
        "/sys/fs/cgroup/hub/alice/cpu.max": "100000 100000",
        "/sys/fs/cgroup/hub/alice/kernel/cpu.max": "max 100000",
    })
    quota = cores.cgroup_quota(nested)
    assert quota.cpus == 1.0 and "hub/alice/cpu.max" in quota.source


def test_the_tightest_quota_counts_wherever_it_sits_over_the_group(tmp_path):
    # v2: the parent's half CPU limits a child that allows a whole one (not the first quota found going up)
    v2 = fake_root(tmp_path / "v2", "0::/hub/alice/kernel\n", V2_MOUNTS, {
        "/sys/fs/cgroup/hub/cpu.max": "50000 100000",
        "/sys/fs/cgroup/hub/alice/cpu.max": "100000 100000",
        "/sys/fs/cgroup/hub/alice/kernel/cpu.max": "max 100000",
    })
    quota = cores.cgroup_quota(v2)
    assert quota.cpus == 0.5 and quota.source.endswith("/sys/fs/cgroup/hub/cpu.max = '50000 100000'")
    # v1: a quota on an ancestor, none on the group itself
    v1 = fake_root(tmp_path / "v1", "2:cpu,cpuacct:/hub/user\n", V1_MOUNTS, {
        "/sys/fs/cgroup/cpu,cpuacct/hub/cpu.cfs_quota_us": "100000",
        "/sys/fs/cgroup/cpu,cpuacct/hub/cpu.cfs_period_us": "100000",
        "/sys/fs/cgroup/cpu,cpuacct/hub/user/cpu.cfs_quota_us": "-1",
        "/sys/fs/cgroup/cpu,cpuacct/hub/user/cpu.cfs_period_us": "100000",
    })
    assert cores.cgroup_quota(v1).cpus == 1.0


def test_a_mount_whose_root_is_the_containers_own_group(tmp_path):
    # Docker on cgroup v1 without a cgroup namespace: /proc/self/cgroup names the host's path, and the
    # container's mount shows only that group, its root being the same path: the quota is at the mount.
    docker = V1_MOUNTS.replace("0:29 / /sys/fs/cgroup/cpu,cpuacct",
                               "0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct")
    v1 = fake_root(tmp_path / "v1", "2:cpu,cpuacct:/docker/abc\n", docker, {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
    })
    assert cores.cgroup_quota(v1).cpus == 1.5
    # v2 the same way: the mount's root a pod's group, the process in a child of it
    pod = V2_MOUNTS.replace("0:27 / /sys/fs/cgroup", "0:27 /kubepods/x /sys/fs/cgroup")
    v2 = fake_root(tmp_path / "v2", "0::/kubepods/x/c1\n", pod, {
        "/sys/fs/cgroup/cpu.max": "200000 100000",
        "/sys/fs/cgroup/c1/cpu.max": "max 100000",
    })
    assert cores.cgroup_quota(v2).cpus == 2.0
    # a group outside the mount's root is not below it: no quota read from the wrong folder
    other = fake_root(tmp_path / "other", "0::/elsewhere\n", pod, {"/sys/fs/cgroup/cpu.max": "50000 100000"})
    assert cores.cgroup_quota(other) is None
    # nor a group outside the process's cgroup namespace ("/../x"): its quota is not the namespace root's
    outside = fake_root(tmp_path / "outside", "0::/../x\n", V2_MOUNTS,
                        {"/sys/fs/cgroup/cpu.max": "50000 100000"})
    assert cores.cgroup_quota(outside) is None


def test_hybrid_v2_without_a_cpu_controller_reads_v1(tmp_path):
    root = fake_root(tmp_path, "1:cpu:/lab-quota\n0::/\n", V1_MOUNTS.replace("cpu,cpuacct", "cpu"), {
        "/sys/fs/cgroup/cpu/lab-quota/cpu.cfs_quota_us": "100000",
        "/sys/fs/cgroup/cpu/lab-quota/cpu.cfs_period_us": "100000",
    })
    assert cores.cgroup_quota(root).cpus == 1.0


def test_no_cgroup_files_at_all(tmp_path):
    assert cores.cgroup_quota(tmp_path) is None  # macOS, Windows, a sandbox without /proc


def test_the_quotas_stops_are_read_from_the_groups_that_hold_a_quota(tmp_path):
    # v1: throttled_time in ns, on the group with the quota (its unlimited parent is not read)
    v1 = fake_root(tmp_path / "v1", "2:cpu,cpuacct:/hub/user\n0::/\n", V1_MOUNTS, {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 9000000000",
        "/sys/fs/cgroup/cpu,cpuacct/hub/user/cpu.cfs_quota_us": "50000",
        "/sys/fs/cgroup/cpu,cpuacct/hub/user/cpu.cfs_period_us": "100000",
        "/sys/fs/cgroup/cpu,cpuacct/hub/user/cpu.stat":
            "nr_periods 40\nnr_throttled 12\nthrottled_time 250000000",
    })
    files = cores.quota_stat_files(v1)
    assert [f.parent.name for f in files] == ["user"] and cores.stopped_s(files) == pytest.approx(0.25)
    # v2: throttled_usec, summed over every group with a quota (the child's and the ancestor's own)
    v2 = fake_root(tmp_path / "v2", "0::/hub/alice\n", V2_MOUNTS, {
        "/sys/fs/cgroup/hub/cpu.max": "200000 100000",
        "/sys/fs/cgroup/hub/cpu.stat": "usage_usec 1\nnr_periods 5\nnr_throttled 1\nthrottled_usec 1000",
        "/sys/fs/cgroup/hub/alice/cpu.max": "50000 100000",
        "/sys/fs/cgroup/hub/alice/cpu.stat":
            "usage_usec 1\nnr_periods 5\nnr_throttled 3\nthrottled_usec 30000",
    })
    assert cores.stopped_s(cores.quota_stat_files(v2)) == pytest.approx(0.031)
    # no quota: nothing to read, and no number (not 0: nothing could stop the group)
    free = fake_root(tmp_path / "free", "0::/user.slice/lab\n", V2_MOUNTS, {
        "/sys/fs/cgroup/user.slice/lab/cpu.max": "max 100000",
        "/sys/fs/cgroup/user.slice/lab/cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_usec 0",
    })
    assert cores.quota_stat_files(free) == [] and cores.stopped_s([]) is None
    # a file gone since (the group removed): None, not a stale number
    (tmp_path / "v2/sys/fs/cgroup/hub/alice/cpu.stat").unlink()
    assert cores.stopped_s(files + [tmp_path / "v2/sys/fs/cgroup/hub/alice/cpu.stat"]) is None


def test_record_reads_the_quotas_stops_per_epoch_inside_iter_and_up_to_the_first_batch(monkeypatch, tmp_path):
    # A fake cpu.stat that the loader and the step advance: 5 ms while iter() runs (the batch sampler's
    # __iter__), 1 ms per item loaded (in the main process: 2 before the first batch is in hand), 10 ms
    # per step. Each window must count its own.
    from torch.utils.data import DataLoader

    from helpers.timing import recorder

    stat, stopped = tmp_path / "cpu.stat", [0]

    def advance(us):
        stopped[0] += us
        stat.write_text(f"nr_periods 1\nnr_throttled 1\nthrottled_usec {stopped[0]}\n")

    class Items(list):
        def __getitem__(self, i):
            advance(1_000)
            return list.__getitem__(self, i)

    class Pairs:
        def __iter__(self):  # runs inside iter(loader)
            advance(5_000)
            return iter([[0, 1], [2, 3], [4, 5], [6, 7]])

        def __len__(self):
            return 4

    advance(0)
    monkeypatch.setattr(recorder, "quota_stat_files", lambda: [stat])
    tl = helpers.record(DataLoader(Items(range(8)), batch_sampler=Pairs()), lambda batch: advance(10_000),
                        epochs=2)
    for e in tl.epochs:
        assert e.stopped_in_iter_s == pytest.approx(0.005)
        assert e.stopped_to_first_s == pytest.approx(0.002)
        assert e.stopped_s == pytest.approx(0.005 + 0.008 + 0.040)
    assert tl.stopped_s == pytest.approx(2 * 0.053)
    # each batch: from its epoch's iter() to its step's end (iter 5 ms, 2 ms per batch, 10 ms per step),
    # so each interval between steps holds the next batch's loading and its step
    assert [b.stopped for b in tl.batches] == pytest.approx([0.017, 0.029, 0.041, 0.053] * 2)
    assert [stops for _, stops in settled_intervals_and_stops(tl)] == pytest.approx([0.012] * 6)
    # without a quota nothing is read, and the timeline says so with None
    monkeypatch.setattr(recorder, "quota_stat_files", lambda: [])
    plain = helpers.record(DataLoader(list(range(8)), batch_size=2), epochs=1)
    assert plain.epochs[0].stopped_s is None and plain.stopped_s is None
    assert {b.stopped for b in plain.batches} == {None}
    # a counter that is not a number: no reading, not a crash inside record()
    stat.write_text("nr_periods 1\nthrottled_usec many\n")
    assert cores.stopped_s([stat]) is None


def test_effective_cores_cap_the_affinity_and_describe_both():
    two = cores.CpuLimits(2, "os.sched_getaffinity", None)
    assert two.cores == 2.0 and two.whole == 2 and not two.quota_limits and "no CPU quota" in two.describe()
    half_quota = cores.CpuQuota(0.5, "cgroup v2 x/cpu.max = '50000 100000'")
    half = cores.CpuLimits(2, "os.sched_getaffinity", half_quota)
    assert half.cores == 0.5 and half.whole == 1 and half.quota_limits
    assert half.describe().startswith("0.5 effective: 2 in the affinity mask")
    assert "capped by" in half.describe()
    wide = cores.CpuLimits(2, "os.sched_getaffinity", cores.CpuQuota(8.0, "cgroup v1 y"))
    assert wide.cores == 2.0 and not wide.quota_limits and "with a CPU quota of 8" in wide.describe()
    # A quota is a pool the group's processes share: under 1.5 CPUs it takes two busy processes to use
    # it all (a count rounded down left half a CPU unused, and 04's and 14's checks then compared the
    # 1.5x that two workers measured with one core's worth: red).
    assert cores.CpuLimits(4, "m", cores.CpuQuota(1.5, "q")).whole == 2
    assert cores.CpuLimits(4, "m", cores.CpuQuota(1.0, "q")).whole == 1
    assert cores.CpuLimits(4, "m", cores.CpuQuota(0.25, "q")).whole == 1
    assert cores.CpuLimits(4, "m", cores.CpuQuota(2.0000000001, "q")).whole == 2


def test_available_cores_follow_the_quota(monkeypatch):
    quota = cores.CpuLimits(2, "os.sched_getaffinity", cores.CpuQuota(1.0, "cgroup v1 z"))
    monkeypatch.setattr(cores, "cpu_limits", lambda *a, **k: quota)
    assert helpers.available_cores() == 1 and helpers.effective_cores() == 1.0
    assert "capped by a CPU quota of 1 CPU" in str(helpers.describe_machine())


@pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="no /proc/self/cgroup (not Linux)")
def test_this_machine_reads_without_error():
    limits = helpers.cpu_limits()
    assert limits.affinity >= 1 and limits.cores > 0
