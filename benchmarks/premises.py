"""How often each lesson check of a notebook was judged, and how often its premise failed.

Runs one notebook several times, each in a fresh kernel (``scripts/run_notebooks.py``'s runner), reads
its lesson-check table from the outputs and prints, per claim: ✓, ✗ and "premise failed" counts, with
the reason of the last set-aside. A claim set aside in most runs is not tested where the notebook runs.

    DLLAB_SMOKE=1 python benchmarks/premises.py 13 --runs 10

Sizes and the start method come from the environment, as for every run. Exits 1 when a run failed.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import run_notebooks  # noqa: E402  (installs the sliced poll)

#: A row of the checks table as LessonChecks draws it in HTML: claim · measured · verdict.
ROW = re.compile(r"<tr><td[^>]*>(.*?)</td><td[^>]*>(.*?)</td><td[^>]*>(✓|✗|premise failed)</td></tr>", re.S)


def verdicts(nb) -> list[tuple[str, str, str]]:
    """The (verdict, claim, measured) rows of every lesson-check table the notebook displayed."""
    rows = []
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            table = out.get("data", {}).get("text/html", "")
            if "<th>verdict</th>" in table:
                rows += [(verdict, html.unescape(claim), html.unescape(measured))
                         for claim, measured, verdict in ROW.findall(table)]
    return rows


def run_once(path: Path, timeout: float) -> tuple[str, list[tuple[str, str, str]]]:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
        status = "ok"
    except Exception as error:  # a failed check raises after its table was shown: keep the rows
        status = f"{type(error).__name__}: {str(error).splitlines()[-1][:200] if str(error) else ''}"
    return status, verdicts(nb)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", help="a notebook number (13, 04, 00b) or path")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=600, help="seconds per cell (default 600)")
    args = parser.parse_args(argv)
    try:
        path = run_notebooks.find(args.notebook)
    except ValueError as error:
        parser.error(str(error))
    counts: dict[str, Counter] = {}
    reasons: dict[str, str] = {}
    failed = 0
    with tempfile.TemporaryDirectory():
        for k in range(args.runs):
            status, rows = run_once(path, args.timeout)
            failed += status != "ok"
            print(f"run {k + 1}: {status}; {len(rows)} checks", flush=True)
            for verdict, claim, measured in rows:
                counts.setdefault(claim, Counter())[verdict] += 1
                if verdict == "premise failed":
                    reasons[claim] = measured
    print(f"\n{path.name}, {args.runs} runs: ✓ / ✗ / premise failed per claim")
    for claim, seen in counts.items():
        print(f"{seen['✓']:3d} {seen['✗']:3d} {seen['premise failed']:3d}  {claim}")
        if claim in reasons:
            print(f"              last set aside: {reasons[claim][-200:]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
