"""``dataloader-lab diagnose module:function``: the command line of :func:`helpers.diagnose` (the
diagnosis is in :mod:`helpers.timing.diagnosis`; this module only loads the learner's loader and runs
it). ``python -m helpers.diagnose`` runs the same command.

The ``dataloader-lab`` entry point imports the lab under a second name, ``dataloader_lab`` (a package
whose modules are the files of ``helpers/``), before the learner's folder goes on ``sys.path``. A
project with a ``helpers.py`` or ``helpers/`` of its own then keeps it: its modules import their own
``helpers``, and the lab's code never imports by that name. Workers started by spawn or forkserver
import the lab's parts as ``dataloader_lab`` too."""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import os
import pickle
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader, Dataset

from .timing import torch_internals
from .timing.diagnosis.advice import describe_change as _describe_change
from .timing.diagnosis.run import diagnose, follow_advice, next_to_follow


# -- command line ---------------------------------------------------------------------------------
def load_target(target: str) -> tuple[DataLoader, Callable[[Any], Any] | None]:
    """``module:function`` → ``(loader, step or None)`` from what the function returns (a
    DataLoader, or ``(DataLoader, step)``); ``module:name`` may also name a DataLoader made at the
    module's top level, and ``path/to/file.py:function`` a file. Clear errors for each way it can be
    wrong."""
    module_name, colon, function_name = target.rpartition(":")  # C:\\proj\\train.py:make on Windows
    if (not colon or not module_name or not function_name
            or (":" in module_name and not _DRIVE.match(module_name))):
        raise SystemExit(f"expected module:function, e.g. my_module:make_loader — got {target!r}")
    sys.path.insert(0, os.getcwd())
    module_name = _module_of_file(module_name)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        own = (_own_helpers() if error.name is not None and error.name.split(".")[0] == "helpers"
               and __package__ == "helpers" else None)
        if own is not None:
            raise SystemExit(
                f"{module_name} imports {error.name}, from your project's {own}, but in this process "
                f"`helpers` is the lab's package ({Path(__file__).parent}): Python imports one package of a "
                f"name. Run `{COMMAND}` instead, which keeps your project's helpers") from None
        if not isinstance(error, ModuleNotFoundError):
            raise SystemExit(_import_failed(module_name, error)) from None
        if error.name is not None and module_name.split(".")[0] == error.name.split(".")[0]:
            raise SystemExit(
                f"no module named {module_name!r} here: run from the folder that holds "
                f"{module_name.replace('.', '/')}.py, or add that folder to PYTHONPATH") from None
        raise SystemExit(
            f"{module_name} was found, but importing it failed: {error}. Install what it needs into this "
            f"Python ({sys.executable}), the one that runs the diagnosis") from None
    except Exception as error:  # noqa: BLE001 - the learner's module raised while importing
        raise SystemExit(_import_failed(module_name, error)) from None
    found = getattr(module, function_name, None)
    if isinstance(found, DataLoader):  # a loader made at the module's top level
        return found, None
    if found is None or not callable(found):
        raise SystemExit(
            f"module {module_name!r} has no function {function_name!r} "
            f"(it has: {', '.join(n for n in dir(module) if not n.startswith('_')) or 'nothing'})"
            if found is None else
            f"{module_name}.{function_name} is a {type(found).__name__}, not a function that returns a "
            "DataLoader, nor a DataLoader")
    needs = _required_arguments(found)
    if needs:
        raise SystemExit(
            f"{target}() needs arguments ({', '.join(needs)}), and the diagnosis calls it with none: add a "
            f"function that calls it with yours, e.g. `def for_diagnosis(): return {function_name}(...)`, "
            f"and diagnose {module_name}:for_diagnosis")
    made = found()  # the learner's own code: an error in it keeps its traceback
    if isinstance(made, DataLoader):
        return made, None
    if (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], DataLoader)
            and (made[1] is None or callable(made[1]))):
        return made
    shape = (f"a tuple of {len(made)}: ({', '.join(type(x).__name__ for x in made)})"
             if isinstance(made, tuple) else type(made).__name__)
    wrap = (": wrap the dataset in the DataLoader your training makes (its batch_size, num_workers, "
            "collate_fn...) and return that" if isinstance(made, Dataset) else "")
    raise SystemExit(f"{target}() returned {shape}, not a torch.utils.data.DataLoader: return the loader, "
                     f"or (loader, step) where step is a function that takes a batch{wrap}")


def _own_helpers() -> Path | None:
    """A ``helpers`` module or package of the learner's on ``sys.path``, other than the lab's."""
    lab = Path(__file__).resolve().parent
    for entry in sys.path:
        for found in (Path(entry or ".") / "helpers.py", Path(entry or ".") / "helpers"):
            if found.exists() and found.resolve() != lab:
                return found.resolve()
    return None


_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def _import_failed(module_name: str, error: BaseException) -> str:
    """The learner's module raised while importing: its traceback, without importlib's own frames,
    shows where (on stderr); then the one line to act on."""
    machinery = os.path.dirname(importlib.__file__)
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith("<frozen") and f.filename != __file__
              and not f.filename.startswith(machinery)]
    sys.stderr.write("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
                     + "".join(traceback.format_exception_only(type(error), error)))
    return (f"importing {module_name} raised {type(error).__name__} (the traceback above): fix it in "
            f"{module_name}, then run the diagnosis again")


def _module_of_file(name: str) -> str:
    """A module's name as given, or, for a path to a ``.py`` file (``my_module.py``, ``src/train.py``,
    ``./train.py``), the name to import it by: the file's own, or ``package.module`` for a file inside
    packages (folders with ``__init__.py``, so that its relative imports work), with the folder above
    them put first on ``sys.path``."""
    if not (name.endswith(".py") or "/" in name or "\\" in name):
        return name
    path = Path(name if name.endswith(".py") else name + ".py")
    if not path.is_file():
        raise SystemExit(f"no file {str(path)!r} (from {os.getcwd()}): give a path to the .py file that "
                         "makes your loader, or its module's name (my_module:make_loader, run from the "
                         "folder that holds my_module.py)")
    path = path.resolve()
    if "." in path.stem:
        raise SystemExit(f"{path.name}: Python imports no file whose name has a dot before .py; rename it "
                         f"(e.g. {path.stem.replace('.', '_')}.py)")
    parts, folder = [path.stem], path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    dotted = ".".join(parts)
    loaded = sys.modules.get(dotted)
    if loaded is not None and Path(getattr(loaded, "__file__", None) or "").resolve() != path:
        raise SystemExit(f"{path} would be imported as {dotted!r}, a name this process already uses for "
                         f"{getattr(loaded, '__file__', None) or 'a built-in module'}: rename the file")
    sys.path.insert(0, str(folder))
    return dotted


def _required_arguments(function: Callable[..., Any]) -> list[str]:
    """The parameters ``function()`` would be missing (none where Python cannot say)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.default is p.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _cannot_pickle(error: BaseException) -> bool:
    """Whether ``error`` is a worker start that could not send the dataset, collate_fn or
    worker_init_fn to a spawned or forkserver worker (they travel pickled). An error a worker raised
    ("Caught ... in DataLoader worker process", re-raised by PyTorch) is the learner's own code's."""
    text = str(error)
    if text.startswith("Caught "):
        return False
    return isinstance(error, pickle.PicklingError) or (
        isinstance(error, (AttributeError, TypeError))
        and any(words in text for words in ("cannot pickle", "Can't pickle", "Can't get attribute")))


def _report_failed_follow(error: BaseException, loader: DataLoader, result: Any) -> None:
    """After the diagnosis was printed: which advice, followed, raised, and what to do."""
    from .timing.recorder import NotImportable, start_method_of

    advice = next_to_follow(result.followed[-1].after if result.followed else result)
    what = _describe_change(advice.change) if advice is not None else "the advice"
    method = start_method_of(loader)

    if isinstance(error, NotImportable):
        hint = ""  # the lab's own check: its message names the fix
    elif _cannot_pickle(error) and method != "fork":
        hint = (f"\nIts new workers start with {method!r}, which sends them the dataset, collate_fn and "
                "worker_init_fn pickled: define each at the top level of a module (no lambda, no function or "
                "class defined inside another function: README, Troubleshooting), and open files and "
                "connections on first use in each worker, not in the dataset's __init__ "
                "(helpers/data/storage.py's SqliteDataset does, notebook 08).")
    else:
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        hint = ("\nThe lab's own code raised it (the traceback above): a fault of the diagnosis, not of your "
                "loader; the diagnosis above stands." if _raised_by_the_lab(error) else
                "\nThe changed loader raised it (the traceback above), run as your training would run it "
                "with that setting: fix it there, then diagnose again.")
    print(f"--verify: following {what} raised {type(error).__name__}: {error}{hint}", file=sys.stderr)


#: The command as README shows it.
COMMAND = "dataloader-lab diagnose my_module:make_loader --step-ms 30 --verify"


def main(argv: list[str] | None = None) -> int:
    """``dataloader-lab diagnose ...``; ``dataloader-lab`` alone prints its use."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: dataloader-lab diagnose TARGET [options]   (e.g. {COMMAND})\n"
              "  diagnose   record a DataLoader, say where its time goes and what to change "
              "(dataloader-lab diagnose --help)")
        return 0 if argv else 2
    if argv[0] != "diagnose":
        print(f"dataloader-lab: unknown command {argv[0]!r}; the command is diagnose, e.g. {COMMAND}",
              file=sys.stderr)
        return 2
    return diagnose_main(argv[1:])


def diagnose_main(argv: list[str] | None = None, prog: str = "dataloader-lab diagnose") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Diagnose a DataLoader: headroom, waiting, where the time goes, recommendations.",
    )
    parser.add_argument("target", help="module:function returning a DataLoader, or (DataLoader, step); "
                        "module:name of a DataLoader made at the module's top level; "
                        "or path/to/file.py:function")
    parser.add_argument("--steps", type=int, default=200, help="batches to record (default 200)")
    parser.add_argument(
        "--step-ms", type=float, default=None,
        help="model the training step as this many ms of waiting (when the function gives none)")
    parser.add_argument("--device", default=None,
                        help="copy each batch to this device before the step, e.g. cuda (advises pinning)")
    parser.add_argument("--verify", action="store_true",
                        help="follow the first recommendation that is a DataLoader setting with a prediction "
                        "(pinning has none), measure it beside the prediction, then the changed loader's own "
                        "first one: two rounds")
    parser.add_argument("--trace", default="dataloader_diagnosis.json",
                        help="where to write the Perfetto trace")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps must be at least 2, got {args.steps}")
    if args.step_ms is not None and not (args.step_ms > 0 and math.isfinite(args.step_ms)):
        parser.error(f"--step-ms is the step's time in milliseconds, above 0 (e.g. 30), got {args.step_ms}")
    device = None
    if args.device is not None:
        import torch

        try:
            device = torch.device(args.device)
        except RuntimeError as error:
            parser.error(f"--device {args.device!r} is not a device torch knows ({error}): try cpu or cuda")
        if device.type == "cuda" and not torch.cuda.is_available():
            parser.error("--device cuda, but this torch sees no CUDA GPU "
                         "(torch.cuda.is_available() is False)")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            parser.error(f"--device {args.device}, but this torch sees {torch.cuda.device_count()} CUDA "
                         f"GPU(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        if device.type == "mps" and not torch.backends.mps.is_available():
            parser.error("--device mps, but this torch cannot use Apple's GPU here "
                         "(torch.backends.mps.is_available() is False)")
    loader, step = load_target(args.target)
    if step is not None and args.step_ms is not None:
        parser.error(f"{args.target}() gave a step already: drop --step-ms, or return only the loader")
    if step is None and args.step_ms is not None:
        from .models import ModelledStep

        step = ModelledStep(args.step_ms / 1e3)
    try:
        # --verify's rounds run after the diagnosis, so that a round that raises loses nothing of it.
        result = diagnose(loader, step, steps=args.steps, device=device)
    except (ValueError, TypeError) as error:
        if not _raised_by_the_lab(error):
            raise  # your dataset's, collate_fn's or step's own error: its traceback is what you need
        raise SystemExit(f"{type(error).__name__}: {error}") from None  # the diagnosis's own clear errors
    except torch_internals.TorchInternalsChanged as error:  # a learner's own torch, newer or older
        raise SystemExit(
            f"the diagnosis cannot time this torch: {error}\nIn your own environment: run it with a "
            "torch the lab was tried with (README, 'Diagnose your own loader, in your own environment': "
            f"2.10 to {torch_internals.PINNED_TORCH}), or point the lab's own environment at your module "
            "(.venv/bin/python -m helpers.diagnose, run from your project's folder).") from None
    except (RuntimeError, OSError) as error:
        failure = loader_failure(error, loader)
        if failure is None:
            raise  # not one of the failures the lab teaches: its traceback says more than we could
        raise SystemExit(failure) from None
    failed = None
    if args.verify:
        try:
            follow_advice(loader, step, result, 2, steps=args.steps, device=device)
        except Exception as error:  # noqa: BLE001 - reported after the diagnosis, with what to do
            failed = error
    print(result)
    if args.verify and not result.followed and failed is None:
        print("--verify: nothing to follow: " + (
            "without a step no worker count is derived (add --step-ms, your step's time, or return "
            "(loader, step))" if step is None else
            "no recommendation above is a DataLoader setting with a prediction"))
    print(f"trace: {result.trace(args.trace)} (open it in https://ui.perfetto.dev)")
    if failed is not None:
        _report_failed_follow(failed, loader, result)
        return 1
    return 0


def _messages(error: BaseException) -> str:
    """The text of an error and of every error it was raised from or during."""
    parts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        parts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return "\n".join(parts)


def loader_failure(error: BaseException, loader: DataLoader) -> str | None:
    """One paragraph for a loader that failed on its own while the diagnosis ran it (the diagnosis
    keeps copies of batches in its own memory, so the loader meets these in your loop too): out of
    file descriptors, out of shared memory, a worker killed. None for any other error."""
    import errno

    import torch.multiprocessing as mp

    text = _messages(error)
    strategy = mp.get_sharing_strategy()
    if ("Too many open files" in text or "received 0 items of ancdata" in text
            or getattr(error, "errno", None) == errno.EMFILE):
        from .timing.diagnosis.batches import spare_descriptors

        spare = spare_descriptors()
        return (
            "The loader ran out of file descriptors, on its own (the diagnosis keeps no descriptor of its "
            f"batches). Under the {strategy!r} sharing strategy every tensor storage a worker hands over "
            "holds one open descriptor while its batch is alive, so a batch of many small tensors needs "
            "many. Fixes, as notebook 10 shows: stack the samples' tensors in collate_fn (one storage "
            "instead of one per sample and field); or call "
            "torch.multiprocessing.set_sharing_strategy('file_system') before making the loader; or raise "
            f"the limit (ulimit -n; this process has {spare if spare is not None else 'an unknown number of'}"
            " spare now). The error was: " + text.splitlines()[0][:300])
    if ("No space left on device" in text or "Bus error" in text or "out of shared memory" in text
            or "shared memory" in text and "limit" in text):
        from .data.failures import SHM

        size = ""
        if SHM.is_dir():
            stat = os.statvfs(SHM)
            size = f" ({stat.f_blocks * stat.f_frsize / 2**20:.0f} MiB here)"
        return (
            f"The workers ran out of shared memory: /dev/shm{size} could not hold the batches in flight. "
            f"This loader keeps up to num_workers × prefetch_factor = {loader.num_workers} × "
            f"{loader.prefetch_factor or 0} batches there. Fixes, as notebook 10 shows: fewer or smaller "
            "batches in flight (prefetch_factor, num_workers, batch_size, uint8 instead of float32); or a "
            "larger /dev/shm (docker run --shm-size=2g, or Kubernetes' emptyDir with medium: Memory). "
            "The error was: " + text.splitlines()[0][:300])
    if "exited unexpectedly" in text or "killed by signal" in text:
        return (
            "A worker of the loader died while the diagnosis ran it (the error names the signal). A "
            "worker killed (signal: Killed) is most often the kernel's out-of-memory killer: each worker "
            "holds its own copy of what it touches (notebook 12, copy-on-read). Fixes: fewer workers, a "
            "dataset that keeps its index in NumPy arrays or tensors instead of Python lists, smaller "
            "batches; dmesg names the killer. The error was: " + text.splitlines()[0][:300])
    return None


def _raised_by_the_lab(error: BaseException) -> bool:
    """Whether ``error`` was raised in the lab's own code (a bad argument, an empty loader), not in
    the learner's dataset, ``collate_fn`` or step: with 0 workers PyTorch raises theirs as it is,
    with workers it re-raises it in the main process with the worker's traceback in its message."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(Path(__file__).resolve().parent)

