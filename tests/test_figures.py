"""Figures anyone can read, on a projected slide too: one colour-blind-safe palette
(``helpers/palette.py``) and no colour outside it, text at least 12 pt on a 1280-px slide, every
reference figure in ``images/`` at most 16:9 tall and drawn by the current scripts
(``scripts/make_figures.py --check``: metadata only, no run)."""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import Collection  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.text import Text  # noqa: E402

import helpers  # noqa: E402
from helpers import palette  # noqa: E402
from helpers.plots import provenance  # noqa: E402
from helpers.plots.style import text_pt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "images"


def load_script(name: str):
    """A script in scripts/ as a module (its ``main`` runs only as ``__main__``)."""
    spec = importlib.util.spec_from_file_location(f"_script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- colour-blind readers ------------------------------------------------------------------------
#: Machado, Oliveira & Fernandes (2009), "A physiologically-based model for simulation of color
#: vision deficiency", severity 1.0 (dichromacy); applied to linear sRGB.
MACHADO = {
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
}
#: Two colours whose CIELAB distance (ΔE*ab, 1976) is at least this are told apart at a glance;
#: about 2 is the smallest difference anyone notices.
MIN_DELTA_E = 15.0


def _linear(colour: str) -> np.ndarray:
    c = np.array([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(linear_rgb: np.ndarray) -> np.ndarray:
    rgb_to_xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = rgb_to_xyz @ np.clip(linear_rgb, 0, 1) / np.array([0.95047, 1.0, 1.08883])  # D65 white
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str, deficiency: str | None = None) -> float:
    """ΔE*ab between two ``#RRGGBB`` colours as seen with ``deficiency`` (None: typical vision)."""
    m = np.eye(3) if deficiency is None else np.array(MACHADO[deficiency])
    return float(np.linalg.norm(_lab(m @ _linear(a)) - _lab(m @ _linear(b))))


@pytest.mark.parametrize("deficiency", [None, *MACHADO])
def test_roles_drawn_side_by_side_stay_apart_for_colour_blind_readers(deficiency):
    close = {f"{a}/{b}": round(delta_e(palette.ROLES[a], palette.ROLES[b], deficiency), 1)
             for a, b in palette.SIDE_BY_SIDE
             if delta_e(palette.ROLES[a], palette.ROLES[b], deficiency) < MIN_DELTA_E}
    assert close == {}


def test_the_simulation_catches_the_pair_the_old_figures_used():
    """matplotlib's tab10 red and green, the loop's waiting and stepping before the palette: far
    apart for typical vision, nearly one colour for a deuteranope — the check can fail."""
    red, green = "#D62728", "#2CA02C"
    assert delta_e(red, green) > 100
    assert delta_e(red, green, "deuteranopia") < MIN_DELTA_E


def test_waiting_and_working_differ_without_colour():
    assert palette.HATCHES.get("wait") and not palette.HATCHES.get("step")
    assert palette.HATCHES.get("sync") and palette.HATCHES["sync"] != palette.HATCHES["wait"]


def test_text_colours_read_on_white():
    assert {name: round(palette.contrast(c, palette.PAPER), 2) for name, c in palette.TEXT.items()
            if name != "border" and palette.contrast(c, palette.PAPER) < 4.5} == {}
    assert palette.ink_on(palette.ROLES["fetch"]) == palette.PAPER
    assert palette.ink_on(palette.ROLES["step"]) == palette.INK


# -- no colour outside the palette ---------------------------------------------------------------
#: Where colours are drawn. predict.py's one literal is the widget's neutral border, set in its CSS.
GUARDED = ["helpers/plots", "helpers/explorers", "helpers/classroom"]
NOT_GUARDED = {"helpers/classroom/predict.py"}
_HEX = re.compile(r"#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?(?:[0-9a-fA-F]{2})?\b")
_CSS_COLOUR = re.compile(r"(?:color|background(?:-color)?)\s*:\s*([a-z]+)", re.I)
_COLOUR_KEYWORDS = {"color", "colour", "colors", "facecolor", "edgecolor", "hatchcolor", "c", "fc", "ec",
                    "markerfacecolor", "markeredgecolor", "cmap"}
_FMT = re.compile(r"^[-.:o^v<>sp*hHxXdD|_+1-4 ]*[bgrcmykw][-.:o^v<>sp*hHxXdD|_+1-4 ]*$")


def colour_literals(path: Path) -> list[str]:
    """``line: literal`` for each colour written in the code: hex strings and CSS colours (also in
    f-strings), constants given to a colour keyword, colormaps named in place, colour letters in
    a ``plot`` format string."""
    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = [w for w in _CSS_COLOUR.findall(node.value) if w.lower() in matplotlib.colors.CSS4_COLORS]
            for hit in _HEX.findall(node.value) + named:
                found.append(f"{node.lineno}: {hit}")
        elif isinstance(node, ast.keyword) and node.arg in _COLOUR_KEYWORDS:
            if isinstance(node.value, ast.Constant) and node.value.value not in ("none", None):
                found.append(f"{node.value.lineno}: {node.arg}={node.value.value!r}")
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("colormaps"):
            if isinstance(node.slice, ast.Constant):
                found.append(f"{node.lineno}: colormaps[{node.slice.value!r}]")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "plot"
              and any(isinstance(a, ast.Constant) and isinstance(a.value, str) and _FMT.match(a.value)
                      for a in node.args)):
            found.append(f"{node.lineno}: a colour in plot()'s format string")
    return found


def test_no_colour_is_written_outside_the_palette():
    files = [p for folder in GUARDED for p in (ROOT / folder).rglob("*.py")
             if str(p.relative_to(ROOT)) not in NOT_GUARDED]
    assert len(files) > 15
    found = {str(p.relative_to(ROOT)): colour_literals(p) for p in files}
    assert {path: hits for path, hits in found.items() if hits} == {}


def test_the_colour_guard_names_what_it_finds(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import matplotlib\n"
                    "def f(ax, x, colour):\n"
                    "    ax.plot(x, x, 'r--')\n"
                    "    ax.bar(x, x, color='tab:blue', edgecolor='none')\n"
                    "    html = f\"<b style='color:#a00'>{colour}</b><i style='background: red'>\"\n"
                    "    return matplotlib.colormaps['tab10'], ax.plot(x, x, 'o-', color=colour)\n")
    assert colour_literals(path) == ["3: a colour in plot()'s format string", "4: color='tab:blue'",
                                     "5: #a00", "5: red", "6: colormaps['tab10']"]


# -- every figure a notebook draws: the palette's colours, text a slide can read ---------------------
def _drawn_colours(figure) -> set[str]:
    colours = set()

    def add(value):
        for rgba in np.atleast_2d(matplotlib.colors.to_rgba_array(value)):
            if rgba[3] > 0:
                colours.add(matplotlib.colors.to_hex(rgba[:3]).upper())

    for artist in figure.findobj(lambda a: a.get_visible()):
        if isinstance(artist, Line2D):
            add(artist.get_color())
            add(artist.get_markerfacecolor())
        elif isinstance(artist, Patch | Collection):
            add(artist.get_facecolor())
            add(artist.get_edgecolor())
        elif isinstance(artist, Text) and artist.get_text():
            add(artist.get_color())
    return colours


def _allowed_colours() -> set[str]:
    viridis = matplotlib.colormaps[palette.SEQUENTIAL]
    return ({c.upper() for c in [*palette.OKABE_ITO.values(), *palette.GREYS.values(), palette.PAPER,
                                 palette.INK]}
            | {matplotlib.colors.to_hex(viridis(i / 255)).upper() for i in range(256)}
            | {matplotlib.colors.to_hex(matplotlib.rcParams["grid.color"]).upper()})


def _small_timeline():
    dataset = helpers.WorkDataset(8, item_wait_s=0.002, item_shape=(2,))
    loader = helpers.LoaderSettings(batch_size=2).loader(dataset)
    return helpers.record(loader, helpers.ModelledStep(0.002), device="cpu", progress=False,
                          wrap=lambda it: helpers.BatchTransform(it, helpers.HostTransform(wait_s=0.001)))


def _figures():
    """Each public plot function drawn from small made-up inputs."""
    from helpers.data.remote.requests import PART_FIELDS
    from helpers.data.transfer import CopyTiming

    tl = _small_timeline()
    memory = NS(pids=lambda: [1, 2],
                series=lambda pid: [NS(t=t, uss=pid * t * 2**20, pss=2**21, rss=2**22) for t in (0.0, 0.01)])
    lanes = [[0, t, 0.001 * t, 0.002 * t + 0.001, 0.003 * t + 0.002] for t in range(4)]
    requests = NS(remote=np.array(lanes),
                  in_flight=lambda: (np.array([0, 0.001, 0.01]), np.array([0, 4, 0])))
    parts = NS(samples_per_s=lambda: 50.0, mean_parts=lambda: dict.fromkeys(PART_FIELDS, 0.002))
    resumed = NS(n=16, counts={i: 1 + (i < 4) for i in range(14)}, repeated=4, missing=[14, 15])
    rank = NS(rank=0, origin=0.0, timeline=tl,
              sync_spans=[(b.step_start + b.step_s / 2, b.step_start + b.step_s) for b in tl.batches])
    timings = [NS(source=s, first_byte_s=0.001 * (i + 1), size=4096 * 4**k, throughput=1e6 * (k + 1))
               for i, s in enumerate(("local", "server", "remote")) for k in range(3)]
    return {
        "plot_timeline": helpers.plot_timeline(tl).figure,
        "plot_timelines": helpers.plot_timelines([tl, tl], titles=["a " * 80, "b"]),
        "plot_intervals": helpers.plot_intervals([tl], ["0 workers"], predictions=[
            helpers.simulate(4, 0.004, 0.002, 0)]).figure,
        "plot_step_time_model": helpers.plot_step_time_model([0, 1, 2], [3.0, 2.0, 1.0], [3.1, 2.1, 1.1],
                                                             step_s=1.0).figure,
        "plot_bandwidth": helpers.plot_bandwidth([CopyTiming(2**k, 5.0, 20.0, 3.0, 0.01, 1e-5)
                                                  for k in (16, 20)]).figure,
        "plot_ratios": helpers.plot_ratios({"a": 1.0, "b": 2.0}, reference={"b": 2.5}).figure,
        "plot_speedup_curves": helpers.plot_speedup_curves([0.5, 1, 2], {"a": [1, 1, 1], "b": [2, 1.5, 1.1]},
                                                           measured={"b": 1.4}, at_ratio=1.0).figure,
        "plot_image_rates": helpers.plot_image_rates({"big": {"1": 10.0, "2": 19.0}}, cores_free=1.9,
                                                     title="t").figure,
        "plot_resume": helpers.plot_resume({"skip": resumed}),
        "plot_ranks": helpers.plot_ranks(NS(ranks=[rank, NS(**{**vars(rank), "rank": 1})]), title="ranks"),
        "plot_worker_memory": helpers.plot_worker_memory(tl, memory, 2**20, title="memory"),
        "plot_requests": helpers.plot_requests(tl, requests, title="requests", concurrency=4),
        "plot_concurrency": helpers.plot_concurrency({(1, 1): parts, (1, 2): parts}, latency_s=0.04,
                                                     request_s=0.05),
        "plot_object_timings": helpers.plot_object_timings(timings, latency_s=0.04, bandwidth=25e6),
    }


@pytest.fixture(scope="module")
def figures():
    drawn = _figures()
    for figure in drawn.values():
        figure.canvas.draw()  # ticks and their labels exist once drawn
    yield drawn
    plt.close("all")


def test_every_plot_draws_text_a_slide_can_read(figures):
    small = {}
    for name, figure in figures.items():
        floor = text_pt(figure)
        sizes = [t.get_fontsize() for t in figure.findobj(Text) if t.get_text() and t.get_visible()]
        assert sizes, name
        if min(sizes) < floor - 1e-6:
            small[name] = (min(sizes), floor)
    assert small == {}
    # what the floor means: 12 pt on a 1280-px slide the figure fills
    assert palette.min_text_pt(1280 / 96) == pytest.approx(12)


def test_every_plot_draws_only_the_palettes_colours(figures):
    allowed = _allowed_colours()
    assert {name: sorted(_drawn_colours(f) - allowed) for name, f in figures.items()
            if _drawn_colours(f) - allowed} == {}


def test_every_plot_fits_a_slide_and_keeps_its_legend_off_the_data(figures):
    for name, figure in figures.items():
        assert provenance.fits_slide(*figure.get_size_inches()), name
        for ax in figure.axes:
            legend = ax.get_legend()
            image = any(isinstance(a, AxesImage) for a in ax.get_children())
            if legend is None or not ax.has_data() or image:
                continue
            box, area = legend.get_window_extent(), ax.get_window_extent()
            outside = (box.x0 >= area.x1 - 1 or box.x1 <= area.x0 + 1 or box.y0 >= area.y1 - 1
                       or box.y1 <= area.y0 + 1)
            assert outside, f"{name}: a legend over the data"


# -- the reference figures in images/ ------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(IMAGES.glob("*.png")), ids=lambda p: p.name)
def test_each_reference_figure_fits_a_16_9_slide(path):
    from PIL import Image

    with Image.open(path) as image:
        width, height = image.size
    problem = (f"{width} × {height} px is taller than 16:9" if not provenance.fits_slide(width, height)
               else f"{width} px wide: text drawn for a 1280-px slide would shrink" if width < 1200 else None)
    assert problem is None, problem


def test_every_figure_in_images_is_drawn_by_a_script():
    claimed = [*load_script("make_figures").expected(), *load_script("make_gpu_figures").expected()]
    assert provenance.unclaimed(IMAGES, claimed) == []


def test_the_cpu_figures_come_from_the_current_script():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_figures.py"), "--check"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_check_names_a_figure_drawn_by_other_code(tmp_path):
    script = load_script("make_figures")
    name, (source, digest) = next(iter(script.expected().items()))
    figure = plt.figure(figsize=(12.8, 4))
    provenance.save(figure, tmp_path / name, source=source, digest=digest, description="test")
    assert not any(line.startswith(f"{name}:") for line in script.check(tmp_path))
    provenance.save(figure, tmp_path / name, source=source, digest="0" * 16, description="test")
    assert any(line.startswith(f"{name}: drawn by") for line in script.check(tmp_path))
    shutil.copy(ROOT / "images" / "classroom" / "deck-03-title.png", tmp_path / name)  # no origin
    assert any(line.startswith(f"{name}: carries no origin") for line in script.check(tmp_path))
    plt.close(figure)
    with pytest.raises(ValueError, match="taller than a 16:9 slide"):
        provenance.save(plt.figure(figsize=(12.8, 8)), tmp_path / "tall.png", source=source, digest=digest,
                        description="test")
    plt.close("all")


def test_the_gpu_figures_come_from_the_current_script():
    assert load_script("make_gpu_figures").check() == []


def test_the_gpu_figures_redraw_from_saved_measurements_without_a_gpu(tmp_path):
    """What ``make_gpu_figures.py`` saves, it can draw again on a CPU (``--render``)."""
    import json
    from dataclasses import asdict

    from helpers.data.transfer import CopyTiming

    script = load_script("make_gpu_figures")
    tl = _small_timeline().to_dict()
    saved = {
        "bandwidth": {"timings": [asdict(CopyTiming(2**k, 5.0, 20.0, 3.0, 0.01, 1e-5)) for k in (16, 20)]},
        "copy_segment": {"runs": {"pin_memory=False": tl, "pin_memory=True": tl}},
        "device_prefetch": {"runs": {"loop copies": tl, "DevicePrefetcher": tl}},
        "capstone": {"ratios": {"baseline": 1.0, "workers": 3.0},
                     "published": {"baseline": 1, "workers": 3.5},
                     "batches": 8, "step": "the tutorial's model"},
    }
    data = tmp_path / "data"
    data.mkdir()
    for group, values in saved.items():
        (data / f"{group}.json").write_text(json.dumps({"where": "a made-up GPU", **values}, default=str))
    drawn = script.render(data, tmp_path)
    assert sorted(drawn) == sorted(name for name, *_ in script.FIGURES.values())
    assert script.check(tmp_path) == []
    assert "redrawn without a GPU" in provenance.read(tmp_path / "capstone_gpu.png")[provenance.DESCRIPTION]
