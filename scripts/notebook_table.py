"""Generate the README's notebook table from the notebooks themselves.

Each notebook's title is its first markdown heading; its one-line summary, GPU note and
measured run times (``scripts/run_times.py``) are in its metadata under ``dataloader_lab``.
The overview deck (``notebooks/overview.ipynb``: slides only, no run time, no handout) is not a
lesson and has no row: README links it above the table.
The core path (``CORE``) is written into README.md with its measured total run time.
``--write`` updates README.md and INSTRUCTORS.md between their markers; ``--check`` exits 1
when either is stale (a test runs it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_times import format_s  # noqa: E402  (one way to write a run time, everywhere)

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- notebooks:start -->", "<!-- notebooks:end -->"


GUIDE_START, GUIDE_END = "<!-- run-times:start -->", "<!-- run-times:end -->"
CORE_START, CORE_END = "<!-- core-path:start -->", "<!-- core-path:end -->"
#: The core path, after notebook 00: the notebooks a learner works through in order (the class).
CORE = ["01", "02", "03", "05", "06", "07", "16"]
#: The class that follows the core path, in minutes of teaching (INSTRUCTORS.md's first page).
CLASS_MINUTES = 90
#: The class, slot by slot: (first minute, last minute, notebook, the figure in images/ to show where a
#: run is skipped). 00 runs on the class machines the day before; its slot is the check that it did.
CLASS_PLAN = [(0, 5, "00"), (5, 20, "01"), (20, 35, "02"), (35, 45, "03"), (45, 57, "05"), (57, 65, "06"),
              (65, 75, "07"), (75, 90, "16")]
PLAN_START, PLAN_END = "<!-- class-plan:start -->", "<!-- class-plan:end -->"


def _notebooks(root: Path) -> list[tuple[Path, str, dict]]:
    out = []
    for path in sorted((root / "notebooks").glob("[0-9][0-9]*_*.ipynb")):
        nb = json.loads(path.read_text())
        heading = next(
            line.lstrip("# ").strip()
            for cell in nb["cells"] if cell["cell_type"] == "markdown"
            for line in "".join(cell["source"]).splitlines() if line.startswith("# ")
        )
        out.append((path, heading, nb["metadata"].get("dataloader_lab", {})))
    return out


def _run_time(meta: dict) -> str:
    times = meta.get("run_time_s")
    return f"{format_s(times['full'])} · {format_s(times['quick'])}" if times else "not measured"


def table(root: Path = ROOT) -> str:
    rows = ["| notebook | what it measures | GPU | run time (full · quick) |", "|---|---|---|---|"]
    for path, heading, meta in _notebooks(root):
        summary = meta.get("summary", "")
        gpu = meta.get("gpu", "not needed")
        rows.append(f"| [{heading}](notebooks/{path.name}) | {summary} | {gpu} | {_run_time(meta)} |")
    return "\n".join(rows)


def core_path(root: Path = ROOT) -> str:
    """The core path as links, with its measured Run All time in both modes (summed)."""
    found = {path.name.split("_")[0]: (path, meta) for path, _, meta in _notebooks(root)}
    links = " → ".join(f"[{n}](notebooks/{found[n][0].name})" for n in CORE)
    times = [found[n][1].get("run_time_s") for n in CORE]
    if not all(times):
        return f"**The core path:** {links}."
    full, quick = sum(t["full"] for t in times), sum(t["quick"] for t in times)
    return (f"**The core path:** {links}. Running every cell takes {format_s(full)} at full size and "
            f"{format_s(quick)} in quick mode (measured on {times[0]['machine']}). In class, with reading "
            f"and voting, it is a {CLASS_MINUTES}-minute session: "
            "[INSTRUCTORS.md](INSTRUCTORS.md#the-90-minute-class) has the plan.")


def answer_text(answer: dict | None) -> str:
    """A measured answer as the plan shows it: the value with its unit."""
    if not answer:
        return "not measured"
    value, unit = answer["measured"], answer.get("unit", "")
    if isinstance(value, str):  # a which-one question: the choice that was measured, as the room saw it
        return answer.get("closest") or value
    number = f"{value:.3g}" if isinstance(value, float) else f"{value}"
    return f"{number}{unit}" if unit in ("×", "") else f"{number} {unit}"


def class_plan(root: Path = ROOT) -> str:
    """INSTRUCTORS.md's plan: per slot the notebook, its vote, the measured answer in both modes (from the
    notebook's metadata, written by ``scripts/run_times.py``), its quick Run All and its fallback figure."""
    found = {path.name.split("_")[0]: (path, heading, meta) for path, heading, meta in _notebooks(root)}
    rows = ["| min | notebook | the vote | measured answer, full size · quick | Run All, quick "
            "| if you skip the run |", "|---|---|---|---|---|---|"]
    for first, last, number in CLASS_PLAN:
        path, heading, meta = found[number]
        answers = meta.get("answers", {})
        source = path.read_text()  # the votes in the order the notebook asks them
        votes = sorted(answers.items(), key=lambda item: source.find(f'\\"{item[0]}\\"')) or [(None, {})]
        for key, modes in votes:
            question = next((m["question"] for m in modes.values() if m),
                            "in words: how much CPU spinning processes get" if number == "00"
                            else "not measured")
            full, quick = answer_text(modes.get("full")), answer_text(modes.get("quick"))
            answer = "—" if not key else f"{full} (both)" if full == quick else f"{full} · {quick}"
            times = meta.get("run_time_s")
            fallback = f"`handouts/{path.stem}.html`" if number != "00" else "—"
            rows.append(f"| {first}–{last} | [{heading}](notebooks/{path.name}) | {question} | {answer} | "
                        f"{format_s(times['quick']) if times else 'not measured'} | {fallback} |")
    return "\n".join(rows)


def guide_table(root: Path = ROOT) -> str:
    rows = ["| notebook | full size | quick mode (`QUICK=1`) | measured on |", "|---|---|---|---|"]
    for path, heading, meta in _notebooks(root):
        times = meta.get("run_time_s") or {}
        full = format_s(times["full"]) if times else "not measured"
        quick = format_s(times["quick"]) if times else "not measured"
        rows.append(f"| [{heading}](notebooks/{path.name}) | {full} | {quick} | {times.get('machine', '')} |")
    return "\n".join(rows)


def render(text: str, body: str, start: str = START, end: str = END) -> str:
    before, rest = text.split(start, 1)
    _, after = rest.split(end, 1)
    return f"{before}{start}\n{body}\n{end}{after}"


def main(argv: list[str]) -> int:
    stale = []
    for path, parts in [(ROOT / "README.md", [(table(), START, END), (core_path(), CORE_START, CORE_END)]),
                        (ROOT / "INSTRUCTORS.md", [(guide_table(), GUIDE_START, GUIDE_END),
                                                   (class_plan(), PLAN_START, PLAN_END)])]:
        current = wanted = path.read_text()
        for body, start, end in parts:
            wanted = render(wanted, body, start, end)
        if "--write" in argv:
            path.write_text(wanted)
        elif current != wanted:
            stale.append(f"{path.name}'s notebook table or core path is stale: run `make readme`")
    print("\n".join(stale) or table())
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
