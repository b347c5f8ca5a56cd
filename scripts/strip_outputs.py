"""Remove outputs and execution counts from notebooks (committed notebooks carry none)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def strip(path: Path) -> bool:
    """Strip one notebook in place; return True when it changed."""
    text = path.read_text()
    nb = json.loads(text)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)
    nb.get("metadata", {}).pop("widgets", None)
    new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if new != text:
        path.write_text(new)
        return True
    return False


if __name__ == "__main__":
    for name in sys.argv[1:]:
        if strip(Path(name)):
            print("stripped", name)
