"""The explorer (without a browser) and the plots."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import helpers  # noqa: E402
from conftest import make_loader  # noqa: E402
from helpers.explorers.base import Explorer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_explorer():
    return helpers.TimelineExplorer(num_workers=2, prefetch_factor=2, item_load_s=0.02,
                                    step_s=0.005, items=6, start_method="fork")


def test_explorer_runs_once_on_show_and_reports_model_and_measurement(small_explorer):
    small_explorer.show()
    tl = small_explorer.last_timeline
    assert tl is not None and len(tl.batches) == 6
    assert "Run 1:" in small_explorer.summary.value
    assert "measured" in small_explorer.summary.value and "model" in small_explorer.summary.value
    assert small_explorer.progress.value == small_explorer.progress.max == 6


def test_explorer_shows_errors_in_the_widget_and_raises_only_on_request(small_explorer, monkeypatch):
    from helpers.explorers import ExplorerSettings

    def broken(self):
        raise ValueError("this dataset cannot be built: set items >= 1")

    monkeypatch.setattr(ExplorerSettings, "dataset", broken)
    assert small_explorer.run(raise_errors=False) is None
    assert "set items &gt;= 1" in small_explorer.summary.value
    assert not small_explorer.run_button.disabled
    with pytest.raises(ValueError, match="items >= 1"):
        small_explorer.run(raise_errors=True)


def test_explorer_greys_out_worker_knobs_with_zero_workers_and_still_runs(small_explorer):
    small_explorer.persistent_workers.value = True
    small_explorer.num_workers.value = 0  # prefetch_factor=2 and persistent_workers stay set, greyed out
    assert small_explorer.prefetch_factor.disabled and small_explorer.persistent_workers.disabled
    assert small_explorer.in_order.disabled and small_explorer.start_method.disabled
    tl = small_explorer.run()
    assert tl is not None and tl.workers == [helpers.MAIN_PROCESS]
    assert small_explorer.last_settings.loader_settings.prefetch_factor is None
    small_explorer.num_workers.value = 1
    assert not small_explorer.prefetch_factor.disabled and small_explorer.prefetch_factor.value == 2


def test_explorer_sizes_workers_with_the_hand_over_measured_in_its_run():
    """x = ⌈n / (y + m)⌉ with m read off the run, as notebook 02 teaches; ⌈n / y⌉ would say 4."""
    from dataclasses import replace

    from helpers.explorers import ExplorerSettings
    from helpers.timing.theory import as_timeline, simulate

    n, y, m = 0.2, 0.05, 0.05
    settings = ExplorerSettings(loader_settings=helpers.LoaderSettings(batch_size=1, num_workers=2),
                                item_load_s=n, step_s=y, items=8)
    assert settings.prediction()["recommended_workers"] == 4  # m = 0: the rule of notebook 01
    assert settings.prediction(main_s=m)["recommended_workers"] == 2
    # a run whose loop spends m on every batch once it is there (unpickling starts at fetch_end)
    tl = as_timeline(simulate(8, n, y, 2, main_s=m), num_workers=2)
    tl.batches[:] = [replace(b, received_start=b.fetch_end) for b in tl.batches]
    assert helpers.theory.measured_main_s(tl) == pytest.approx(m)
    summary = helpers.TimelineExplorer()._summary_html(tl, settings)
    assert "recommends 2 worker(s)" in summary and "m = 50.00 ms measured in this run" in summary


def test_explorer_labels_are_not_cut():
    explorer = helpers.TimelineExplorer()
    for box in (explorer.cpu_bound, explorer.batched_fetch, explorer.persistent_workers):
        assert box.indent is False and box.style.description_width == "initial"


class _Warns(Explorer):
    """An explorer whose run raises PyTorch's worker-count warning (and a deprecation Python hides)."""

    def __init__(self, warn: bool = True):
        super().__init__()
        self.warn = warn
        self._assemble([], [], width="100px")

    def _run(self):
        if self.warn:
            warnings.warn("This DataLoader will create 8 worker processes in total.", UserWarning,
                          stacklevel=2)
            warnings.warn("an old API", DeprecationWarning, stacklevel=2)
        self.runs += 1
        self.summary.value = f"<p>Run {self.runs}</p>"
        return self.runs, plt.figure()


def test_a_warning_raised_in_a_run_is_collapsed_under_the_figure_not_above_it():
    explorer = _Warns()
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        explorer.run()
    assert escaped == [], "nothing is printed into the cell's output above the figure"
    shown = explorer.warnings.value
    assert "8 worker processes" in shown and shown.startswith("<details") and "<details open" not in shown
    assert "an old API" not in shown and "8 worker processes" not in explorer.summary.value
    parts = list(explorer.widget.children)
    assert parts.index(explorer.warnings) > parts.index(explorer.output) > parts.index(explorer.summary)
    explorer.run()  # raised again on the next run: still shown once
    assert explorer.warnings.value.count("8 worker processes") == 1
    explorer.warn = False
    explorer.run()
    assert explorer.warnings.value == ""


def test_pytorch_s_own_warning_in_the_timeline_explorer_is_collapsed_too():
    import torch

    if torch.accelerator.is_available():
        pytest.skip("pin_memory warns only where there is no accelerator")
    explorer = helpers.TimelineExplorer(num_workers=0, item_load_s=0.0, step_s=0.0, items=2, pin_memory=True)
    explorer.run()
    assert "pin_memory" in explorer.warnings.value and "pin_memory' argument" not in explorer.summary.value


def _explorer_code_problems(stem: str, source: str) -> list[str]:
    """A duration the code on an explorer's slide does not state in both modes: ``seconds(x)``
    (the slider shows x × SMOKE_TIME_SCALE in quick mode), or ``sized(full, quick)`` whose quick
    duration is not the full one scaled like every other duration."""
    problems = [f"{stem}: {m.group(0)} — write helpers.sized({m.group(1)}, "
                f"{float(m.group(1)) * helpers.config.SMOKE_TIME_SCALE:g})"
                for m in re.finditer(r"helpers\.seconds\(([\d.]+)\)", source)]
    for full, quick in re.findall(r"helpers\.sized\((\d*\.\d+), (\d*\.\d+)\)", source):
        if not math.isclose(float(quick), float(full) * helpers.config.SMOKE_TIME_SCALE):
            problems.append(f"{stem}: sized({full}, {quick}) — quick mode scales durations by "
                            f"{helpers.config.SMOKE_TIME_SCALE}")
    return problems


def test_the_code_on_an_explorer_slide_states_the_values_it_runs_with_in_both_modes():
    cells = [(path.stem, "".join(cell["source"]))
             for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
             for cell in json.loads(path.read_text())["cells"]
             if cell["cell_type"] == "code" and re.search(r"helpers\.\w+Explorer\(", "".join(cell["source"]))]
    assert len(cells) >= 17
    assert [p for stem, source in cells for p in _explorer_code_problems(stem, source)] == []
    bad = "helpers.TimelineExplorer(item_load_s=helpers.seconds(0.03), step_s=helpers.sized(0.06, 0.06))"
    assert len(_explorer_code_problems("99", bad)) == 2
    assert "helpers.sized(0.03, 0.006)" in _explorer_code_problems("99", bad)[0]


def test_explorer_button_click_records_a_new_run(small_explorer):
    small_explorer.run()
    small_explorer.num_workers.value = 3
    small_explorer.run_button.click()
    assert small_explorer.runs == 2
    assert small_explorer.last_settings.loader_settings.num_workers == 3
    assert "num_workers=3" in small_explorer.summary.value


@pytest.mark.parametrize("num_workers", [0, 1, 16])
def test_plot_timeline_has_a_row_per_worker_plus_the_loop(num_workers):
    loader = make_loader(helpers.WorkDataset(32, item_wait_s=0.001), num_workers=num_workers,
                                 prefetch_factor=2 if num_workers else None)
    tl = helpers.record(loader, helpers.ModelledStep(0.001), epochs=2)
    ax = helpers.plot_timeline(tl)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-1] == "loop"
    workers = ["main fetch"] if num_workers == 0 else [f"worker {w}" for w in range(num_workers)]
    assert sorted(labels[:-1]) == sorted(workers)
    assert "batches in" in ax.get_title(loc="left")
    plt.close(ax.figure)


def test_plot_timelines_shares_the_time_axis_and_checks_titles():
    tls = [helpers.record(make_loader(helpers.WorkDataset(4, item_wait_s=0.01))) for _ in range(2)]
    fig = helpers.plot_timelines(tls, titles=["a", "b"])
    assert len(fig.axes) == 2
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    plt.close(fig)
    with pytest.raises(ValueError):
        helpers.plot_timelines(tls, titles=["only one"])
    with pytest.raises(ValueError):
        helpers.plot_timelines([])


def test_prefetcher_rows_and_copy_segments_are_drawn_with_a_legend():
    loader = make_loader(helpers.WorkDataset(4, item_shape=(2,)), batch_size=1)
    plain = helpers.record(loader, helpers.ModelledStep(0.001))
    wrapped = helpers.record(loader, helpers.ModelledStep(0.001), device="cpu",
                             wrap=lambda it: helpers.BatchTransform(it, helpers.HostTransform(wait_s=0.002)))
    fig = helpers.plot_timelines([plain, wrapped])
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert "transform (loop thread)" in labels
    assert fig.axes[0].get_legend() is None and len(fig.legends) == 1  # one legend beside all panels
    texts = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"copy to device", "per-batch transform"} <= texts
    plt.close(fig)


def test_plot_bandwidth_draws_three_lines():
    from helpers.data.transfer import CopyTiming

    timings = [CopyTiming(2**k, 5.0, 20.0, 3.0, 0.01, 1e-5) for k in (16, 20, 24)]
    ax = helpers.plot_bandwidth(timings)
    assert len(ax.get_lines()) == 3
    plt.close(ax.figure)


def test_reference_figures_are_shown_or_said_to_be_missing(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs: shown.extend(objs))
    assert helpers.show_reference_figure("pinned_bandwidth.png", "bandwidth") is True
    assert "images/pinned_bandwidth.png" in shown[0].data and isinstance(shown[1], IPython.display.Image)
    shown.clear()
    assert helpers.show_reference_figure("no_such_figure.png", "nothing") is False
    assert len(shown) == 1 and "No reference figure for this yet (nothing)" in shown[0].data


def test_progress_bars_are_off_with_tqdm_disable_and_the_value_is_parsed_strictly(monkeypatch):
    from helpers.timing.report import progress_bar

    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert progress_bar(10, "x") is None
    assert list(helpers.progress(range(3), "x")) == [0, 1, 2]
    monkeypatch.setenv("TQDM_DISABLE", "sometimes")
    with pytest.raises(ValueError, match="TQDM_DISABLE='sometimes'"):
        progress_bar(10, "x")
    monkeypatch.setenv("TQDM_DISABLE", "0")
    bar = progress_bar(10, "x")
    assert bar is not None
    bar.close()


def test_helpers_lists_its_lazy_names_for_tab_completion():
    names = dir(helpers)
    assert {"plot_timeline", "TimelineExplorer", "record", "LoaderSettings", "lessons"} <= set(names)


def test_table_renders_as_text_and_html_and_refuses_ragged_rows():
    t = helpers.table(["a", "b"], [[1, "x"], [22, "yy"]], caption="c")
    assert "22" in str(t) and "<td>yy</td>" in t._repr_html_() and "<caption" in t._repr_html_()
    with pytest.raises(ValueError, match="every row needs 2 values"):
        helpers.table(["a", "b"], [[1]])


def test_a_diagnosis_draws_through_the_plots_the_instrument_does_not_import():
    from torch.utils.data import DataLoader

    from helpers.timing.diagnosis import result

    assert result.draw is not None  # connected by helpers/__init__.py
    d = helpers.diagnose(DataLoader(helpers.WorkDataset(8), batch_size=2), steps=4, replay=2, progress=False)
    ax = d.plot()
    assert ax.get_title("left").startswith("headroom") and "recommendations" in ax.get_title("left")
    assert helpers.plot_diagnosis(d, "mine").get_title("left").startswith("mine")
    plt.close("all")
