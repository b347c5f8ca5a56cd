"""Worker start-up measured in a fresh process: ``python -m helpers.startup``.

The forkserver's server process is started once per Python process, on first use, and
``multiprocessing.set_forkserver_preload`` only affects a server not yet started. To
compare start methods (and forkserver with and without preloading torch) on equal terms,
each measurement runs in its own child interpreter, which records a few 2-worker epochs
with :func:`helpers.record` and prints them as one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from ..config import repo_root
from ..timing.timeline import Timeline


def record_in_child(
    start_method: str,
    *,
    preload: list[str] | None = None,
    workers: int = 2,
    epochs: int = 2,
    items: int = 4,
    item_wait_s: float = 0.05,
    timeout_s: float = 240,
) -> Timeline:
    """Record ``epochs`` epochs (fresh workers each: no persistence) of ``workers`` workers started
    with ``start_method``, in a fresh Python process (``preload``: modules the forkserver's server
    imports once, when it starts, so that the workers it forks already have them)."""
    command = [
        sys.executable,
        "-m",
        "helpers.startup",
        start_method,
        "--workers",
        str(workers),
        "--epochs",
        str(epochs),
        "--items",
        str(items),
        "--item-wait-s",
        str(item_wait_s),
    ]
    if preload:
        command += ["--preload", ",".join(preload)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout_s, cwd=repo_root()
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return Timeline.from_dict(json.loads(line[len("RESULT ") :]))
    raise RuntimeError(
        f"the start-up measurement in a child process failed (exit status {done.returncode}):\n"
        + (done.stderr or done.stdout)[-2000:]
    )


def main(argv: list[str] | None = None) -> int:
    import multiprocessing as mp

    parser = argparse.ArgumentParser(prog="python -m helpers.startup")
    parser.add_argument("start_method", choices=mp.get_all_start_methods())
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--item-wait-s", type=float, default=0.05)
    parser.add_argument("--preload", default="", help="comma-separated modules the forkserver imports once")
    options = parser.parse_args(argv)

    from torch.utils.data import DataLoader

    from ..models import ModelledStep
    from ..timing.recorder import record
    from .datasets import WorkDataset

    context = mp.get_context(options.start_method)
    if options.preload:
        context.set_forkserver_preload(options.preload.split(","))
    loader = DataLoader(
        WorkDataset(options.items, item_wait_s=options.item_wait_s),
        batch_size=1,
        num_workers=options.workers,
        multiprocessing_context=context,
    )
    timeline = record(loader, ModelledStep(options.item_wait_s / 2), epochs=options.epochs, progress=False)
    print("RESULT " + json.dumps(timeline.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
