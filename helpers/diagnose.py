"""``python -m helpers.diagnose module:function --steps 200``: the command line of
:func:`helpers.diagnose` (the diagnosis is in :mod:`helpers.timing.diagnosis`; this module only
loads the learner's loader and runs it). Never imported as a module, so that ``helpers.diagnose``
stays the function."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader

from helpers.timing import torch_internals
from helpers.timing.diagnosis.run import diagnose


# -- command line ---------------------------------------------------------------------------------
def load_target(target: str) -> tuple[DataLoader, Callable[[Any], Any] | None]:
    """``module:function`` → ``(loader, step or None)`` from what the function returns (a
    DataLoader, or ``(DataLoader, step)``). Clear errors for each way it can be wrong."""
    if target.count(":") != 1 or not all(target.split(":")):
        raise SystemExit(f"expected module:function, e.g. my_module:make_loader — got {target!r}")
    module_name, function_name = target.split(":")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.split(".")[0] == error.name.split(".")[0]:
            raise SystemExit(
                f"no module named {module_name!r} here: run from the folder that holds "
                f"{module_name.replace('.', '/')}.py, or add that folder to PYTHONPATH") from None
        raise SystemExit(
            f"{module_name} was found, but importing it failed: {error}. Install what it needs into this "
            f"Python ({sys.executable}), the one that runs the diagnosis") from None
    except Exception as error:  # noqa: BLE001 - the user's module raised while importing
        raise SystemExit(f"importing {module_name} raised {type(error).__name__}: {error}") from None
    function = getattr(module, function_name, None)
    if function is None or not callable(function):
        raise SystemExit(
            f"module {module_name!r} has no function {function_name!r} "
            f"(it has: {', '.join(n for n in dir(module) if not n.startswith('_')) or 'nothing'})"
        )
    made = function()
    if isinstance(made, DataLoader):
        return made, None
    if (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], DataLoader)
            and (made[1] is None or callable(made[1]))):
        return made
    shape = (f"a tuple of {len(made)}: ({', '.join(type(x).__name__ for x in made)})"
             if isinstance(made, tuple) else type(made).__name__)
    raise SystemExit(f"{target}() returned {shape}, not a torch.utils.data.DataLoader: return the loader, "
                     "or (loader, step) where step is a function that takes a batch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.diagnose",
        description="Diagnose a DataLoader: headspace, waiting, where the time goes, recommendations.",
    )
    parser.add_argument("target", help="module:function returning a DataLoader, or (DataLoader, step)")
    parser.add_argument("--steps", type=int, default=200, help="batches to record (default 200)")
    parser.add_argument(
        "--step-ms", type=float, default=None,
        help="model the training step as this many ms of waiting (when the function gives none)")
    parser.add_argument("--device", default=None,
                        help="copy each batch to this device before the step, e.g. cuda (advises pinning)")
    parser.add_argument("--verify", action="store_true",
                        help="follow the recommendations that are loader settings, and measure each")
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
    loader, step = load_target(args.target)
    if step is not None and args.step_ms is not None:
        parser.error(f"{args.target}() gave a step already: drop --step-ms, or return only the loader")
    if step is None and args.step_ms is not None:
        from helpers.models import ModelledStep

        step = ModelledStep(args.step_ms / 1e3)
    try:
        result = diagnose(loader, step, steps=args.steps, device=device, verify=args.verify)
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
    print(result)
    print(f"trace: {result.trace(args.trace)} (open it in https://ui.perfetto.dev)")
    return 0


def _raised_by_the_lab(error: BaseException) -> bool:
    """Whether ``error`` was raised in the lab's own code (a bad argument, an empty loader), not in
    the learner's dataset, ``collate_fn`` or step: with 0 workers PyTorch raises theirs as it is,
    with workers it re-raises it in the main process with the worker's traceback in its message."""
    from pathlib import Path

    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(Path(__file__).resolve().parent)


if __name__ == "__main__":
    sys.exit(main())
