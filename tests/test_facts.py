"""One number per fact: each run time, duration, count, formula and command line a reader meets lives in one
place, generated from it or held equal to it here; and every link to a heading finds its heading."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import notebook_table  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PAGES = [ROOT / "README.md", ROOT / "INSTRUCTORS.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = re.compile(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", re.S)
#: The diagnosis from a terminal, shown the same everywhere a reader meets it.
DIAGNOSE = "dataloader-lab diagnose my_module:make_loader --step-ms 30 --verify"
COMMAND_LINE = r"(?:python -m helpers\.diagnose|dataloader-lab diagnose) [\w./]+:\w+[^`\n\"']*"


def markdown(path: Path) -> str:
    """What a reader reads in a page or a notebook's markdown cells, generated blocks left out."""
    if path.suffix == ".ipynb":
        text = "\n\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                           if c["cell_type"] == "markdown")
    else:
        text = path.read_text()
    return GENERATED.sub("", text)


def reader_texts() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): markdown(p) for p in [*PAGES, *NOTEBOOKS]}


def found(pattern: str, texts: dict[str, str] | None = None) -> list[str]:
    texts = reader_texts() if texts is None else texts
    return [f"{name}: …{' '.join(text[max(0, m.start() - 60):m.end() + 30].split())}…"
            for name, text in texts.items() for m in re.finditer(pattern, text)]


# -- run times ----------------------------------------------------------------------------------
#: A notebook's run time written by hand: "Run All measured 15 s", "20 s quick", "about 6 min full".
#: (A workload's durations, "0.25 s in quick mode", are not run times.)
RUN_TIME = (r"(?i)\brun all\b[^.|\n]{0,40}?\b\d+(?:\.\d)? (?:s|min)\b|\b\d+ s (?:quick|full)\b|"
            r"\b\d+(?:\.\d)? min (?:quick|full|at full size|in quick mode)\b|\b(?:ran|runs) in about \d+")


def test_the_run_time_finder_finds_a_hand_written_run_time():
    texts = {"a": "Run All measured 15 s quick, 40 s full.", "b": "about 6 min full", "c": "a 0.25 s step",
             "d": "It ran in about 20 s here"}
    assert {hit.split(":")[0] for hit in found(RUN_TIME, texts)} == {"a", "b", "d"}
    assert found(RUN_TIME, {"e": "each item waits 1 s; the step takes 0.25 s (0.05 s in quick mode)."}) == []


def test_run_times_are_stated_only_where_they_are_generated():
    """A notebook's run time is in its metadata (measured); its first cell, README's table, the core path
    and INSTRUCTORS.md's tables are generated from it. Prose quotes none."""
    texts = reader_texts()
    for name in texts:  # the first cell's generated line is checked by scripts/run_times.py
        texts[name] = re.sub(r"\*Run time on [^*]*\*", "", texts[name])
    assert found(RUN_TIME, texts) == []


# -- the class, the deck ------------------------------------------------------------------------
def test_one_length_for_the_class():
    minutes = notebook_table.CLASS_MINUTES
    plan = notebook_table.CLASS_PLAN
    assert [number for *_, number in plan] == ["00", *notebook_table.CORE]
    assert plan[0][0] == 0 and plan[-1][1] == minutes
    assert all(a[1] == b[0] for a, b in zip(plan, plan[1:], strict=False)), "the slots leave a gap"
    wrong = [hit for hit in found(r"(?i)\b(\d+)[- ]minutes? (?:class|session)\b")
             if f"{minutes}-minute" not in hit and f"{minutes} minute" not in hit]
    assert wrong + found(r"(?i)\b(?:two|2) hours\b") == []


def test_the_overview_deck_has_one_length():
    deck = json.loads((ROOT / "notebooks" / "overview.ipynb").read_text())
    title = "".join(deck["cells"][0]["source"]).splitlines()[0]
    minutes = re.search(r"in (\d+) minutes", title).group(1)
    slides = sum(c.get("metadata", {}).get("slideshow", {}).get("slide_type") in ("slide", "subslide")
                 for c in deck["cells"])
    wrong = [hit for hit in found(r"(?i)overview[^.\n]{0,80}?\b(\d+) minutes")
             if f"{minutes} minutes" not in hit]
    wrong += [hit for hit in found(r"\b(\d+) slides\b") if f"{slides} slides" not in hit]
    assert wrong == []


# -- command lines, settings, formulas ----------------------------------------------------------
def test_the_diagnosis_command_is_shown_one_way():
    texts = reader_texts()
    for path in NOTEBOOKS:  # code cells print commands too
        cells = json.loads(path.read_text())["cells"]
        texts[str(path.relative_to(ROOT))] += "\n".join("".join(c["source"]) for c in cells)
    lines = [m.group(0) for text in texts.values()
             for m in re.finditer(COMMAND_LINE, text)]
    assert lines and {line.strip() for line in lines} == {DIAGNOSE}


def test_one_way_to_set_each_make_variable():
    assert found(r"DLLAB_START_METHOD=\w+ make") + found(r"DLLAB_SMOKE=1 make") == []


def test_one_sizing_rule():
    assert found(r"⌈\s*n\s*/\s*y\s*⌉|x = n / y\b") == []


def test_the_quick_mode_scale_is_stated_once():
    """Quick mode's scale is the glossary's; a notebook or page links to it."""
    hits = [hit for hit in found(r"×\s?0\.2\b|by 0\.2\b") if not hit.startswith("docs/glossary.md")]
    assert hits == []


def test_one_name_for_headroom_in_the_pages():
    """SPDL calls it headspace; the glossary says so once, and the lab says headroom."""
    assert [hit for hit in found(r"(?i)headspace") if "SPDL" not in hit] == []


# -- links --------------------------------------------------------------------------------------
def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (GitHub's rule) and its explicit ``<a id="...">``."""
    text = path.read_text() if path.suffix != ".ipynb" else markdown(path)
    found_ids = set(re.findall(r'<a id="([\w-]+)"', text))
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found_ids.add(slug)
    return found_ids


def test_every_link_to_a_heading_finds_it():
    missing = []
    for path in [*PAGES, *NOTEBOOKS]:
        for target, anchor in re.findall(r"\]\(([^)\s#]*)#([\w-]+)\)", markdown(path)):
            page = (path.parent / target).resolve() if target else path
            if page.suffix in (".md", ".ipynb") and page.exists() and anchor not in anchors(page):
                missing.append(f"{path.relative_to(ROOT)} → {target}#{anchor}")
    assert missing == []


@pytest.mark.parametrize("heading,slug", [("The 90-minute class", "the-90-minute-class"),
                                          ("Quick mode for class", "quick-mode-for-class"),
                                          ('Start here: "my GPU is idle"', "start-here-my-gpu-is-idle")])
def test_the_anchor_rule_is_githubs(tmp_path, heading, slug):
    page = tmp_path / "page.md"
    page.write_text(f"# {heading}\n")
    assert slug in anchors(page)


def test_the_h100_figures_are_the_ones_the_model_uses():
    """Notebook 19 quotes one GPU measurement in words; each number it states is the one in
    ``helpers.lessons.main_process.H100`` or computed from it."""
    sys.path.insert(0, str(ROOT))
    from helpers.lessons import main_process

    h100, model = main_process.H100, main_process.h100_model()
    text = " ".join(markdown(next((ROOT / "notebooks").glob("19_*.ipynb"))).split())
    stated = {
        "**37 %**": f"**{h100['reached share of the bound']:.0%}**".replace("%", " %"),
        "(~123 batches/s)": f"(~{h100['needed']:.0f} batches/s)",
        "3.59 s with 4 and 3.62 s with 12": (f"{h100['4 workers s']:.2f} s with 4 and "
                                             f"{h100['12 workers s']:.2f} s with 12"),
        "**72 batches/s**": f"**{h100['loader float32 pinned']:.0f} batches/s**",
        "and **121** of uint8": f"and **{h100['loader uint8 pinned']:.0f}** of uint8",
        "8.1 + 13.9 = 22 ms": f"{model['y_s'] * 1e3:.1f} + {model['m_s'] * 1e3:.1f} = "
                              f"{model['per_batch_s'] * 1e3:.0f} ms",
        "8.1 / 22 ≈ 37 %": f"{model['y_s'] * 1e3:.1f} / {model['per_batch_s'] * 1e3:.0f} ≈ "
                           f"{model['share_of_bound']:.0%}".replace("%", " %"),
        "max(y, m) = 13.9 ms, 59 %": f"max(y, m) = {model['m_s'] * 1e3:.1f} ms, "
                                     f"{model['y_s'] / model['m_s']:.0%}".replace("%", " %"),
    }
    for quoted, computed in stated.items():
        assert quoted in text, f"notebook 19 no longer says {quoted!r}: update this test with the text"
        assert quoted == computed, f"notebook 19 says {quoted!r}; the figures give {computed!r}"
    sources = markdown(ROOT / "docs" / "sources.md") + markdown(next((ROOT / "notebooks").glob("19_*.ipynb")))
    for number in re.findall(r"H100 figures[^\n]*", sources):
        assert f"{h100['reached share of the bound']:.0%}".replace("%", " %") in number
