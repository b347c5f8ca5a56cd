"""Execute notebooks with nbclient, one cell at a time, saying how long each cell took as it ends.

The lent GPU machine has no Jupyter and returns only what a command writes under ``$OUT``, and a
call that runs past its limit returns nothing it did not write: this runner appends each cell's
time to ``<out>/progress.txt`` when the cell ends, and each notebook's text outputs (streams, plain
results, errors) to ``<out>/notebooks.txt`` when the notebook ends or stops, and keeps
``<out>/summary.json`` current. So a run cut off still says which cell it was in and for how long.
It polls the kernel in slices (``nbclient_poll``): a missed zmq wake-up would otherwise cost the
whole cell timeout with the kernel idle.

    python scripts/run_notebooks.py --out DIR 04 11   # notebooks/04_*.ipynb, notebooks/11_*.ipynb

Sizes and the start method come from the environment (``DLLAB_SMOKE``, ``DLLAB_START_METHOD``) as
for every other run; the kernel's working directory is ``notebooks/``. Exits 1 when a notebook
failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import nbclient_poll  # noqa: E402

nbclient_poll.install()


def find(name: str) -> Path:
    """The notebook whose file name starts with ``name`` and an underscore (``04`` or ``00b``), or
    the path of a notebook."""
    if name.endswith(".ipynb") and Path(name).is_file():
        return Path(name).resolve()
    found = sorted((ROOT / "notebooks").glob(f"{name}_*.ipynb"))
    if len(found) != 1:
        choices = ", ".join(p.name.split("_")[0] for p in sorted((ROOT / "notebooks").glob("*.ipynb")))
        raise ValueError(f"{name!r} names {len(found)} notebooks; give one of: {choices}")
    return found[0]


def texts(nb) -> list[str]:
    """Each code cell's text outputs, prefixed by the cell's index."""
    lines = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                lines.append(f"[{i}] {out.get('text', '')}")
            elif out.get("output_type") == "error":
                lines.append(f"[{i}] {out.get('ename')}: {out.get('evalue')}")
            elif "text/plain" in out.get("data", {}) and "text/html" not in out["data"]:
                lines.append(f"[{i}] {out['data']['text/plain']}")
    return lines


def run(path: Path, out: Path, timeout: float) -> tuple[str, float]:
    """Execute one notebook cell by cell; return its status and its seconds."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    started, status = time.monotonic(), "ok"
    with (out / "progress.txt").open("a") as progress:
        progress.write(f"{path.name}\n")
        progress.flush()
        try:
            with client.setup_kernel():
                for i, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    cell_started = time.monotonic()
                    progress.write(f"  [{i}] started\n")
                    progress.flush()
                    client.execute_cell(cell, i)
                    progress.write(f"  [{i}] {time.monotonic() - cell_started:.1f} s\n")
                    progress.flush()
        except Exception as error:  # a failed cell, a timeout, a dead kernel: say which and go on
            status = f"{type(error).__name__}: {str(error)[-2000:]}"
    seconds = time.monotonic() - started
    with (out / "notebooks.txt").open("a") as report:
        report.write(f"\n######## {path.name}: {status.splitlines()[0]} in {seconds:.0f} s\n")
        report.write("\n".join(texts(nb)) + "\n")
    return status, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the progress and outputs")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per cell (default 600)")
    parser.add_argument("notebooks", nargs="+", help="notebook numbers (e.g. 04 00b 11) or paths")
    args = parser.parse_args(argv)
    try:
        paths = [find(name) for name in args.notebooks]
    except ValueError as error:
        parser.error(str(error))
    args.out.mkdir(parents=True, exist_ok=True)
    summary, failed = {}, False
    for path in paths:
        status, seconds = run(path, args.out, args.timeout)
        failed |= status != "ok"
        summary[path.name] = {"status": status, "seconds": round(seconds, 1)}
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(f"{path.name}: {status.splitlines()[0]} ({seconds:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
