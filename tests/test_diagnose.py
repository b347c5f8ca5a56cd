"""helpers.diagnose: it names the planted cause of each mystery loader, leaves a fed loader
alone, agrees with torch.profiler, and its command line works on a module outside the lab
with clear errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import helpers
from helpers.diagnosis import PLANTED

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_the_diagnosis_names_each_planted_cause(name):
    loader, step, steps = helpers.mystery_loader(name, smoke=True)
    d = helpers.diagnose(loader, step, steps=steps, progress=False)
    assert PLANTED[name] in d.knobs(), str(d)
    others = set(PLANTED.values()) - {PLANTED[name], "num_workers"}
    assert not others & set(d.knobs()), f"loader {name}: a cause that was not planted: {d.knobs()}"


def test_a_loader_that_keeps_up_gets_no_data_knob():
    loader = DataLoader(helpers.WorkDataset(512, item_wait_s=0.002), batch_size=16, num_workers=2)
    d = helpers.diagnose(loader, helpers.ModelledStep(0.03), steps=24, progress=False)
    assert d.knobs() == ["none"], str(d)
    assert d.headspace < 1.5 and d.steady_wait_share < 0.1


def test_the_profilers_dataloader_spans_agree_with_the_labs_waits(tmp_path):
    loader, step, _ = helpers.mystery_loader("A", smoke=True)
    timeline, spans, path = helpers.profile(loader, step, steps=8, path=tmp_path / "trace.json")
    diffs = helpers.profiler_agreement(timeline, spans)
    assert len(spans) == len(timeline.batches) == 8
    assert max(abs(x) for x in diffs) < 0.002
    assert path.exists() and '"DataLoader Lab"' in path.read_text()


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="DataLoader"):
        helpers.diagnose([1, 2, 3])
    with pytest.raises(ValueError, match="steps"):
        helpers.diagnose(DataLoader(list(range(8))), steps=1)
    with pytest.raises(ValueError, match="mystery loaders"):
        helpers.mystery_loader("D")


def _cli(tmp_path, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    return subprocess.run([sys.executable, "-m", "helpers.diagnose", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_command_line_diagnoses_a_module_outside_the_lab(tmp_path):
    (tmp_path / "my_loader.py").write_text(
        "from torch.utils.data import DataLoader\nimport helpers\n\n"
        "def make_loader():\n"
        "    return DataLoader(helpers.WorkDataset(128, item_wait_s=0.004), batch_size=16, num_workers=1)\n\n"
        "def not_a_loader():\n    return [1, 2]\n")
    done = _cli(tmp_path, "my_loader:make_loader", "--steps", "8", "--step-ms", "20", "--trace", "t.json")
    assert done.returncode == 0, done.stderr
    assert "→ num_workers" in done.stdout and (tmp_path / "t.json").exists()
    for args, message in ((["nowhere:make_loader"], "no module named 'nowhere'"),
                          (["my_loader:missing"], "has no function 'missing'"),
                          (["my_loader:not_a_loader"], "not a torch.utils.data.DataLoader"),
                          (["my_loader"], "expected module:function"),
                          (["my_loader:make_loader", "--steps", "1"], "--steps must be at least 2")):
        done = _cli(tmp_path, *args)
        assert done.returncode != 0 and message in done.stderr, (args, done.stderr[-500:])
