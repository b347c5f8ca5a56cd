"""Each notebook's run time, measured, in both modes: kept in the notebook and shown to readers.

``make handouts`` (full size) and ``make handouts QUICK=1`` time every notebook's run in a
fresh kernel and write ``handouts/run_times.json``, with the measured answer of each vote. ``--write``
copies those measurements into each measured notebook's metadata (``dataloader_lab.run_time_s``, with
the machine, and ``dataloader_lab.answers``) and writes every notebook's line under its title (first
cell) that starts with ``*Run time``; ``--lines`` writes only the lines. The README's table and
INSTRUCTORS.md read the figures from the metadata. ``--check`` exits 1 when a notebook has no
measured times or its line disagrees with its metadata (a test runs it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE_START = "*Run time"


def line(times: dict) -> str:
    return (f"{LINE_START} on {times['machine']}, measured: {format_s(times['full'])} at full size, "
            f"{format_s(times['quick'])} in [quick mode](../docs/glossary.md#quick-mode) "
            "(`make lab QUICK=1`).*")


def format_s(seconds: float) -> str:
    """A run time as every page writes it: to 5 s under 90 s, else in minutes."""
    if seconds < 90:
        return f"{max(5, round(seconds / 5) * 5):.0f} s"
    return f"{seconds / 60:.0f} min" if seconds >= 150 else f"{seconds / 60:.1f} min"


def notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def with_line(source: str, text: str) -> str:
    """The cell with its run-time line right under the title (replacing an older one)."""
    lines = source.rstrip("\n").split("\n")
    kept = []
    for i, ln in enumerate(lines):
        if ln.startswith(LINE_START):
            continue
        if i > 0 and lines[i - 1].startswith(LINE_START) and not ln.strip():
            continue  # the blank line after the old run-time line
        kept.append(ln)
    title = next(i for i, ln in enumerate(kept) if ln.startswith("# "))
    return "\n".join([*kept[:title + 1], "", text, *kept[title + 1:]]).replace("\n\n\n", "\n\n")


def write(measured: dict, machine: str) -> None:
    """Record the measured notebooks' run times (both modes) and their votes' answers in their metadata,
    then write every notebook's run-time line from its metadata. A notebook not in ``measured`` keeps
    the figures it has; one measured in a single mode keeps its run times and takes that mode's answers."""
    for path in notebooks():
        got = measured.get(path.stem)
        nb = json.loads(path.read_text())
        meta = nb["metadata"].setdefault("dataloader_lab", {})
        if got is not None:
            if "full" in got and "quick" in got:
                meta["run_time_s"] = {"full": got["full"], "quick": got["quick"], "machine": machine}
            elif "run_time_s" not in meta:
                missing = "full" if "full" not in got else "quick"
                raise SystemExit(f"{path.stem}: no {missing} run time in the measurements: run "
                                 "`make handouts` and `make handouts QUICK=1` on it first")
            # else: measured in one mode only, it keeps the pair of run times it has (one machine, one
            # run each); the answers of the mode measured are replaced
            keys = sorted({*got.get("answers_full", {}), *got.get("answers_quick", {})})
            if keys:
                held = meta.get("answers", {})
                meta["answers"] = {key: {mode: (got[f"answers_{mode}"].get(key) if f"answers_{mode}" in got
                                                else held.get(key, {}).get(mode))
                                         for mode in ("full", "quick")} for key in keys}
        if "run_time_s" in meta:
            first = nb["cells"][0]
            text = with_line("".join(first["source"]), line(meta["run_time_s"]))
            first["source"] = text.splitlines(keepends=True)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def problems() -> list[str]:
    out = []
    for path in notebooks():
        nb = json.loads(path.read_text())
        times = nb["metadata"].get("dataloader_lab", {}).get("run_time_s")
        if not times:
            out.append(f"{path.name}: no measured run time: `make handouts`, `make handouts QUICK=1`, "
                       "then `python scripts/run_times.py --write --machine '...'`")
            continue
        if line(times) not in "".join(nb["cells"][0]["source"]):
            out.append(f"{path.name}: its first cell does not state the measured run time: run "
                       "`python scripts/run_times.py --write` again")
    return out


def main(argv: list[str]) -> int:
    if "--lines" in argv:  # only the lines, from the figures the notebooks already hold
        write({}, "")
    elif "--write" in argv:
        measured = json.loads((ROOT / "handouts" / "run_times.json").read_text())
        machine = argv[argv.index("--machine") + 1] if "--machine" in argv else "a 2-core machine without GPU"
        write(measured, machine)
    found = problems()
    print("\n".join(found) or "every notebook states its measured run time in both modes")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
