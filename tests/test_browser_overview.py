"""The overview deck in a real JupyterLab in Chromium: opened (nothing to run), presented with
jupyterlab-slideshow, walked slide by slide to the end; on every slide each figure has loaded and
the slide fits a 1280×720 window; two slides are kept as screenshots in ``test-artifacts/``.

Shares tests/test_browser.py's server (the ``lab`` fixture) and settings (Debian's ``chromium``,
Playwright)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from test_browser import ARTIFACTS, CHROMIUM_FLAGS, ONSCREEN

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import slides  # noqa: E402

OVERVIEW = ROOT / "notebooks" / "overview.ipynb"
VIEWPORT = {"width": 1280, "height": 720}
#: The slides kept as screenshots: a figure with its caption, and the decision table.
SCREENSHOTS = {"Reading a timeline: 0 workers against 2": "overview-timeline.png",
               "From the symptom to the knob": "overview-decision-table.png"}
REMOTE = ".jp-Deck-Remote button.jp-deck-mod-direction-"
# What is on screen now: the headings and figures of the cells the deck shows, and whether each
# figure has loaded, and the lowest point of the slide (every visible cell's box).
ON_SCREEN_JS = f"""() => {{
  const cells = Array.from(document.querySelectorAll('.jp-Notebook {ONSCREEN}'))
    .filter(c => c.classList.contains('jp-Cell'));
  const images = cells.flatMap(c => Array.from(c.querySelectorAll('.jp-RenderedMarkdown img')));
  return {{
    headings: cells.flatMap(c => Array.from(c.querySelectorAll('h1, h2')))
      .map(h => h.innerText.replace(/¶$/, '').trim()),
    text: cells.map(c => c.innerText.slice(0, 80)),
    images: images.map(i => ({{alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
                              bottom: i.getBoundingClientRect().bottom}})),
    bottom: Math.max(0, ...cells.map(c => c.getBoundingClientRect().bottom)),
    top: Math.min(1e9, ...cells.map(c => c.getBoundingClientRect().top)),
  }};
}}"""


def _expected() -> tuple[int, set[str]]:
    """The deck's slides and subslides, and every figure's alt text, from the notebook."""
    cells = json.loads(OVERVIEW.read_text())["cells"]
    kinds = [c["metadata"]["slideshow"]["slide_type"] for c in cells]
    alts = {alt for c in cells for _, alt, _ in slides.FIGURE.findall("".join(c["source"]))}
    return sum(k in ("slide", "subslide") for k in kinds), alts


def _settled(page, before: list[str] | None, timeout_s: float = 10.0) -> dict:
    """What is on screen once the deck has moved off ``before`` (the last slide's text) and stopped:
    two readings 100 ms apart alike (the deck animates its move; a fixed 400 ms wait took ~9 s of
    the walk and could still read a slow machine's slide mid-move). At the deadline, the last reading:
    the assertions then say what was on screen."""
    last = None
    deadline = time.monotonic() + timeout_s
    while True:
        page.wait_for_timeout(100)
        now = page.evaluate(ON_SCREEN_JS)
        if (now == last and now["text"] != before) or time.monotonic() > deadline:
            return now
        last = now


def test_the_overview_presents_every_slide_with_its_figures(lab):
    from playwright.sync_api import sync_playwright

    n_slides, alts = _expected()
    root = Path(lab["config_dir"]).parent / "notebooks"
    shutil.copy(OVERVIEW, root / OVERVIEW.name)
    deck_settings = Path(lab["config_dir"]) / "lab/user-settings/jupyterlab-slideshow"
    deck_settings.mkdir(parents=True, exist_ok=True)
    (deck_settings / "plugin.jupyterlab-settings").write_text(json.dumps({"active": False}))
    ARTIFACTS.mkdir(exist_ok=True)

    page_errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=lab["chromium"], args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.on("pageerror", lambda error: page_errors.append(str(error)))
        try:
            page.goto(f"{lab['url']}/lab/tree/{OVERVIEW.name}?token={lab['token']}&reset")
            page.wait_for_selector(".jp-Notebook .jp-MarkdownCell img", timeout=60_000)
            for toast in page.locator(".jp-toast-button", has_text="No").all():
                toast.click()
            # No Run All: the deck is markdown. Select the title, start the deck.
            page.locator(".jp-MarkdownCell .jp-InputPrompt").first.click()
            page.locator(".jp-NotebookPanel-toolbar [data-command='deck:toggle']").first.click()
            page.wait_for_selector("body[data-jp-deck-mode='presenting']", state="attached", timeout=30_000)

            seen: list[dict] = []
            taken: set[str] = set()
            for _ in range(3 * n_slides):
                now = _settled(page, seen[-1]["text"] if seen else None)
                if not seen or now["text"] != seen[-1]["text"]:
                    seen.append(now)
                    name = next((SCREENSHOTS[h] for h in now["headings"] if h in SCREENSHOTS), None)
                    if name and name not in taken:
                        page.screenshot(path=str(ARTIFACTS / name))
                        taken.add(name)
                down = page.locator(REMOTE + "down:not(.jp-mod-disabled)")
                forward = page.locator(REMOTE + "forward:not(.jp-mod-disabled)")
                if not down.count() and not forward.count():
                    break  # the last slide
                (down if down.count() else forward).first.click()
            else:
                raise AssertionError(f"the deck did not end after {3 * n_slides} moves")

            assert page.locator("body[data-jp-deck-mode='presenting']").count() == 1, "left the deck"
            assert len(seen) == n_slides, f"{len(seen)} slides shown, the notebook has {n_slides}"
            shown = {image["alt"] for slide in seen for image in slide["images"]}
            assert shown == alts, f"figures never on screen: {alts - shown}"
            for slide in seen:
                where = slide["headings"] or f"a slide after {seen[seen.index(slide) - 1]['headings']}"
                assert all(image["loaded"] for image in slide["images"]), f"{where}: a figure did not load"
                assert slide["top"] >= 0 and slide["bottom"] <= VIEWPORT["height"] + 1, \
                    f"{where}: the slide runs from {slide['top']:.0f} to {slide['bottom']:.0f} px, " \
                    f"the window is {VIEWPORT['height']} px tall"
            assert taken == set(SCREENSHOTS.values()), f"screenshots taken: {taken}"
            assert page_errors == [], page_errors
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "overview-failure.png"))
            raise
        finally:
            browser.close()
