"""Handouts: every notebook executed for real and rendered as static HTML, for after class.

``make handouts`` runs each notebook at full size in a fresh kernel (``nbclient``, widget
state kept), and writes ``handouts/<notebook>.html`` with its outputs, figures and widgets
embedded, and ``handouts/index.html`` — the README's notebook table, linking to the pages.
Readable without a kernel: figures are embedded images, and the widgets (the explorer's
first run, the prediction with its answer) render from their saved state with
``@jupyter-widgets/html-manager``, copied into ``handouts/_static`` from the npm registry
when it can be reached (otherwise the pages load it from a CDN when opened, and say so).

Each page is built from the run it shows, never from committed outputs (the committed
notebooks have none). A run that does not reach its end — a lesson check that fails, another
error, a cell past ``--timeout``, a kernel that dies — costs no page: every page and the index
are written, the page gets a banner at its top (what stopped it: a failed check names its
claims and what was measured; a link to the cell, which shows the error) over the outputs up
to that cell, its row in the index is marked, and the command exits 1 at the end naming each
such notebook. The wall time of each run, and the measured answer of each of its votes, are written
to ``handouts/run_times.json`` (``scripts/run_times.py`` records them beside the notebooks).

    python scripts/handouts.py                  # every notebook, full size
    python scripts/handouts.py --quick 03 06    # smoke sizes (DLLAB_SMOKE=1), two notebooks
"""

from __future__ import annotations

import argparse
import html
import io
import json
import os
import re
import sys
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import nbclient_poll  # noqa: E402
import notebook_table  # noqa: E402

# Without it a missed zmq wake-up holds a page up to the 900 s cell timeout, the kernel idle
# (seen in make test's handout test, whose 600 s limit then failed it).
nbclient_poll.install()

NPM = {  # file in the package → (tarball, path inside it)
    "embed-amd.js": ("https://registry.npmjs.org/@jupyter-widgets/html-manager/-/html-manager-1.0.15.tgz",
                     "package/dist/embed-amd.js"),
    "require.js": ("https://registry.npmjs.org/requirejs/-/requirejs-2.3.8.tgz", "package/require.js"),
}
CELL_TIMEOUT_S = 900


def select(names: list[str], folder: Path = ROOT / "notebooks") -> list[Path]:
    """Notebooks by number prefix (``03``) or file name; all when ``names`` is empty."""
    every = notebook_table_paths(folder)
    if not names:
        return every
    chosen = []
    for name in names:
        match = [p for p in every if p.name == name or p.name.startswith(f"{name}_") or p.stem == name]
        if not match:
            raise SystemExit(f"no notebook {name!r}: use a number such as 03 or a name from "
                             f"{[p.stem for p in every]}")
        chosen += match
    return chosen


def notebook_table_paths(folder: Path = ROOT / "notebooks") -> list[Path]:
    return sorted(folder.glob("[0-9][0-9]*_*.ipynb"))


def fetch_static(static: Path) -> bool:
    """Copy the widget renderer and require.js next to the pages; False when unreachable."""
    static.mkdir(parents=True, exist_ok=True)
    try:
        for name, (url, member) in NPM.items():
            if (static / name).exists():
                continue
            with urllib.request.urlopen(url, timeout=30) as response:
                data = response.read()
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                extracted = tar.extractfile(member)
                if extracted is None:
                    raise OSError(f"{member} missing from {url}")
                (static / name).write_bytes(extracted.read())
        return True
    except OSError as error:
        print(f"note: could not fetch the widget renderer ({error}); the pages will load it from a CDN "
              "when opened, so widgets need a network connection there (figures do not)")
        return False


@dataclass
class Stop:
    """Why a run did not reach its end, for its page and the index: a lesson check that failed
    (its message names each failed claim and what was measured), another error, a cell that ran
    past the timeout, a kernel that died or could not start."""

    kind: str  #: "lesson check failed", "error", "timeout", "kernel died", "could not run"
    message: str  #: the error's own words
    cell_id: str = ""  #: the cell that was running (its anchor on the page)
    code: str = ""  #: that cell's first line

    def summary(self) -> str:
        """One line: the kind and the message, for the index and the console."""
        message = self.message.removeprefix("LessonCheckFailed: ")
        return f"{self.kind}: " + " ".join(message.split())[:600]


def _stop_from(error: BaseException, cell) -> Stop:
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    first = (cell.source.strip().splitlines() or [""])[0][:120] if cell is not None else ""
    cell_id = cell.get("id", "") if cell is not None else ""
    if isinstance(error, CellExecutionError):
        kind = "lesson check failed" if error.ename == "LessonCheckFailed" else "error"
        message = f"{error.ename}: {error.evalue}"
    elif isinstance(error, CellTimeoutError):
        kind, message = "timeout", re.sub(r"\s+", " ", str(error)).split(" Here is a preview")[0]
    elif isinstance(error, DeadKernelError):
        kind, message = "kernel died", f"{type(error).__name__}: {error}"
    else:
        kind, message = "could not run", f"{type(error).__name__}: {error}"
    return Stop(kind, re.sub(r"\x1b\[[0-9;]*m", "", message)[:2000], cell_id, first)


def execute(path: Path, quick: bool, timeout: int = CELL_TIMEOUT_S) -> tuple[object, float, Stop | None]:
    """Run the notebook in a fresh kernel; returns it with its outputs, the seconds it took and,
    when the run did not reach its end (a lesson check failed, a cell raised or ran past
    ``timeout`` seconds, the kernel died), why — the page is built all the same, with the
    outputs up to that cell and the error in it."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    running: list = [None]
    saved = {k: os.environ.get(k) for k in ("DLLAB_SMOKE", "TQDM_DISABLE")}
    os.environ["DLLAB_SMOKE"] = "1" if quick else "0"  # the kernel inherits this process's environment
    os.environ.setdefault("TQDM_DISABLE", "1")
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.on_cell_start = lambda cell, cell_index: running.__setitem__(0, cell)
    start = time.perf_counter()
    try:
        client.execute()
    except Exception as error:  # noqa: BLE001 — every page gets built; the error is on it
        client.set_widgets_metadata()  # nbclient saves the widgets' state only after a full run
        stop = _stop_from(error, running[0])
        cell = running[0]
        if cell is not None and not isinstance(error, CellExecutionError):  # its error shows in the cell
            cell.setdefault("outputs", []).append(nbformat.v4.new_output(
                "error", ename=stop.kind, evalue=stop.message, traceback=[f"{stop.kind}: {stop.message}"]))
        return nb, time.perf_counter() - start, stop
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return nb, time.perf_counter() - start, None


def render(nb, title: str, local_static: bool) -> str:
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", embed_images=True)
    if local_static:
        exporter.require_js_url = "_static/require.js"
        exporter.widget_renderer_url = "_static/embed-amd.js"
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return body


STOPPED = re.compile(r"<div id='dllab-stopped' data-summary='([^']*)'")


def mark_stopped(page: str, stop: Stop | None) -> str:
    """The page with a banner at its top when its run did not reach its end: what stopped it
    (a failed lesson check names its claims and what was measured) and a link to the cell."""
    if stop is None:
        return page
    headline = {"lesson check failed": "A lesson check failed on this run",
                "timeout": "This run stopped: a cell ran past the time limit",
                "kernel died": "This run stopped: the kernel died",
                "could not run": "This notebook could not be run"}.get(stop.kind,
                                                                        "This run stopped at an error")
    code = f"<code>{html.escape(stop.code)}</code>"
    where = (f" in the cell <a href='#cell-id={html.escape(stop.cell_id)}'>{code}</a>" if stop.cell_id
             else (f" in the cell {code}" if stop.code else ""))
    banner = (f"<div id='dllab-stopped' data-summary='{html.escape(stop.summary(), quote=True)}' "
              "style='border:3px solid #b35806;background:#fff4e5;padding:8px 12px;margin:8px;"
              f"font-family:sans-serif'><b>✗ {headline}</b>{where}. The outputs below are those of this "
              "run up to that cell, which shows the error; the cells after it did not run."
              "<pre style='white-space:pre-wrap;margin:6px 0 0'>"
              f"{html.escape(stop.message)}</pre></div>")
    at = page.find(">", page.find("<body")) + 1
    return page[:at] + banner + page[at:] if at > 0 else banner + page


def stopped_on(page: str) -> str | None:
    """The summary a page's banner carries (a page built earlier, when the index is rebuilt)."""
    found = STOPPED.search(page)
    return html.unescape(found.group(1)) if found else None


def _inline(text: str) -> str:
    """Escape a table cell and render its `code` spans."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def index_page(built: dict[str, float], quick: bool, failed: dict[str, str] | None = None,
               present: set[str] | None = None) -> str:
    """The README's table as HTML, each notebook linking to its page (``present``: the notebooks
    the table keeps, all by default; a built page outside the table gets a row of its own);
    ``failed``: notebook → what stopped its run, marked in its row and listed above the table."""
    failed = failed or {}
    out, listed = [], set()
    for row in notebook_table.table().splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        link = re.match(r"\[(.+)\]\(notebooks/(.+)\.ipynb\)", cells[0])
        if link and (present is None or link.group(2) in present):
            listed.add(link.group(2))
            out.append(_row(link.group(2), _inline(link.group(1)), cells[1], cells[2], built, failed))
    out += [_row(stem, html.escape(stem), "", "", built, failed)
            for stem in sorted(built) if stem not in listed]
    mode = "in quick mode (smoke sizes)" if quick else "at full size"
    warning = ""
    if failed:
        warning = ("<div style='border:3px solid #b35806;background:#fff4e5;padding:8px 12px'>"
                   f"<b>✗ {len(failed)} notebook{'s' if len(failed) > 1 else ''} did not run to the end</b> "
                   "(each page says why at its top, and shows the outputs up to that cell): "
                   + ", ".join(f"<a href='{html.escape(s)}.html'>{html.escape(s)}</a>" for s in failed)
                   + "</div>")
    return ("<!doctype html><meta charset='utf-8'><title>DataLoader Lab · handouts</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}td,th{padding:4px 8px;"
            "border-bottom:1px solid #ddd;vertical-align:top;text-align:left}</style>"
            "<h1>DataLoader Lab · handouts</h1>" + warning +
            f"<p>Each page is a notebook executed here, {mode}, on {html.escape(machine())}, "
            f"{time.strftime('%Y-%m-%d')}: its outputs, figures and widgets as they came out of that run.</p>"
            "<table><tr><th>notebook</th><th>what it measures</th><th>GPU</th><th>run time</th></tr>"
            + "".join(out) + "</table>")


def _row(stem: str, title: str, measures: str, gpu: str, built: dict[str, float],
         failed: dict[str, str]) -> str:
    name = f"<a href='{html.escape(stem)}.html'>{title}</a>" if stem in built else f"{title} (not built)"
    seconds = f"{built[stem]:.0f} s" if stem in built and stem not in failed else ""
    if stem in failed:
        name += f"<br><b style='color:#b35806'>✗ {html.escape(failed[stem])}</b>"
    return (f"<tr><td>{name}</td><td>{html.escape(measures)}</td><td>{html.escape(gpu)}</td>"
            f"<td>{seconds}</td></tr>")


def machine() -> str:
    sys.path.insert(0, str(ROOT))
    from helpers.system import describe_machine

    info = describe_machine()
    return (f"{info['effective_cores']:g} effective cores, {info['accelerator'] or 'no GPU'}, "
            f"torch {info['torch']}, "
            f"workers started by {info['start_method']}")


def build_page(path: Path, quick: bool, timeout: int, local_static: bool) -> tuple[str, float, Stop | None]:
    """One notebook's page, whatever happens: a run that stops gets its banner, and a page that
    cannot be rendered becomes a plain page with the error."""
    try:
        nb, seconds, stop = execute(path, quick, timeout)
    except Exception as error:  # noqa: BLE001 — not even readable: a page that says so
        nb, seconds, stop = None, 0.0, _stop_from(error, None)
    try:
        page = render(nb, path.stem, local_static) if nb is not None else None
    except Exception as error:  # noqa: BLE001
        stop = stop or _stop_from(error, None)
        page = None
    if page is None:
        page = (f"<!doctype html><meta charset='utf-8'><title>{html.escape(path.stem)}</title><body>"
                f"<h1>{html.escape(path.stem)}</h1></body>")
    return mark_stopped(page, stop), seconds, stop


def answers(stem: str) -> dict[str, dict]:
    """The measured answer of each vote the run saved (``results/<notebook>.json``): its value, unit and
    the closest choice. ``scripts/run_times.py`` keeps them beside the run times, for INSTRUCTORS.md."""
    from helpers.config import results_dir

    path = results_dir() / f"{stem}.json"
    if not path.exists():
        return {}
    saved = json.loads(path.read_text()).get("results", {})
    return {key: {"question": value["question"], "measured": value["measured"], "unit": value.get("unit", ""),
                  "closest": value["closest"]}
            for key, value in saved.items()
            if isinstance(value, dict) and {"question", "measured", "closest"} <= set(value)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="numbers (03) or names; every notebook when none")
    parser.add_argument("--quick", action="store_true", help="smoke sizes (DLLAB_SMOKE=1)")
    parser.add_argument("--cdn", action="store_true",
                        help="do not copy the widget renderer: the pages load it from a CDN when opened")
    parser.add_argument("--out", type=Path, default=ROOT / "handouts",
                        help="output folder (default handouts/)")
    parser.add_argument("--source", type=Path, default=ROOT / "notebooks",
                        help="folder of the notebooks (default notebooks/)")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT_S,
                        help=f"seconds a cell may run before its run stops (default {CELL_TIMEOUT_S})")
    args = parser.parse_args(argv)
    paths = select(args.notebooks, args.source)
    args.out.mkdir(parents=True, exist_ok=True)
    local_static = False if args.cdn else fetch_static(args.out / "_static")
    times_path = args.out / "run_times.json"
    times = json.loads(times_path.read_text()) if times_path.exists() else {}
    mode = "quick" if args.quick else "full"
    built: dict[str, float] = {}
    failed: dict[str, str] = {}
    for path in paths:
        print(f"executing {path.name} ({mode})...", flush=True)
        page, seconds, stop = build_page(path, args.quick, args.timeout, local_static)
        (args.out / f"{path.stem}.html").write_text(page)
        built[path.stem] = seconds
        if stop is None:  # a run that stopped early is no run time to state, and no answer
            times.setdefault(path.stem, {})[mode] = round(seconds, 1)
            times[path.stem][f"answers_{mode}"] = answers(path.stem)
            times_path.write_text(json.dumps(times, indent=2, sort_keys=True) + "\n")
            print(f"  {path.stem}.html written; the run took {seconds:.0f} s", flush=True)
        else:
            failed[path.stem] = stop.summary()
            print(f"  {path.stem}.html written, but the run STOPPED after {seconds:.0f} s ({stop.summary()})",
                  flush=True)
    existing: dict[str, float] = {}
    present = notebook_table_paths(args.source)
    for other in present:  # pages of an earlier build keep their mark
        page_path = args.out / f"{other.stem}.html"
        if other.stem not in built and page_path.exists():
            existing[other.stem] = times.get(other.stem, {}).get(mode, 0.0)
            earlier = stopped_on(page_path.read_text())
            if earlier:
                failed[other.stem] = earlier
    (args.out / "index.html").write_text(index_page({**existing, **built}, args.quick, failed,
                                                        {p.stem for p in present}))
    print(f"open {args.out / 'index.html'}")
    stopped = [stem for stem in built if stem in failed]
    if stopped:
        print(f"FAILED: {len(stopped)} of {len(paths)} notebooks did not run to their end (every page and "
              "the index were written; each of these is marked on its page and in the index):")
        for stem in stopped:
            print(f"  {stem}: {failed[stem]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
