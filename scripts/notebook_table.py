"""Generate the README's notebook table from the notebooks themselves.

Each notebook's title is its first markdown heading; its one-line summary and GPU
note are in its metadata under ``dataloader_lab``. ``--write`` updates README.md
between the markers; ``--check`` exits 1 when the README is stale (a test runs it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- notebooks:start -->", "<!-- notebooks:end -->"


def table(root: Path = ROOT) -> str:
    rows = ["| notebook | what it measures | GPU |", "|---|---|---|"]
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text())
        heading = next(
            line.lstrip("# ").strip()
            for cell in nb["cells"] if cell["cell_type"] == "markdown"
            for line in "".join(cell["source"]).splitlines() if line.startswith("# ")
        )
        meta = nb["metadata"].get("dataloader_lab", {})
        summary = meta.get("summary", "")
        gpu = meta.get("gpu", "not needed")
        rows.append(f"| [{heading}](notebooks/{path.name}) | {summary} | {gpu} |")
    return "\n".join(rows)


def render(readme: str, root: Path = ROOT) -> str:
    before, rest = readme.split(START, 1)
    _, after = rest.split(END, 1)
    return f"{before}{START}\n{table(root)}\n{END}{after}"


def main(argv: list[str]) -> int:
    readme_path = ROOT / "README.md"
    current = readme_path.read_text()
    wanted = render(current)
    if "--write" in argv:
        readme_path.write_text(wanted)
        return 0
    if current != wanted:
        print("README.md's notebook table is stale: run `make readme`")
        return 1
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
