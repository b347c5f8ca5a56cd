"""The timeline explorer: move the knobs, press Run, see your own run (notebooks 01-11)."""

from __future__ import annotations

import html
import math
import multiprocessing as mp
from dataclasses import dataclass, field

import ipywidgets as W

from .. import config
from ..data.datasets import BatchedWorkDataset, WorkDataset
from ..models import ModelledStep
from ..plots.timeline import plot_timeline
from ..timing.recorder import record
from ..timing.settings import HAS_IN_ORDER, LoaderSettings
from ..timing.theory import first_batch_time, measured_main_s, recommend_num_workers, simulate, step_time
from ..timing.timeline import Timeline
from .base import Explorer

SLOW_FACTOR = 10.0  #: how much slower the explorer's stragglers are


@dataclass(frozen=True)
class ExplorerSettings:
    """One run of the explorer: a :class:`WorkDataset` of ``items`` items that each take
    ``item_load_s`` (waiting, or CPU work when ``cpu_bound``), a modelled step of
    ``step_s``, and the loader's settings."""

    loader_settings: LoaderSettings = field(default_factory=LoaderSettings)
    item_load_s: float = 0.2
    step_s: float = 0.05
    items: int = 20
    epochs: int = 1
    cpu_bound: bool = False
    request_wait_s: float = 0.0  #: per request: per sample, or per batch with batched_fetch
    batched_fetch: bool = False  #: the dataset has ``__getitems__`` (one request per batch)
    slow_every: int = 0  #: one item in this many is SLOW_FACTOR times slower (0 = none)

    def dataset(self) -> WorkDataset:
        cls = BatchedWorkDataset if self.batched_fetch else WorkDataset
        return cls(self.items,
                   item_wait_s=0.0 if self.cpu_bound else self.item_load_s,
                   item_cpu_s=self.item_load_s if self.cpu_bound else 0.0,
                   request_wait_s=self.request_wait_s,
                   slow_every=self.slow_every,
                   slow_factor=SLOW_FACTOR if self.slow_every else 1.0)

    def batch_load_s(self) -> float:
        """One batch's cost in a worker: its items (stragglers at their average share) and requests."""
        requests = 1 if self.batched_fetch else self.loader_settings.batch_size
        return self.dataset().mean_item_s() * self.loader_settings.batch_size + self.request_wait_s * requests

    def prediction(self, startup_s: float = 0.0, main_s: float = 0.0) -> dict[str, float]:
        """The step-time model for these settings (seconds). ``main_s`` is m, the loop's own share
        of each batch (the hand-over), as measured in the run: the worker count is
        x = ⌈n / (y + m)⌉, the sizing rule of notebook 02."""
        n, workers = self.batch_load_s(), self.loader_settings.num_workers
        per_epoch = math.ceil(self.items / self.loader_settings.batch_size)
        plan = simulate(per_epoch, n, self.step_s, workers,
                        prefetch_factor=self.loader_settings.effective_prefetch_factor, startup_s=startup_s,
                        main_s=main_s)
        return {
            "step_interval_s": step_time(n, self.step_s, workers, main_s=main_s),
            "first_batch_s": first_batch_time(n, workers, startup_s=startup_s, main_s=main_s),
            "epoch_s": plan[-1].step_end,
            "recommended_workers": recommend_num_workers(n, self.step_s, main_s=main_s),
        }


class TimelineExplorer(Explorer):
    """Sliders for the DataLoader's knobs, a Run button, and the timeline of each run.

    Call :meth:`show` to display it: it runs once with the defaults right away (so
    the output exists without a click, and a failure raises in the cell). Button
    runs show errors in the widget instead of raising. ``last_timeline`` holds the
    latest recording, ``last_settings`` its settings. With ``num_workers`` at 0 the
    knobs that only apply to workers are greyed out (and not passed to the loader).
    """

    def __init__(
        self,
        *,
        num_workers: int = 2,
        prefetch_factor: int | None = 2,
        batch_size: int = 1,
        item_load_s: float = 0.2,
        step_s: float = 0.05,
        items: int = 20,
        epochs: int = 1,
        persistent_workers: bool = False,
        pin_memory: bool = False,
        in_order: bool = True,
        start_method: str | None = None,
        cpu_bound: bool = False,
        request_wait_s: float = 0.0,
        batched_fetch: bool = False,
        slow_every: int = 0,
        max_workers: int | None = None,
    ):
        super().__init__()
        cores = config.available_cores()
        max_workers = max_workers if max_workers is not None else max(2 * cores, 4)
        style = {"description_width": "130px"}
        layout = W.Layout(width="380px")
        wide = {"description_width": "initial"}

        def slider(cls, value, lo, hi, step, description, **kw):
            return cls(value=value, min=lo, max=hi, step=step, description=description,
                       style=style, layout=layout, continuous_update=False, **kw)

        def checkbox(value, description, **kw):
            return W.Checkbox(value=value, description=description, indent=False, style=wide,
                              layout=W.Layout(width="auto"), **kw)

        self.num_workers = slider(W.IntSlider, num_workers, 0, max_workers, 1, "num_workers")
        self.prefetch_factor = W.Dropdown(
            options=[("default (2)", None), 1, 2, 3, 4, 6, 8],
            value=prefetch_factor, description="prefetch_factor", style=style, layout=layout)
        self.batch_size = slider(W.IntSlider, batch_size, 1, 64, 1, "batch_size")
        self.item_load_s = slider(W.FloatSlider, item_load_s, 0.0, 1.0, 0.005, "load per item (s)",
                                  readout_format=".3f")
        self.step_s = slider(W.FloatSlider, step_s, 0.0, 1.0, 0.005, "step (s)", readout_format=".3f")
        self.items = slider(W.IntSlider, items, 1, 400, 1, "items")
        self.epochs = slider(W.IntSlider, epochs, 1, 5, 1, "epochs")
        self.cpu_bound = checkbox(cpu_bound, "load is CPU work (not waiting)")
        self.request_wait_s = slider(W.FloatSlider, request_wait_s, 0.0, 0.5, 0.005, "request cost (s)",
                                     readout_format=".3f")
        self.batched_fetch = checkbox(batched_fetch, "__getitems__: one request per batch")
        self.slow_every = W.Dropdown(
            options=[("none", 0), *((f"1 in {k}, {SLOW_FACTOR:g}× slower", k) for k in (5, 7, 11, 21, 51))],
            value=slow_every, description="stragglers", style=style, layout=layout)
        self.persistent_workers = checkbox(persistent_workers, "persistent_workers")
        self.pin_memory = checkbox(pin_memory, "pin_memory")
        self.in_order = checkbox(in_order, "in_order", disabled=not HAS_IN_ORDER)
        methods = mp.get_all_start_methods()
        self.start_method = W.Dropdown(options=methods, value=start_method or config.start_method(),
                                       description="start method", style=style, layout=layout)
        self.progress = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="380px"))
        self.last_timeline: Timeline | None = None
        self.last_settings: ExplorerSettings | None = None
        self.num_workers.observe(lambda _change: self._grey_out_worker_knobs(), names="value")
        self._grey_out_worker_knobs()

        self._assemble([self.num_workers, self.prefetch_factor, self.batch_size, self.item_load_s,
                        self.step_s, self.items, self.epochs, self.request_wait_s],
                       [self.start_method, self.slow_every, self.cpu_bound, self.batched_fetch,
                        self.persistent_workers, self.pin_memory, self.in_order],
                       width="400px", under_button=[self.progress])

    def _grey_out_worker_knobs(self) -> None:
        no_workers = self.num_workers.value == 0
        for knob in (self.prefetch_factor, self.persistent_workers, self.start_method):
            knob.disabled = no_workers
        self.in_order.disabled = no_workers or not HAS_IN_ORDER

    # -- reading the knobs ---------------------------------------------------------------
    def settings(self) -> ExplorerSettings:
        """The knobs' current values (worker-only knobs left out with 0 workers)."""
        workers = self.num_workers.value
        loader_settings = LoaderSettings(
            batch_size=self.batch_size.value,
            num_workers=workers,
            prefetch_factor=self.prefetch_factor.value if workers else None,
            persistent_workers=self.persistent_workers.value if workers else False,
            pin_memory=self.pin_memory.value,
            in_order=self.in_order.value if workers else True,
            start_method=self.start_method.value if workers else None,
        )
        return ExplorerSettings(
            loader_settings=loader_settings,
            item_load_s=self.item_load_s.value,
            step_s=self.step_s.value,
            items=self.items.value,
            epochs=self.epochs.value,
            cpu_bound=self.cpu_bound.value,
            request_wait_s=self.request_wait_s.value,
            batched_fetch=self.batched_fetch.value,
            slow_every=self.slow_every.value,
        )

    # -- running (show() and run() are the base's) -----------------------------------------
    def _run(self):
        settings = self.settings()  # PyTorch's warnings: caught by the base, collapsed under the figure
        loader = settings.loader_settings.loader(settings.dataset())
        expected = math.ceil(settings.items / settings.loader_settings.batch_size) * settings.epochs
        self.progress.max, self.progress.value = max(expected, 1), 0
        timeline = record(loader, ModelledStep(settings.step_s), epochs=settings.epochs,
                          on_batch=self._advance, progress=False)
        self.runs += 1
        self.last_timeline, self.last_settings = timeline, settings
        figure = plot_timeline(timeline).figure
        self.summary.value = self._summary_html(timeline, settings)
        return timeline, figure

    def _advance(self, _batch) -> None:
        self.progress.value += 1

    def _summary_html(self, tl: Timeline, settings: ExplorerSettings) -> str:
        s = tl.summary()
        main_s = measured_main_s(tl)  # m, measured in this run as everywhere in the lab
        model = settings.prediction(startup_s=tl.worker_startup_s(), main_s=main_s)
        rows = [
            ("median step interval (s)", s["median_step_interval_s"], model["step_interval_s"]),
            ("first batch (s)", s["first_batch_s"], model["first_batch_s"]),
            ("first epoch (s)", tl.epochs[0].end - tl.epochs[0].iter_start, model["epoch_s"]),
        ]
        table = "".join(
            f"<tr><td>{name}</td><td>{measured:.3f}</td><td>{predicted:.3f}</td></tr>"
            for name, measured, predicted in rows
        )
        # with 0 workers no batch is handed over: m is then only the DataLoader's bookkeeping
        no_handover = ("; with 0 workers there is no hand-over, so this m is only the bookkeeping"
                       if settings.loader_settings.num_workers == 0 else "")
        return (
            f"<p><b>Run {self.runs}:</b> <code>{html.escape(tl.describe())}</code> — "
            f"{s['batches']} batches in {s['wall_s']:.2f} s; "
            f"the loop waited for data {s['wait_fraction']:.0%} of the time. The model "
            f"recommends {model['recommended_workers']} worker(s) for these costs "
            f"(x = ⌈n / (y + m)⌉, with m = {main_s * 1e3:.2f} ms measured in this run{no_handover}).</p>"
            "<table><tr><th></th><th>measured</th><th>model</th></tr>"
            f"{table}</table>"
        )
