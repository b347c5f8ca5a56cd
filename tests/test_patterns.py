"""Patterns a learner copies are shown in the notebooks' markdown as code, and stay the code that runs.

A *pattern block* is a ```python block in a markdown cell whose first line names where its code
lives: ``# helpers/data/prefetch.py · DevicePrefetcher._prepare``. The rest of the block must be exactly
that object's source in ``helpers`` (the code the lab runs: workers import it by name under spawn).
No code cell shows a pattern with ``inspect.getsource``: read as committed, without outputs, that
shows nothing."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BLOCK = re.compile(r"```python\n# (helpers/[\w/]+\.py) · ([\w.]+)\n(.*?)```", re.S)


def pattern_blocks(notebook: Path) -> list[tuple[int, str, str, str]]:
    """(cell index, module path, qualified name, code) of every pattern block in a notebook."""
    cells = json.loads(notebook.read_text())["cells"]
    return [(i, path, name, code) for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"
            for path, name, code in BLOCK.findall("".join(cell["source"]))]


def source_of(path: str, name: str) -> str:
    module = importlib.import_module(path[:-3].replace("/", "."))
    obj = module
    for part in name.split("."):
        obj = getattr(obj, part)
    return textwrap.dedent(inspect.getsource(obj))


def mismatch(path: str, name: str, code: str) -> str:
    """'' when ``code`` is the source of ``name`` in ``path``; else where they part, and the fix."""
    source = source_of(path, name)
    if code == source:
        return ""
    shown, real = code.splitlines(), source.splitlines()
    pairs = enumerate(zip(shown, real, strict=False))
    line = next((k for k, (a, b) in pairs if a != b), min(len(shown), len(real)))
    return (f"{path} · {name} differs from the block from line {line + 1}:\n"
            f"  block:   {shown[line] if line < len(shown) else '(ends)'}\n"
            f"  helpers: {real[line] if line < len(real) else '(ends)'}\n"
            "  edit both together: copy the helpers source into the notebook's block")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_pattern_block_is_the_code_that_runs(notebook):
    problems = [f"cell {i}: {text}" for i, path, name, code in pattern_blocks(notebook)
                if (text := mismatch(path, name, code))]
    assert not problems, f"{notebook.name}:\n" + "\n".join(problems)


def test_no_code_cell_shows_a_pattern_with_getsource():
    for notebook in NOTEBOOKS:
        for i, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            if cell["cell_type"] == "code":
                assert "getsource" not in "".join(cell["source"]), f"{notebook.name} cell {i}"


def test_the_patterns_a_learner_copies_are_shown():
    shown = {(nb.stem[:2], name) for nb in NOTEBOOKS for _, _, name, _ in pattern_blocks(nb)}
    for expected in [("05", "EpochSampler"), ("05", "SharedEpoch"), ("07", "DevicePrefetcher._prepare"),
                     ("07", "DevicePrefetcher._hand_out"), ("08", "BatchedSqliteDataset.__getitems__"),
                     ("13", "S3Dataset.__getitems__"), ("14", "JpegDataset.__getitem__"),
                     ("14", "JpegDataset.__getitems__"), ("14", "normalize_on_device"),
                     ("18", "reseed_from_worker"), ("18", "PerSampleDraws.__getitem__"),
                     ("18", "ShardedStream.__iter__"), ("18", "PadToBatch.__call__"),
                     ("18", "CompiledStep.__call__"), ("18", "mark_batch_dynamic")]:
        assert expected in shown, expected


def test_a_changed_block_is_caught_and_named():
    code = source_of("helpers/data/prefetch.py", "DevicePrefetcher._hand_out")
    assert mismatch("helpers/data/prefetch.py", "DevicePrefetcher._hand_out", code) == ""
    changed = code.replace("wait_event(copied)", "wait_stream(self.stream)")
    text = mismatch("helpers/data/prefetch.py", "DevicePrefetcher._hand_out", changed)
    assert "differs from the block" in text and "wait_stream(self.stream)" in text
