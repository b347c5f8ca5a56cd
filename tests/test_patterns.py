"""Patterns a learner copies are shown in the notebooks' markdown as code, and stay the code that runs.

A *pattern block* is a ```python block in a markdown cell whose first line names where its code
lives: ``# helpers/data/prefetch.py · DevicePrefetcher``. The rest of the block must be exactly
that object's source in ``helpers`` (the code the lab runs: workers import it by name under spawn).
A block may open with import lines, each one of that module's own, so that a whole class can be
pasted into a script and run. No code cell shows a pattern with ``inspect.getsource``: read as
committed, without outputs, that shows nothing."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
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


def split_imports(code: str) -> tuple[list[str], str]:
    """The import lines a block opens with (blank lines between them dropped), and the rest."""
    lines = code.splitlines(keepends=True)
    k = 0
    while k < len(lines) and (lines[k].startswith(("import ", "from ")) or not lines[k].strip()):
        k += 1
    return [line.strip() for line in lines[:k] if line.strip()], "".join(lines[k:])


def mismatch(path: str, name: str, code: str) -> str:
    """'' when ``code`` is the source of ``name`` in ``path`` (after imports that module makes);
    else where they part, and the fix."""
    imports, code = split_imports(code)
    module_lines = set(inspect.getsource(importlib.import_module(path[:-3].replace("/", "."))).splitlines())
    foreign = [line for line in imports if line not in module_lines]
    if foreign:
        return f"{path} does not import what the block imports: {foreign[0]}"
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
    for expected in [("05", "EpochSampler"), ("05", "SharedEpoch"), ("07", "DevicePrefetcher"),
                     ("08", "BatchedSqliteDataset.__getitems__"),
                     ("13", "S3Dataset.__getitems__"), ("14", "JpegDataset.__getitem__"),
                     ("14", "JpegDataset.__getitems__"), ("14", "normalize_on_device"),
                     ("18", "reseed_from_worker"), ("18", "PerSampleDraws.__getitem__"),
                     ("18", "ShardedStream.__iter__"), ("18", "PadToBatch.__call__"),
                     ("18", "CompiledStep.__call__"), ("18", "mark_batch_dynamic")]:
        assert expected in shown, expected


def test_a_changed_block_is_caught_and_named():
    code = "import torch\n\n\n" + source_of("helpers/data/prefetch.py", "DevicePrefetcher")
    assert mismatch("helpers/data/prefetch.py", "DevicePrefetcher", code) == ""
    changed = code.replace("wait_event(copied)", "wait_stream(self.stream)")
    text = mismatch("helpers/data/prefetch.py", "DevicePrefetcher", changed)
    assert "differs from the block" in text and "wait_stream(self.stream)" in text
    text = mismatch("helpers/data/prefetch.py", "DevicePrefetcher", "import numpy\n\n" + code)
    assert "does not import what the block imports: import numpy" in text


# -- the learner's cells that run in a child kernel (notebook 20) ---------------------------------
CHILD_CELL = re.compile(r"```python\n((?:%%writefile [\w.]+\n)?# runs in a child kernel.*?)```", re.S)


def child_kernel_blocks(notebook: Path) -> list[tuple[int, str]]:
    """(cell index, code) of every block that shows a cell a child kernel runs."""
    cells = json.loads(notebook.read_text())["cells"]
    return [(i, code) for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"
            for code in CHILD_CELL.findall("".join(cell["source"]))]


def child_cells() -> dict[str, str]:
    from helpers.data import child_kernel

    return {name: value for name, value in vars(child_kernel).items()
            if name.startswith("CELL_") and isinstance(value, str)}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_child_kernel_cell_shown_is_the_cell_that_runs(notebook):
    known = set(child_cells().values())
    problems = [f"cell {i}: a block marked '# runs in a child kernel' that helpers/data/child_kernel.py does "
                f"not run (copy its CELL_ constant into the block):\n{code[:200]}"
                for i, code in child_kernel_blocks(notebook) if code not in known]
    assert not problems, f"{notebook.name}:\n" + "\n".join(problems)


def test_notebook_20_shows_each_cell_its_child_kernel_runs(tmp_path):
    shown = {code for _, code in child_kernel_blocks(ROOT / "notebooks" / "20_dataset_in_a_cell.ipynb")}
    cells = child_cells()
    missing = [name for name, code in cells.items() if name != "CELL_MODULE_EDITED" and code not in shown]
    assert not missing, missing
    # a changed block is found, and is not a cell that runs
    changed = cells["CELL_DEFINITIONS"].replace("i * i", "i + i")
    notebook = tmp_path / "changed.ipynb"
    notebook.write_text(json.dumps({"cells": [{"cell_type": "markdown",
                                               "source": ["Text\n```python\n" + changed + "```\n"]}]}))
    assert child_kernel_blocks(notebook) == [(0, changed)] and changed not in set(cells.values())


# -- the device prefetcher, copied whole ------------------------------------------------------------
def device_prefetcher_block() -> str:
    (code,) = [code for _, _, name, code in pattern_blocks(ROOT / "notebooks" / "07_device_prefetch.ipynb")
               if name == "DevicePrefetcher"]
    return code


def test_the_device_prefetcher_block_imports_only_torch_and_the_standard_library():
    tree = ast.parse(device_prefetcher_block())
    modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    modules |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert modules and modules <= {"torch"} | set(sys.stdlib_module_names), modules


#: Appended to the block in a script of its own: every batch, in order, on the CPU; a stop part-way
#: leaves no thread behind; an error in the loader reaches the loop.
DRIVER = """
import threading

batches = [(torch.full((2, 3), float(i)), torch.tensor([i])) for i in range(7)]
assert [int(labels) for _, labels in DevicePrefetcher(batches, "cpu")] == list(range(7))
nested = [{"y": [torch.tensor(i)]} for i in range(3)]
assert [int(b["y"][0]) for b in DevicePrefetcher(nested, "cpu")] == [0, 1, 2]
images = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
(moved, _), = DevicePrefetcher([(images, torch.arange(2))], "cpu", normalize=([0.5] * 3, [0.5] * 3))
assert moved.dtype == torch.float32 and bool((moved == 1).all())
prefetcher = DevicePrefetcher(batches, "cpu", depth=1)
for i, _ in enumerate(prefetcher):
    if i == 2:
        break
prefetcher.thread.join(timeout=2)  # close() does not wait for it: it ends by itself
assert threading.active_count() == 1, threading.enumerate()


def failing():
    yield batches[0]
    raise ValueError("the loader failed")


try:
    list(DevicePrefetcher(failing(), "cpu"))
    raise AssertionError("the error did not reach the loop")
except ValueError:
    pass
print("every batch, in order")
"""


def test_the_device_prefetcher_block_runs_alone_in_a_script(tmp_path):
    script = tmp_path / "prefetch_script.py"
    script.write_text(device_prefetcher_block() + DRIVER)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "every batch, in order"
