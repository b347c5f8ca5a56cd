"""Handouts: every notebook executed for real and rendered as static HTML, for after class.

``make handouts`` runs each notebook at full size in a fresh kernel (``nbclient``, widget
state kept), and writes ``handouts/<notebook>.html`` with its outputs, figures and widgets
embedded, and ``handouts/index.html`` — the README's notebook table, linking to the pages.
Readable without a kernel: figures are embedded images, and the widgets (the explorer's
first run, the prediction with its answer) render from their saved state with
``@jupyter-widgets/html-manager``, copied into ``handouts/_static`` from the npm registry
when it can be reached (otherwise the pages load it from a CDN when opened, and say so).

Each page is built from the run it shows, never from committed outputs (the committed
notebooks have none). The wall time of each run is written to ``handouts/run_times.json``
(``scripts/run_times.py`` records it beside the notebooks).

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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import notebook_table  # noqa: E402

NPM = {  # file in the package → (tarball, path inside it)
    "embed-amd.js": ("https://registry.npmjs.org/@jupyter-widgets/html-manager/-/html-manager-1.0.15.tgz",
                     "package/dist/embed-amd.js"),
    "require.js": ("https://registry.npmjs.org/requirejs/-/requirejs-2.3.8.tgz", "package/require.js"),
}
CELL_TIMEOUT_S = 900


def select(names: list[str]) -> list[Path]:
    """Notebooks by number prefix (``03``) or file name; all when ``names`` is empty."""
    every = notebook_table_paths()
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


def notebook_table_paths() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


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


def execute(path: Path, quick: bool) -> tuple[object, float, str | None]:
    """Run the notebook in a fresh kernel; returns it with its outputs, the seconds it took and,
    when a cell raised (a lesson check failed, say), the error's last line — the page is built
    all the same, with the outputs up to that cell and the error in it."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    os.environ["DLLAB_SMOKE"] = "1" if quick else "0"
    os.environ.setdefault("TQDM_DISABLE", "1")
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as error:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))  # the traceback's terminal colours
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return nb, time.perf_counter() - start, (lines[-1] if lines else type(error).__name__)[:300]
    return nb, time.perf_counter() - start, None


def render(nb, title: str, local_static: bool) -> str:
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", embed_images=True)
    if local_static:
        exporter.require_js_url = "_static/require.js"
        exporter.widget_renderer_url = "_static/embed-amd.js"
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return body


def mark_stopped(page: str, error: str | None) -> str:
    """The page with a banner at its top when its run stopped at an error (the cell that raised
    shows the traceback further down)."""
    if error is None:
        return page
    banner = ("<div style='border:3px solid #b35806;padding:8px 12px;margin:8px;font-family:sans-serif'>"
              f"<b>This run stopped before its end:</b> {html.escape(error)} — the outputs below end at "
              "the cell that raised.</div>")
    at = page.find(">", page.find("<body")) + 1
    return page[:at] + banner + page[at:] if at > 0 else banner + page


def _inline(text: str) -> str:
    """Escape a table cell and render its `code` spans."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def index_page(built: dict[str, float], quick: bool, failed: dict[str, str] | None = None) -> str:
    """The README's table as HTML, each notebook linking to its page; ``failed``: notebook →
    the error that stopped its run (marked in its row)."""
    failed = failed or {}
    rows = notebook_table.table().splitlines()[2:]
    out = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        link = re.match(r"\[(.+)\]\(notebooks/(.+)\.ipynb\)", cells[0])
        if not link:
            continue
        title, stem = link.groups()
        name = (f"<a href='{stem}.html'>{_inline(title)}</a>" if stem in built
                else f"{_inline(title)} (not built)")
        seconds = f"{built[stem]:.0f} s" if stem in built else ""
        if stem in failed:
            name += f"<br><b style='color:#b35806'>✗ stopped: {html.escape(failed[stem])}</b>"
        out.append(f"<tr><td>{name}</td><td>{html.escape(cells[1])}</td><td>{html.escape(cells[2])}</td>"
                   f"<td>{seconds}</td></tr>")
    mode = "in quick mode (smoke sizes)" if quick else "at full size"
    return ("<!doctype html><meta charset='utf-8'><title>DataLoader Lab · handouts</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}td,th{padding:4px 8px;"
            "border-bottom:1px solid #ddd;vertical-align:top;text-align:left}</style>"
            "<h1>DataLoader Lab · handouts</h1>"
            f"<p>Each page is a notebook executed here, {mode}, on {html.escape(machine())}, "
            f"{time.strftime('%Y-%m-%d')}: its outputs, figures and widgets as they came out of that run.</p>"
            "<table><tr><th>notebook</th><th>what it measures</th><th>GPU</th><th>run time</th></tr>"
            + "".join(out) + "</table>")


def machine() -> str:
    sys.path.insert(0, str(ROOT))
    from helpers.system import describe_machine

    info = describe_machine()
    return (f"{info['cores']} cores, {info['accelerator'] or 'no GPU'}, torch {info['torch']}, "
            f"workers started by {info['start_method']}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="numbers (03) or names; every notebook when none")
    parser.add_argument("--quick", action="store_true", help="smoke sizes (DLLAB_SMOKE=1)")
    parser.add_argument("--cdn", action="store_true",
                        help="do not copy the widget renderer: the pages load it from a CDN when opened")
    parser.add_argument("--out", type=Path, default=ROOT / "handouts",
                        help="output folder (default handouts/)")
    args = parser.parse_args(argv)
    paths = select(args.notebooks)
    args.out.mkdir(parents=True, exist_ok=True)
    local_static = False if args.cdn else fetch_static(args.out / "_static")
    times_path = args.out / "run_times.json"
    times = json.loads(times_path.read_text()) if times_path.exists() else {}
    mode = "quick" if args.quick else "full"
    built: dict[str, float] = {}
    failed: dict[str, str] = {}
    for path in paths:
        print(f"executing {path.name} ({mode})...", flush=True)
        nb, seconds, error = execute(path, args.quick)
        (args.out / f"{path.stem}.html").write_text(mark_stopped(render(nb, path.stem, local_static), error))
        built[path.stem] = seconds
        if error is None:  # a run that stopped early is no run time to state
            times.setdefault(path.stem, {})[mode] = round(seconds, 1)
            times_path.write_text(json.dumps(times, indent=2, sort_keys=True) + "\n")
            print(f"  {path.stem}.html written; the run took {seconds:.0f} s", flush=True)
        else:
            failed[path.stem] = error
            print(f"  {path.stem}.html written, but the run STOPPED after {seconds:.0f} s: {error}",
                  flush=True)
    existing = {p.stem: times.get(p.stem, {}).get(mode, 0.0) for p in notebook_table_paths()
                if (args.out / f"{p.stem}.html").exists()}
    (args.out / "index.html").write_text(index_page({**existing, **built}, args.quick, failed))
    print(f"open {args.out / 'index.html'}")
    if failed:
        print(f"{len(failed)} of {len(paths)} notebooks stopped before their end (marked on their page and "
              "in the index): " + "; ".join(f"{stem}: {error}" for stem, error in failed.items()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
