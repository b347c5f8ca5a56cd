"""What a person sees: JupyterLab in Chromium runs a notebook (01, and 05 from the core
series), its explorer renders, and moving a slider + Run redraws the timeline; and an
instructor presents 03 as slides (jupyterlab-slideshow): after Run All the prediction slide
shows no measured answer, the room's vote is saved, the reveal button shows the answer, and
the explorer's timeline redraws inside the slide (``make browser-decks``: every notebook with a
prediction, 00b and 01-19).

Needs Debian's ``chromium`` (``.ci/run`` installs it) and the ``playwright`` package;
Playwright drives the system Chromium, it never downloads a browser.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers.classroom.predict import _fmt

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ["01_baseline_loop.ipynb", "05_worker_startup.ipynb"]
# The deck test presents 03 (CI); DLLAB_DECKS=all (`make browser-decks`) presents every notebook
# with a prediction (00b, 01-20) the same way, and on those with an explorer moves its slider.
_DECKS = os.environ.get("DLLAB_DECKS", "")
if _DECKS not in ("", "all"):
    raise ValueError(f"DLLAB_DECKS={_DECKS!r}: leave it unset (present 03) or set it to 'all'")
PRESENTED = (sorted(p.name for p in (ROOT / "notebooks").glob("[012][0-9]*_*.ipynb")
                    if "helpers.Prediction(" in p.read_text())
             if _DECKS == "all" else ["03_prefetch_factor.ipynb"])
# The last cell's verdict: checks that passed, or a notebook whose rows are all predictions (show_checks).
CHECKED = ("(t => t.includes('all lesson checks passed') || t.includes('no lesson check here'))"
           "(document.body.innerText)")
ONSCREEN = ".jp-deck-mod-visible"  # the cells jupyterlab-slideshow shows now (fragments once revealed)
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 with copies of the notebooks: the ``lab`` fixture (tests/conftest.py),
    one server for every browser test of the run (each start ~2 s, each stop ~1-3 s)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed: `apt-get install chromium` "
                    "(.ci/run does this)")
    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    root.mkdir()
    # Copies: JupyterLab autosaves, and must never write to the committed notebooks.
    for name in {*NOTEBOOKS, *PRESENTED}:
        shutil.copy(ROOT / "notebooks" / name, root / name)
    config_dir = base / "config"
    settings = config_dir / "lab/user-settings/@jupyterlab/apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config_dir),
               JUPYTER_RUNTIME_DIR=str(base / "runtime"), IPYTHONDIR=str(base / "ipython"),
               DLLAB_RESULTS_DIR=str(base / "results"), DLLAB_SMOKE="1")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
         "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(base / "server.log", "wb"),
        start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"JupyterLab did not start: {(base / 'server.log').read_text()}")
            time.sleep(0.5)
    yield {"url": url, "token": token, "chromium": chromium, "config_dir": config_dir,
           "results": base / "results", "root": root}
    # Each kernel stopped on its own first, one at a time: at the server's shutdown they stop all at
    # once, and a kernel that needed longer than the server waits (5 s) on 2 busy cores was killed
    # before Python's clean-up removed its multiprocessing folder (a pymp-* folder left in the
    # temporary folder after the browser tests).
    try:
        with urllib.request.urlopen(f"{url}/api/kernels?token={token}", timeout=10) as listing:
            kernels = [k["id"] for k in json.loads(listing.read())]
        for kernel in kernels:
            request = urllib.request.Request(f"{url}/api/kernels/{kernel}?token={token}", method="DELETE")
            urllib.request.urlopen(request, timeout=60)
    except OSError:
        pass
    try:
        request = urllib.request.Request(f"{url}/api/shutdown?token={token}", method="POST")
        urllib.request.urlopen(request, timeout=10)
        server.wait(timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=10)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_explorer_renders_and_redraws_in_jupyterlab(lab, notebook):
    from playwright.sync_api import sync_playwright

    page_errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=lab["chromium"], args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda error: page_errors.append(str(error)))
        try:
            _open_and_run_all(page, lab, notebook)

            # The explorer runs once on display: sliders, a summary, a drawn timeline.
            page.wait_for_selector(".widget-hslider", state="visible", timeout=240_000)
            page.wait_for_function(
                "document.body.innerText.includes('Run 1:')", timeout=120_000)
            _wait_for_timeline_image(page)
            page.wait_for_function(CHECKED, timeout=120_000)
            body = page.inner_text("body")
            assert "Error displaying widget" not in body
            assert "VBox(children=" not in body, "the widget manager did not load"
            _assert_every_cell_ran(page, lab, notebook)

            # A person moves num_workers one step right and presses Run.
            # Run All left the page at its end, and JupyterLab does not lay out cells far off screen:
            # their innerText is empty until they are, their textContent is not.
            readout = page.locator(".widget-hslider .widget-readout").first
            readout.scroll_into_view_if_needed()
            before = int(readout.text_content().strip())
            handle = page.locator(".widget-hslider .noUi-handle").first
            handle.focus()
            handle.press("ArrowRight")
            page.locator(".widget-button", has_text="Run").first.click()
            page.wait_for_function(
                "document.body.innerText.includes('Run 2:')", timeout=120_000)
            _wait_for_timeline_image(page)
            assert f"num_workers={before + 1}" in page.inner_text("body")  # the knob reached the run
            assert page_errors == [], page_errors
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"browser-{Path(notebook).stem}.png"), full_page=True)
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"browser-failure-{Path(notebook).stem}.png"),
                            full_page=True)
            raise
        finally:
            browser.close()


@pytest.mark.parametrize("notebook", PRESENTED)
def test_presenting_live_with_working_widgets(lab, notebook):
    """The instructor's flow: Run All, select the title, start the deck, walk the slides with
    the remote; vote in the prediction; on the explorer's slide move a slider, press Run, and the
    timeline redraws inside the slide."""
    from playwright.sync_api import sync_playwright

    page_errors: list[str] = []
    stem = Path(notebook).stem
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=lab["chromium"], args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.on("pageerror", lambda error: page_errors.append(str(error)))
        try:
            _open_and_run_all(page, lab, notebook)
            page.wait_for_function(CHECKED, timeout=240_000)
            _assert_every_cell_ran(page, lab, notebook)
            page.locator(".jp-MarkdownCell .jp-InputPrompt").first.click()
            page.locator(".jp-NotebookPanel-toolbar [data-command='deck:toggle']").first.click()
            page.wait_for_selector("body[data-jp-deck-mode='presenting']", state="attached", timeout=30_000)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"deck-{stem}-title.png"))

            # After Run All every answer is measured and hidden: each one behind its reveal button.
            assert page.evaluate(ANSWERS_HIDDEN_JS) == "hidden", page.evaluate(ANSWERS_HIDDEN_JS)
            # Walk forward to the prediction: no measured answer on the slide.
            _space_until(page, f"{ONSCREEN} .dllab-prediction input[type=radio]")
            question = page.locator(f"{ONSCREEN} .dllab-prediction").first
            key, entry = _prediction_shown(lab["results"] / f"{stem}.json", question.inner_text())
            # as the page shows it (HTML collapses a unit's leading space: "1  samples" → "1 samples")
            measured = " ".join(f"Measured: {_fmt(entry['measured'], entry.get('unit', ''))}".split())
            assert "Measured:" not in _onscreen_text(page) and "closest" not in question.inner_text()
            page.screenshot(path=str(ARTIFACTS / f"deck-{stem}-prediction.png"))
            # The room's vote is a click: saved with the result, and the answer stays hidden.
            vote = question.locator("input[type=radio]").last
            vote.click()
            label = question.locator(".widget-radio-box label").last.inner_text().strip()
            _wait_for_pick(lab["results"] / f"{stem}.json", key, label)
            assert "Measured:" not in _onscreen_text(page)
            # The reveal: a click on the button in the question's own widget shows the answer.
            question.locator(".dllab-reveal .jupyter-widget-Collapse-header").click()
            page.wait_for_function(
                f"Array.from(document.querySelectorAll('{ONSCREEN} .dllab-prediction'))"
                f".some(w => w.innerText.includes({json.dumps(measured)})"
                " && w.innerText.includes('your pick'))",
                timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / f"deck-{stem}-prediction-revealed.png"))
            # The cell that called reveal() shows the same button, opened by the same click.
            _space_until(page, f"{ONSCREEN} .dllab-prediction-answer")
            assert measured in page.locator(f"{ONSCREEN} .dllab-prediction-answer").first.inner_text()
            page.screenshot(path=str(ARTIFACTS / f"deck-{stem}-answer.png"))

            if "Explorer(" not in (ROOT / "notebooks" / notebook).read_text():
                assert page_errors == [], page_errors
                return  # 00b: a prediction, no explorer
            # On to the explorer's slide: move num_workers, press Run, the figure redraws.
            _space_until(page, f"{ONSCREEN} .widget-hslider .noUi-handle")
            before_src = _timeline_src(page)
            handle = page.locator(f"{ONSCREEN} .widget-hslider .noUi-handle").first
            handle.focus()
            handle.press("ArrowRight")
            page.locator(f"{ONSCREEN} .widget-button", has_text="Run").first.click()
            page.wait_for_function("document.body.innerText.includes('Run 2:')", timeout=120_000)
            # The summary is written before the figure: wait for the image itself to change.
            page.wait_for_function(f"({TIMELINE_SRC_JS}) !== {json.dumps(before_src)}", timeout=60_000)
            assert page.locator("body[data-jp-deck-mode='presenting']").count() == 1, "left the deck"
            body = page.inner_text("body")
            assert "Error displaying widget" not in body and "VBox(children=" not in body
            assert page_errors == [], page_errors
            page.screenshot(path=str(ARTIFACTS / f"deck-{stem}-explorer.png"))
            page.locator(f"{ONSCREEN} .widget-output img").last.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / f"deck-{stem}-explorer-figure.png"))
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"deck-failure-{stem}.png"))
            raise
        finally:
            browser.close()


#: Every measured answer in the page lies in a closed section (hidden, display: none), or why not.
ANSWERS_HIDDEN_JS = """(() => {
  const answers = Array.from(document.querySelectorAll('.dllab-answer'));
  if (!answers.length) return 'no answer in the page';
  const hidden = a => { for (let e = a; e && !e.classList.contains('dllab-reveal'); e = e.parentElement)
                          if (getComputedStyle(e).display === 'none') return true;
                        return false; };
  const shown = answers.filter(a => !hidden(a));
  return shown.length ? 'shown: ' + shown.map(a => a.textContent.slice(0, 80)).join(' | ') : 'hidden';
})()"""


def _onscreen_text(page) -> str:
    """The text of every cell the deck shows now."""
    return page.evaluate(f"Array.from(document.querySelectorAll('{ONSCREEN}'))"
                         ".map(e => e.innerText).join('\\n')")


def _prediction_shown(path: Path, text: str) -> tuple[str, dict]:
    """The results file's entry for the prediction whose question the slide shows."""
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:  # the last cell writes it
        time.sleep(0.5)
    results = json.loads(path.read_text())["results"]
    found = [(k, v) for k, v in results.items() if isinstance(v, dict) and v.get("question")
             and v["question"] in text and v.get("measured") is not None]
    assert found, f"no measured prediction in {path.name} asks what the slide shows: {text[:200]!r}"
    return found[0]


def _wait_for_pick(path: Path, key: str, label: str) -> None:
    deadline = time.monotonic() + 30
    while json.loads(path.read_text())["results"][key]["pick"] != label:
        assert time.monotonic() < deadline, f"the vote {label!r} was not saved in {path.name}"
        time.sleep(0.25)


def _assert_every_cell_ran(page, lab, notebook: str) -> None:
    """What nbmake checks, on the notebook as the browser ran it: save it (Ctrl+S) until every code cell
    has an execution count, then no output is an error. `make test` does not run these notebooks
    again in nbmake (BROWSER_NOTEBOOKS in the Makefile)."""
    path = lab["root"] / notebook
    deadline = time.monotonic() + 180
    while True:
        before = path.stat().st_mtime_ns
        page.keyboard.press("Control+s")
        while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
            time.sleep(0.25)
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(cells)
                  for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert errors == [], f"{notebook}: a cell raised in the browser: {errors}"
        unrun = [i for i, c in enumerate(cells)
                 if "".join(c["source"]).strip() and c.get("execution_count") is None]
        if not unrun:
            return
        assert time.monotonic() < deadline, f"{notebook}: code cells {unrun} never ran after Run All"
        time.sleep(2)


def _open_and_run_all(page, lab, notebook: str) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # jupyterlab-slideshow keeps "presenting" as a user setting: a deck left on by the previous
    # test would hide the menu bar of the next notebook (seen with `make browser-decks`).
    deck_settings = lab["config_dir"] / "lab/user-settings/jupyterlab-slideshow"
    deck_settings.mkdir(parents=True, exist_ok=True)
    (deck_settings / "plugin.jupyterlab-settings").write_text(json.dumps({"active": False}))
    page.goto(f"{lab['url']}/lab/tree/{notebook}?token={lab['token']}&reset")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    page.wait_for_function(
        "document.querySelector('#jp-main-statusbar')?.innerText.includes('Idle')", timeout=60_000)
    for toast in page.locator(".jp-toast-button", has_text="No").all():
        toast.click()
    # "Idle" can show before the kernel takes requests: a Run All then runs nothing (seen once
    # on a busy machine: every prompt still "[ ]" four minutes later). Click again until a
    # code cell has started.
    for _ in range(4):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel").filter(has_text="Run All Cells").first.click()
        try:
            page.wait_for_function(
                "Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'))"
                ".some(p => /\\[(\\*|\\d+)\\]/.test(p.innerText))", timeout=30_000)
            return
        except PlaywrightTimeout:  # try the menu again
            page.keyboard.press("Escape")
    raise AssertionError(f"Run All Cells did not start {notebook}'s cells in 2 minutes")


def _space_until(page, selector: str, steps: int = 80) -> None:
    """Walk the deck (the remote's down button while there is a fragment or subslide below,
    else forward: what Space does) until ``selector`` is on screen."""
    remote = ".jp-Deck-Remote button.jp-deck-mod-direction-"
    for _ in range(steps):
        if page.locator(selector).first.is_visible():
            return
        down = page.locator(remote + "down" + ":not(.jp-mod-disabled)")  # disabled: a class, not an attribute
        (down if down.count() else page.locator(remote + "forward")).first.click()
        page.wait_for_timeout(150)  # the deck animates its move; the loop re-checks the condition
    remote_html = page.inner_html(".jp-Deck-Remote") if page.locator(".jp-Deck-Remote").count() else "none"
    raise AssertionError(f"no slide showed {selector} after {steps} steps; the remote: {remote_html[:1500]}")


TIMELINE_SRC_JS = ("Array.from(document.querySelectorAll('.widget-output img'))"
                   ".filter(img => img.naturalWidth > 100).map(img => img.src).join('|')")


def _timeline_src(page) -> str:
    return page.evaluate(TIMELINE_SRC_JS)


def _wait_for_timeline_image(page) -> None:
    page.wait_for_function(
        "Array.from(document.querySelectorAll('.widget-output img'))"
        ".some(img => img.complete && img.naturalWidth > 100)",
        timeout=120_000)
