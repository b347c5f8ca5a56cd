"""Repository hygiene: dependency lists agree, notebooks are clean, README is current."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the test extra installs tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: The lessons, in path order. notebooks/overview.ipynb is the slides-only deck (markdown, runs nothing):
#: clean like every notebook, but not a lesson with neighbours, code and checks (tests/test_plans.py).
LESSONS = [p for p in NOTEBOOKS if p.name != "overview.ipynb"]


def _pyproject_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + project["optional-dependencies"]["test"]


def _environment_requirements() -> list[str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    items = [line.strip()[2:].strip() for line in lines[start + 1:] if line.strip().startswith("- ")]
    return [item for item in items if not item.startswith("-e ")]


def test_environment_yml_and_pyproject_list_the_same_packages():
    assert sorted(_environment_requirements()) == sorted(_pyproject_requirements())
    assert "-e .[test]" in (ROOT / "environment.yml").read_text()


def test_only_torch_and_torchvision_are_pinned():
    pinned = [r for r in _pyproject_requirements() if "==" in r]
    assert sorted(pinned) == ["torch==2.14.1", "torchvision==0.29.1"]


def test_there_are_notebooks():
    assert [p.name[:3] for p in NOTEBOOKS][:3] == ["00_", "00b", "01_"]


def test_committed_notebooks_have_no_outputs_or_execution_counts():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None, (path.name, i)
        assert "widgets" not in nb["metadata"], path.name


def test_no_notebook_defines_what_runs_in_a_worker():
    pattern = re.compile(r"^\s*(class\s+\w+\s*\(.*(Dataset|Sampler)|def\s+\w*(collate|worker_init))",
                         re.M)
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                assert not pattern.search("".join(cell["source"])), path.name


def test_notebooks_link_to_their_neighbours():
    """A notebook on the core path links the notebooks before and after it on the path; any other
    notebook links its neighbours by number."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import notebook_table

    path = ["00", *notebook_table.CORE]
    by_number = {p.name.split("_")[0]: p for p in LESSONS}
    numbers = list(by_number)
    for number, lesson in by_number.items():
        order = path if number in path else numbers
        k = order.index(number)
        for neighbour in order[max(k - 1, 0):k] + order[k + 1:k + 2]:
            assert by_number[neighbour].name in lesson.read_text(), (
                f"{lesson.name} does not link to {by_number[neighbour].name}")


def test_readme_notebook_table_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "notebook_table.py"),
                             "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    for path in NOTEBOOKS:
        assert f"notebooks/{path.name}" in readme


def test_readme_images_exist():
    readme = (ROOT / "README.md").read_text()
    images = re.findall(r"\]\((images/[^)]+)\)", readme)
    assert images, "README shows no image"
    for image in images:
        assert (ROOT / image).is_file(), image


def _code_cells(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def test_notebooks_read_as_lessons_without_outputs():
    """The story is in markdown; code cells are short and show the DataLoader call they teach."""
    for path in LESSONS:
        cells = _code_cells(path)
        for source in cells:
            lines = [line for line in source.splitlines()
                     if line.strip() and not line.strip().startswith("#")]
            assert len(lines) <= 16, f"{path.name}: a code cell of {len(lines)} lines"
        assert sum(len(re.findall(r"display\(\s*Markdown\(", s)) for s in cells) == 0, path.name
        if not path.name.startswith("00"):
            # a DataLoader, or torchdata's StatefulDataLoader (a DataLoader subclass: notebook 15)
            assert any(re.search(r"\b(Stateful)?DataLoader\(", s) for s in cells), \
                f"{path.name}: no DataLoader( call"
        assert any("helpers.show_checks(" in s for s in cells), f"{path.name} has no lesson checks"
        markdown = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]
        assert len(markdown) >= len(cells) // 2, f"{path.name}: the story belongs in markdown cells"


def test_every_notebook_topic_has_failing_configurations_tested():
    lessons = {p.stem for p in (ROOT / "helpers" / "lessons").glob("*.py") if p.stem != "__init__"}
    tests = (ROOT / "tests" / "test_lessons.py").read_text()
    for topic in lessons:
        assert f"from helpers.lessons import {topic}" in tests, f"no test shows {topic}'s checks failing"


def test_every_notebook_names_its_sources_and_readme_lists_them():
    readme = (ROOT / "README.md").read_text()
    assert "## Further reading" in readme
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        sources = [c for c in cells
                   if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Sources")]
        assert len(sources) == 1, f"{path.name}: one '## Sources' section"
        text = "".join(sources[0]["source"])
        assert text.count("\n- ") >= 1, f"{path.name}: its sources as a list"


def _false_headings(name: str, markdown: list[str]) -> list[str]:
    """Headings in the handout page of these markdown cells (rendered by scripts/handouts.py's own
    ``render``: nbconvert's lab template and markdown filter) that JupyterLab would not render as
    headings. JupyterLab's marked takes a line as an ATX heading only when its '#'s are followed
    by a space, a tab or the end of the line (nbconvert's mistune also takes '#100703 asked'), and
    a line underlined with '=' or '-' as a setext heading; each heading on the page must be one
    of those, by its words."""
    import nbformat

    sys.path.insert(0, str(ROOT / "scripts"))
    import handouts

    def words(text: str) -> str:
        return re.sub(r"\W", "", re.sub(r"\]\([^)]*\)", "]", text))  # a link counts by its text

    lines = [(i, n, line) for i, cell in enumerate(markdown) for n, line in enumerate(cell.splitlines(), 1)]
    real = {words(m.group(2) or "") for _, _, line in lines
            if (m := re.match(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$", line))}
    for cell in markdown:  # setext: the paragraph above an underline
        paragraph: list[str] = []
        for line in cell.splitlines():
            if re.match(r" {0,3}(=+|-+)[ \t]*$", line) and paragraph:
                real.add(words(" ".join(paragraph)))
            paragraph = paragraph + [line] if line.strip() else []
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(m) for m in markdown])
    page = handouts.render(nb, name, local_static=False)
    found = []
    for match in re.finditer(r"<h([1-6])\b[^>]*>(.*?)</h\1>", page, re.S):
        inner = re.sub(r"<a class=.anchor-link.*?</a>", "", match.group(2))  # nbconvert's '¶'
        text = html.unescape(re.sub(r"<[^>]+>", "", inner))
        if words(text) in real:
            continue
        culprits = [f"{name}, markdown cell {i + 1}, line {n}: {line!r}" for i, n, line in lines
                    if re.match(r" {0,3}#", line) and words(line.lstrip(" #")) == words(text)]
        found += culprits or [f"{name}: a heading JupyterLab does not show as one: {text!r}"]
    return found


def test_the_heading_finder_finds_a_line_nbconvert_makes_a_heading_and_jupyterlab_does_not():
    cells = ["# 03 · A title\n\nText that wraps at an issue\n#100703 asked [exactly](https://x) that.",
             "## 1. A section ##\n\nSetext\n---\n\n```python\n#comment in code\n```\n\n#\n\n  #tag"]
    assert _false_headings("03_x", cells) == [
        "03_x, markdown cell 1, line 4: '#100703 asked [exactly](https://x) that.'",
        "03_x, markdown cell 2, line 12: '  #tag'"]


def test_no_markdown_line_reads_as_a_heading_in_the_handouts_that_jupyterlab_shows_as_text():
    """nbconvert's markdown makes a heading of a line that starts with '#' and no space (an issue
    number wrapped to the start of a line: 03's '#100703' once did); JupyterLab does not. Each
    notebook's markdown is rendered the way the handouts render it."""
    found = []
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        found += _false_headings(path.stem, ["".join(c["source"]) for c in cells
                                             if c["cell_type"] == "markdown"])
    assert found == [], "\n".join(found)


def test_a_plain_install_carries_every_subpackage():
    # `packages = ["helpers"]` once left helpers.lessons out of any install but the editable one.
    import fnmatch

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = [".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "helpers").rglob("__init__.py")]
    missing = [p for p in packages if not any(fnmatch.fnmatchcase(p, pat) for pat in found["include"])]
    assert "helpers.lessons" in packages and not missing, missing


def _make_variable(name: str) -> list[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    found = re.search(rf"^{name}\s*:?=(.*)$", text, re.M)
    assert found, f"the Makefile defines no {name}"
    return found.group(1).split()


def test_the_browser_stage_collects_every_file_that_holds_a_browser_test():
    """`make browser` collects only BROWSER_TESTS: a browser test in another file would never run."""
    marked = {p.name for p in (ROOT / "tests").glob("test_*.py")
              if re.search(r"pytest\.mark\.browser\b", p.read_text())}
    assert {Path(f).name for f in _make_variable("BROWSER_TESTS")} == marked and marked
    for f in _make_variable("BROWSER_TESTS"):
        assert (ROOT / f).is_file(), f


def test_make_test_skips_in_nbmake_exactly_the_notebooks_the_browser_test_runs_to_the_end():
    """`make test` leaves BROWSER_NOTEBOOKS out of its nbmake run because the browser test runs
    them (Run All, every cell's outputs checked): the two lists must name the same notebooks, or
    a notebook would be run twice, or by nothing."""
    import ast

    tree = ast.parse((ROOT / "tests/test_browser.py").read_text())
    values = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
              for t in node.targets if isinstance(t, ast.Name)}
    explored = ast.literal_eval(values["NOTEBOOKS"])
    presented = ast.literal_eval(values["PRESENTED"].orelse)  # `make test`: DLLAB_DECKS unset
    browser = {f"notebooks/{name}" for name in [*explored, *presented]}
    assert set(_make_variable("BROWSER_NOTEBOOKS")) == browser
    assert "$(filter-out $(BROWSER_NOTEBOOKS),$(TIMED_NOTEBOOKS))" in (ROOT / "Makefile").read_text()


# -- README: the front door; docs/: the reference ---------------------------------------------------
README_PROSE_WORDS = 1500


def readme_prose_words(text: str) -> int:
    """README's words outside code blocks and the generated notebook table, counted as a word
    counter does: each run of letters and digits (with ' and -) is one, inside a link's address too."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"<!-- notebooks:start -->.*?<!-- notebooks:end -->", " ", text, flags=re.S)
    return len(re.findall(r"[A-Za-z0-9][\w'-]*", text))


def test_readme_is_short():
    words = readme_prose_words((ROOT / "README.md").read_text())
    assert words <= README_PROSE_WORDS, f"README has {words} words of prose: move reference to docs/"
    sample = "a b\n```python\nc d e\n```\n<!-- notebooks:start -->\nf g\n<!-- notebooks:end -->"
    assert readme_prose_words(sample) == 2


def test_every_relative_link_in_readme_and_docs_resolves():
    pages = [ROOT / "README.md", ROOT / "INSTRUCTORS.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#")[0]
            assert (page.parent / path).exists(), f"{page.relative_to(ROOT)}: {target} does not exist"


def test_readme_shows_00bs_timing_loop_as_it_is():
    """The loop README tells a learner to paste is the one notebook 00b runs."""
    cell = next("".join(c["source"]) for c in json.loads((ROOT / "notebooks" / "00b_my_gpu_is_idle.ipynb")
                                                         .read_text())["cells"]
                if "".join(c["source"]).startswith("def time_loop("))
    assert cell in (ROOT / "README.md").read_text()


def test_readme_lists_every_notebook_off_the_core_path_as_an_elective():
    """Besides 00, the core path and 00b (the shortcut into it), every notebook is an elective."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import notebook_table

    readme = (ROOT / "README.md").read_text()
    electives = readme[readme.index("**The electives**"):readme.index("<!-- notebooks:start -->")]
    for path in NOTEBOOKS:
        number = path.name.split("_")[0]
        if path.name[0].isdigit() and number not in [*notebook_table.CORE, "00", "00b"]:
            assert f"notebooks/{path.name}" in electives, f"{path.name}: neither core nor elective"


def test_one_current_table_of_check_times():
    """One row per command (replaced when measured again, never appended to), each with its time, date,
    commit and the machine's loop speed."""
    text = (ROOT / "docs" / "development.md").read_text()
    table = text[text.index("<!-- check-times:start -->"):text.index("<!-- check-times:end -->")]
    rows = [line for line in table.splitlines() if line.startswith("| `make")]
    commands = [row.split("|")[1].strip() for row in rows]
    for command in ["`make test` from a fresh clone", "`make quota` (inside 1 CPU)", "`make quota QUOTA=0.5`",
                    "`make stress`", "`make start-methods`", "`make handouts`"]:
        assert commands.count(command) == 1, f"{command}: {commands.count(command)} rows"
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert re.fullmatch(r"\d+ s", cells[1]) and re.fullmatch(r"\d{4}-\d\d-\d\d", cells[2]), row
        assert re.fullmatch(r"[0-9a-f]{7,40}", cells[3]) and re.fullmatch(r"\d\.\d\d s", cells[4]), row


def test_docs_list_every_make_target():
    makefile = (ROOT / "Makefile").read_text()
    targets = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    development = (ROOT / "docs" / "development.md").read_text()
    missing = [t for t in targets if not re.search(rf"\bmake {re.escape(t)}\b", development)]
    assert missing == [], f"docs/development.md does not list make {missing}"
