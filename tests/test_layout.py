"""The package's layout holds its architecture (helpers/README.md): which part may import which,
how long a module may grow, where private torch names may be touched, and that the old module
names the notebooks use are the moved modules themselves.

Everything here reads the source with ``ast`` (no torch import), except the alias test.
"""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "helpers"

#: Each module's part: the longest dotted prefix that names it.
PARTS = {
    "helpers.config": "base",
    "helpers.cores": "base",
    "helpers.system": "base",
    "helpers.palette": "base",
    "helpers.models": "models",
    "helpers.timing": "timing",
    "helpers.data": "data",
    "helpers.classroom": "classroom",
    "helpers.lessons": "lessons",
    "helpers.plots": "plots",
    "helpers.explorers": "explorers",
}
#: The composition root and the command-line entry points: they may import any part; no part may
#: import them (``helpers`` itself is the notebooks' façade, not a module to build on).
ENTRY = {"helpers", "helpers.cli", "helpers.diagnose", "helpers.startup", "helpers.failures",
         "helpers._resume_child", "helpers._dist_child", "helpers._torchrun"}
#: part -> the parts it may import (itself included). The instrument imports nothing from the
#: workloads, the model, the lessons, the classroom, the explorers or the plots.
ALLOWED = {
    "base": {"base"},
    "models": {"base", "models"},
    "timing": {"base", "timing"},
    "data": {"base", "models", "timing", "data"},
    "classroom": {"base", "models", "timing", "data", "classroom"},
    "lessons": {"base", "models", "timing", "data", "classroom", "lessons"},
    "plots": {"base", "timing", "data", "plots"},
    "explorers": {"base", "models", "timing", "data", "plots", "explorers"},
}
MAX_LINES = 420
#: The one module that touches private torch names (``torch.utils.data``'s with its self_check, and
#: the ``torch._dynamo`` calls of notebook 18).
TORCH_INTERNALS = "helpers/timing/torch_internals.py"


@dataclass(frozen=True)
class Edge:
    importer: str
    target: str
    path: str
    line: int
    lazy: bool  #: inside a function (runs when called, not on import)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str, root: Path) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_graph(root: Path, package: str = "helpers") -> list[Edge]:
    """Every import of ``package`` by a module under ``root/package``: top-level and in functions,
    ``import x``, ``from x import y`` (relative too; ``y`` a submodule counts as importing it) and
    ``importlib.import_module("x")`` with a constant name."""
    edges = []
    for path in sorted((root / package).rglob("*.py")):
        importer = module_name(path, root)
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text())
        functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
        lazy_lines = {n.lineno for f in functions for n in ast.walk(f) if hasattr(n, "lineno") and n is not f}
        rel = str(path.relative_to(root))

        def add(target: str, node: ast.AST) -> None:
            if target == package or target.startswith(package + "."):
                edges.append(Edge(importer, target, rel, node.lineno, node.lineno in lazy_lines))  # noqa: B023

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name, node)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(importer, is_package, node.level, node.module) if node.level else node.module
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    add(sub if _is_module(sub, root) else base, node)
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and ast.unparse(node.func) in ("importlib.import_module", "__import__")):
                name = node.args[0].value
                if name.startswith("."):
                    level = len(name) - len(name.lstrip("."))
                    name = _resolve(importer, is_package, level, name.lstrip(".") or None)
                add(name, node)
    return edges


def part_of(module: str, parts: dict[str, str]) -> str | None:
    matches = [prefix for prefix in parts if module == prefix or module.startswith(prefix + ".")]
    return parts[max(matches, key=len)] if matches else None


def layout_violations(edges: list[Edge], parts: dict[str, str], allowed: dict[str, set[str]],
                      entry: set[str]) -> list[str]:
    """What breaks the rule, one line each, naming the file, the line and the two parts."""
    found = []
    for e in edges:
        where = f"{e.path}:{e.line}{' (in a function)' if e.lazy else ''} imports {e.target}"
        if e.importer in entry:
            continue
        source = part_of(e.importer, parts)
        if source is None:
            found.append(f"{e.path}: module {e.importer} is in no part: add it to PARTS (or ENTRY)")
            continue
        if e.target in entry:
            found.append(f"{where}: an entry point or the façade; import the module that defines the name")
            continue
        target = part_of(e.target, parts)
        if target is None:
            found.append(f"{where}: {e.target} is in no part")
        elif target not in allowed[source]:
            found.append(f"{where}: {source} may import only {', '.join(sorted(allowed[source]))}")
    return found


def test_every_part_imports_only_what_the_layout_allows():
    edges = import_graph(ROOT)
    assert len(edges) > 100  # the walk found the package's imports
    assert layout_violations(edges, PARTS, ALLOWED, ENTRY) == []


def test_the_instrument_imports_no_workload_lesson_explorer_or_plot():
    """The issue's rule, said on its own: whatever ALLOWED becomes, timing stays self-contained."""
    edges = [e for e in import_graph(ROOT) if part_of(e.importer, PARTS) == "timing"]
    assert edges
    outside = [f"{e.path}:{e.line} imports {e.target}" for e in edges
               if part_of(e.target, PARTS) not in {"base", "timing"}]
    assert outside == []


def test_a_forbidden_import_is_caught_at_the_top_and_in_a_function(tmp_path):
    def write(relative: str, text: str) -> None:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))

    for package in ("helpers", "helpers/timing", "helpers/data", "helpers/plots"):
        write(f"{package}/__init__.py", "")
    write("helpers/config.py", "")
    write("helpers/data/datasets.py", "from ..timing import clock\n")  # allowed: data -> timing
    write("helpers/plots/draw.py", "")
    write("helpers/timing/clock.py", """\
        from .. import config
        from ..data.datasets import WorkDataset

        def plot():
            from ..plots import draw
            import importlib
            return importlib.import_module("helpers.plots.draw")
        """)
    write("helpers/timing/uses_facade.py", "import helpers\n")
    edges = import_graph(tmp_path)
    found = layout_violations(edges, PARTS, ALLOWED, ENTRY)
    assert any("clock.py:2 imports helpers.data.datasets: timing may import only base, timing" in f
               for f in found), found
    assert any("clock.py:5 (in a function) imports helpers.plots.draw" in f for f in found), found
    assert any("clock.py:7 (in a function) imports helpers.plots.draw" in f for f in found), found
    assert any("uses_facade.py:1 imports helpers: an entry point" in f for f in found), found
    assert not any("datasets.py" in f or "helpers.config" in f for f in found), found


# -- module size -------------------------------------------------------------------------------------
def oversized(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines())
             for p in (root / "helpers").rglob("*.py")}
    return {path: n for path, n in sizes.items() if n > limit}


def test_no_module_is_longer_than_the_bound():
    assert oversized(ROOT) == {}, f"split these (at most {MAX_LINES} lines): {oversized(ROOT)}"


def test_the_size_bound_names_a_long_module(tmp_path):
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "helpers" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert oversized(tmp_path) == {"helpers/long.py": MAX_LINES + 1}


# -- private torch names -----------------------------------------------------------------------------
#: Single-underscore attributes that are not torch internals: the process exit a server's watchdog
#: calls, IPython's display protocol, the lab's own dataset field, ipykernel's list of the children
#: its shutdown waits for (helpers/system.py, reap_children_at_kernel_shutdown).
NOT_TORCH = {"os._exit", "_repr_html_", "_repr_mimebundle_", "dataset._factor", "Kernel._process_children",
             "sys._current_frames"}  # Python's own: the line sampler of the diagnosis's profile


def private_torch_uses(path: Path) -> list[str]:
    """``from torch… import _x``, ``torch._x``/``torch.utils.data._utils`` modules, the private
    ``dataloader`` module, and ``obj._name`` on anything but ``self``/``cls``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            names = [a.name for a in node.names]
            if (any(p.startswith("_") for p in node.module.split("."))
                    or any(n.startswith("_") or n == "dataloader" for n in names)):
                found.append(f"{node.lineno}: from {node.module} import {', '.join(names)}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("torch") and (any(p.startswith("_") for p in alias.name.split("."))
                                                       or alias.name.endswith(".dataloader")):
                    found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            text = f"{owner}.{node.attr}"
            if owner not in ("self", "cls") and text not in NOT_TORCH and node.attr not in NOT_TORCH:
                found.append(f"{node.lineno}: {text}")
    return found


def test_only_torch_internals_touches_private_torch_names():
    # _torchrun.py swaps torch.distributed's public TCPStore class (its docstring says why).
    exempt = {TORCH_INTERNALS, "helpers/_torchrun.py"}
    found = {str(p.relative_to(ROOT)): private_torch_uses(p) for p in HELPERS.rglob("*.py")
             if str(p.relative_to(ROOT)) not in exempt}
    assert {path: uses for path, uses in found.items() if uses} == {}
    assert private_torch_uses(ROOT / TORCH_INTERNALS)  # the check sees what that module does


def test_the_private_torch_check_names_what_it_finds(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from torch.utils.data._utils import worker\nimport torch.utils.data.dataloader\n"
                    "def f(it, self):\n    return it._workers, self._mine, os._exit, x._repr_html_\n")
    assert private_torch_uses(path) == [
        "1: from torch.utils.data._utils import worker", "2: import torch.utils.data.dataloader",
        "4: it._workers"]


def test_the_torch_internals_self_check_is_called_before_the_instrument_relies_on_them():
    calls = {str(p.relative_to(ROOT)) for p in HELPERS.rglob("*.py")
             if "torch_internals.self_check()" in p.read_text()}
    assert {"helpers/classroom/setup_check.py", "helpers/timing/diagnosis/run.py"} <= calls, calls


# -- old names ---------------------------------------------------------------------------------------
def test_old_module_names_are_the_moved_modules_themselves():
    import helpers

    assert helpers._MOVED
    for old, new in helpers._MOVED.items():
        moved = importlib.import_module(new)
        assert importlib.import_module(f"helpers.{old}") is moved, old
        assert getattr(helpers, old) is moved, old
        assert not (HELPERS / f"{old}.py").exists(), f"helpers/{old}.py: an alias needs no file"
    # what the notebooks' code cells call through them
    assert helpers.diagnosis.PLANTED
    assert helpers.transfer.PinnedMemoryTaken and helpers.transfer.pinned_block_bytes
    assert helpers.theory.measured_main_s and helpers.pauses.measure_collections
    assert helpers.torch_internals.shutdown_workers and helpers.startup.record_in_child
    assert helpers.config.repo_root() == ROOT


@pytest.mark.parametrize("module", ["diagnose", "startup", "failures", "_resume_child", "_dist_child",
                                    "_torchrun"])
def test_the_commands_children_run_are_files(module):
    """``python -m helpers.X`` needs a file (runpy does not follow a sys.modules alias)."""
    assert (HELPERS / f"{module}.py").is_file()
    assert f"helpers.{module}" not in importlib.import_module("helpers")._MOVED


def test_every_explorer_shares_the_one_base():
    import helpers
    from helpers.explorers.base import Explorer

    names = [n for n in dir(helpers) if n.endswith("Explorer")]
    assert len(names) == 8
    for name in names:
        cls = getattr(helpers, name)
        assert issubclass(cls, Explorer) and "run" not in vars(cls) and "show" not in vars(cls), name


def test_what_a_worker_imports_stays_light():
    """A spawned worker unpickles a dataset: it imports ``helpers`` and the dataset's module, and
    must not pay for matplotlib, ipywidgets or torchvision (they load on first use)."""
    import subprocess
    import sys

    code = ("import sys, helpers, helpers.data.datasets, helpers.data.copy_on_read, helpers.timing.recorder\n"
            "print(sorted(m for m in ('matplotlib', 'ipywidgets', 'torchvision') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_command_line_and_the_instrument_import_the_lab_by_no_name():
    """``dataloader-lab`` loads these files as ``dataloader_lab.*`` beside a project's own ``helpers``
    (helpers/cli.py): an absolute ``helpers.`` import there would reach the project's package."""
    paths = [HELPERS / "cli.py", *HELPERS.glob("timing/**/*.py"), HELPERS / "cores.py", HELPERS / "config.py"]
    named = [f"{path.relative_to(ROOT)}:{number}" for path in paths
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.match(r"\s*(from helpers[. ]|import helpers\b)", line)]
    assert named == []


def test_the_diagnosis_flows_one_way():
    """Measuring (run, profile, stages, batches) → facts (result, profiled) → rules → the report: no
    module imports one from a later layer than its own, so nothing imports in a circle."""
    import ast

    folder = ROOT / "helpers" / "timing" / "diagnosis"
    layer = {"advice": 0, "thresholds": 0, "loaders": 0, "batches": 0, "profile": 1, "profiled": 1,
             "stages": 1, "result": 2, "rules": 3, "run": 4, "__init__": 5}
    for path in sorted(folder.rglob("*.py")):
        inside = path.relative_to(folder).parts
        own = layer["rules"] if inside[0] == "rules" else layer[path.stem]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                depth = node.level - (1 if inside[0] == "rules" else 0)
                if depth != 1 or not node.module:
                    continue
                target = node.module.split(".")[0]
                if target in layer:
                    assert layer[target] <= own, f"{path.relative_to(ROOT)} imports .{target}, a later layer"
