"""The smoke switch is parsed strictly and only scales sizes and durations."""

import pytest

from helpers import config


@pytest.mark.parametrize("value, expected", [
    (None, False), ("", False), ("0", False), ("false", False), ("No", False), ("off", False),
    ("1", True), ("true", True), ("YES", True), (" on ", True),
])
def test_parse_flag_accepts_clear_values(value, expected):
    assert config.parse_flag(value) is expected


@pytest.mark.parametrize("value", ["2", "maybe", "smoke", "tru"])
def test_parse_flag_refuses_anything_else_and_names_the_fix(value):
    with pytest.raises(ValueError, match="DLLAB_SMOKE=1"):
        config.parse_flag(value)


def test_smoke_mode_scales_sizes_and_durations(monkeypatch):
    monkeypatch.setenv(config.SMOKE_ENV, "1")
    assert config.is_smoke()
    assert config.sized(100, 10) == 10
    assert config.seconds(1.0) == pytest.approx(config.SMOKE_TIME_SCALE)
    monkeypatch.setenv(config.SMOKE_ENV, "0")
    assert not config.is_smoke()
    assert config.sized(100, 10) == 100
    assert config.seconds(1.0) == 1.0


def test_a_typo_in_the_environment_fails_loudly(monkeypatch):
    monkeypatch.setenv(config.SMOKE_ENV, "yes please")
    with pytest.raises(ValueError):
        config.is_smoke()


def test_sized_needs_one_type_and_seconds_a_duration():
    with pytest.raises(TypeError):
        config.sized(1.0, 1)
    with pytest.raises(ValueError):
        config.seconds(-1)


def test_results_dir_can_be_overridden(monkeypatch, tmp_path):
    monkeypatch.setenv(config.RESULTS_ENV, str(tmp_path))
    assert config.results_dir() == tmp_path


def test_start_method_setting_is_parsed_strictly(monkeypatch):
    import multiprocessing as mp

    monkeypatch.delenv(config.START_METHOD_ENV, raising=False)
    assert config.start_method() == config.default_start_method()
    for method in mp.get_all_start_methods():
        monkeypatch.setenv(config.START_METHOD_ENV, f" {method.upper()} ")
        assert config.start_method() == method
    monkeypatch.setenv(config.START_METHOD_ENV, "thread")
    with pytest.raises(ValueError, match="DLLAB_START_METHOD='thread'.*one of"):
        config.start_method()
    monkeypatch.setenv(config.START_METHOD_ENV, "")
    assert config.start_method() == config.default_start_method()


def test_use_start_method_makes_it_the_default_for_loaders(monkeypatch):
    import multiprocessing as mp

    import helpers

    before = mp.get_start_method()
    try:
        monkeypatch.setenv(config.START_METHOD_ENV, "spawn")
        assert helpers.use_start_method() == "spawn"
        loader = torch_loader()
        assert helpers.LoaderSettings.from_loader(loader).start_method == "spawn"
        assert [int(b) for b in loader] == [0, 1]
    finally:
        mp.set_start_method(before, force=True)


def torch_loader():
    from torch.utils.data import DataLoader

    import helpers

    return DataLoader(helpers.WorkDataset(2), num_workers=1)


def test_cache_dir_is_one_named_folder_emptied_for_each_run(monkeypatch, tmp_path):
    monkeypatch.setenv(config.CACHE_ENV, str(tmp_path))
    folder = config.cache_dir("13_remote_storage/local")
    assert folder == tmp_path / "13_remote_storage" / "local" and folder.is_dir()
    (folder / "object").write_bytes(b"x")
    assert config.cache_dir("13_remote_storage/local", empty=False) == folder and (folder / "object").exists()
    assert config.cache_dir("13_remote_storage/local") == folder and not any(folder.iterdir())
    for bad in ("", "/tmp/x", "../outside"):
        with pytest.raises(ValueError, match="relative folder"):
            config.cache_dir(bad)
    monkeypatch.delenv(config.CACHE_ENV)
    default = config.cache_dir("test-cache-dir-default", empty=False)
    try:
        assert default.parent == config.repo_root() / "cache"
    finally:
        default.rmdir()


# A hook on a fresh Python's first use of the temporary folder (tempfile's probe file), loaded by
# every process of the run below through PYTHONPATH: it writes the pid of each process that probes.
_PROBE_HOOK = '''
import os, tempfile
_probe = tempfile._get_default_tempdir
def _logged():
    with open(os.environ["DLLAB_PROBE_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")
    return _probe()
tempfile._get_default_tempdir = _logged
'''

_SPAWN_LOADER = '''
import os, sys
import torch
from torch.utils.data import DataLoader, TensorDataset
import helpers
if sys.argv[1] == "use_start_method":
    helpers.use_start_method()
loader = DataLoader(TensorDataset(torch.zeros(8, 4)), batch_size=1, num_workers=1,
                    multiprocessing_context="spawn", timeout=120)  # one: a spawned worker imports torch
assert sum(1 for _ in loader) == 8
print(os.getpid())
'''


def probing_workers(tmp_path, setup: str) -> tuple[set[int], list[str]]:
    """Run a spawn DataLoader in a fresh Python: the worker pids that probed the temporary folder,
    and what the run left in it."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    hook, log = tmp_path / f"hook-{setup}", tmp_path / f"probes-{setup}"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_PROBE_HOOK)
    # A short temporary folder: the workers' sockets go in it, and a Unix socket's path has at
    # most 107 bytes (pytest's tmp_path is too long: the worker's feeder thread fails, unseen).
    tmp = tempfile.mkdtemp(prefix="probe-")
    try:
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(root)]), "TMPDIR": tmp,
               "DLLAB_PROBE_LOG": str(log), config.START_METHOD_ENV: "spawn"}
        run = subprocess.run([sys.executable, "-c", _SPAWN_LOADER, setup], env=env, cwd=root,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        left = sorted(os.listdir(tmp))
    finally:
        shutil.rmtree(tmp)
    main = int(run.stdout.split()[-1])
    probed = {int(pid) for pid in log.read_text().split()} if log.exists() else set()
    return probed - {main}, left


def test_after_use_start_method_spawned_workers_never_probe_the_temporary_folder(tmp_path):
    # The premise: without it, a spawned worker sending tensors probes (and could leave the probe
    # file behind when shut down in the middle of it).
    workers, _ = probing_workers(tmp_path, "plain")
    assert workers, "no spawned worker probed the temporary folder: the premise of this test changed"
    workers, left = probing_workers(tmp_path, "use_start_method")
    assert workers == set(), f"workers {sorted(workers)} probed the temporary folder"
    assert left == [], left
