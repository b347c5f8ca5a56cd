"""The timeline explorer: move the knobs, press Run, see your own run."""

from __future__ import annotations

import html
import math
import multiprocessing as mp
import warnings
from dataclasses import dataclass, field

import ipywidgets as W
import matplotlib.pyplot as plt
from IPython.display import display

from . import config
from .datasets import BatchedWorkDataset, WorkDataset
from .models import ModelledStep
from .plots import plot_timeline
from .recorder import record
from .settings import HAS_IN_ORDER, LoaderSettings
from .theory import first_batch_time, recommend_num_workers, simulate, step_time
from .timeline import Timeline

SLOW_FACTOR = 10.0  #: how much slower the explorer's stragglers are


def _show_figure(output: W.Output, figure) -> None:
    """Replace what ``output`` shows with ``figure`` (then close it: it is drawn as an image)."""
    with output:
        output.clear_output(wait=True)
        display(figure)
    plt.close(figure)


def _error_html(error: Exception) -> str:
    return ("<div style='color:#a00;border:1px solid #a00;padding:6px'><b>Cannot run "
            f"these settings:</b> {html.escape(str(error))}</div>")


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

    def prediction(self, startup_s: float = 0.0) -> dict[str, float]:
        """The step-time model for these settings (seconds)."""
        n, workers = self.batch_load_s(), self.loader_settings.num_workers
        per_epoch = math.ceil(self.items / self.loader_settings.batch_size)
        plan = simulate(per_epoch, n, self.step_s, workers,
                        prefetch_factor=self.loader_settings.effective_prefetch_factor, startup_s=startup_s)
        return {
            "step_interval_s": step_time(n, self.step_s, workers),
            "first_batch_s": first_batch_time(n, workers, startup_s=startup_s),
            "epoch_s": plan[-1].step_end,
            "recommended_workers": recommend_num_workers(n, self.step_s),
        }


class TimelineExplorer:
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
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.progress = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="380px"))
        self.status = W.HTML()
        self.summary = W.HTML()
        self.output = W.Output()
        self.runs = 0
        self.last_timeline: Timeline | None = None
        self.last_settings: ExplorerSettings | None = None
        self.run_button.on_click(lambda _button: self.run(raise_errors=False))
        self.num_workers.observe(lambda _change: self._grey_out_worker_knobs(), names="value")
        self._grey_out_worker_knobs()

        knobs = W.VBox([self.num_workers, self.prefetch_factor, self.batch_size, self.item_load_s,
                        self.step_s, self.items, self.epochs, self.request_wait_s])
        flags = W.VBox([self.start_method, self.slow_every, self.cpu_bound, self.batched_fetch,
                        self.persistent_workers, self.pin_memory, self.in_order,
                        W.HBox([self.run_button]), self.progress, self.status],
                       layout=W.Layout(width="400px"))
        self.widget = W.VBox([W.HBox([knobs, flags]), self.summary, self.output])

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

    # -- running ---------------------------------------------------------------------------
    def show(self) -> None:
        """Display the explorer and run it once with its current knobs (raises on failure)."""
        display(self.widget)
        self.run(raise_errors=True)

    def run(self, raise_errors: bool = True) -> Timeline | None:
        """Record one run with the knobs' values and draw it.

        On bad settings or a failed run, the widget shows the message; with
        ``raise_errors`` the exception is raised as well (so a notebook run fails).
        """
        # Work happens outside `with self.output`: an Output widget swallows exceptions
        # raised inside it, which would let a broken explorer pass CI.
        self.run_button.disabled = True
        try:
            settings = self.settings()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loader = settings.loader_settings.loader(settings.dataset())
                expected = math.ceil(settings.items / settings.loader_settings.batch_size) * settings.epochs
                self.progress.max, self.progress.value = max(expected, 1), 0
                self.status.value = "<i>running…</i>"
                timeline = record(loader, ModelledStep(settings.step_s), epochs=settings.epochs,
                                  on_batch=self._advance, progress=False)
            self.runs += 1
            self.last_timeline, self.last_settings = timeline, settings
            figure = plot_timeline(timeline).figure
            self.summary.value = self._summary_html(timeline, settings, caught)
            self.status.value = f"<b>run {self.runs} done</b>"
            _show_figure(self.output, figure)
            return timeline
        except Exception as error:  # shown in the widget; raised again on request
            self.status.value = ""
            self.summary.value = _error_html(error)
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = False

    def _advance(self, _batch) -> None:
        self.progress.value += 1

    def _summary_html(self, tl: Timeline, settings: ExplorerSettings, caught) -> str:
        s = tl.summary()
        model = settings.prediction(startup_s=tl.worker_startup_s())
        rows = [
            ("median step interval (s)", s["median_step_interval_s"], model["step_interval_s"]),
            ("first batch (s)", s["first_batch_s"], model["first_batch_s"]),
            ("first epoch (s)", tl.epochs[0].end - tl.epochs[0].iter_start, model["epoch_s"]),
        ]
        table = "".join(
            f"<tr><td>{name}</td><td>{measured:.3f}</td><td>{predicted:.3f}</td></tr>"
            for name, measured, predicted in rows
        )
        # once each: the DataLoader checks its worker count in __init__ and again in every iter()
        messages = dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning))
        notes = "".join(f"<li>{html.escape(m)}</li>" for m in messages)
        notes_html = f"<p><b>PyTorch warned:</b></p><ul>{notes}</ul>" if notes else ""
        return (
            f"<p><b>Run {self.runs}:</b> <code>{html.escape(tl.describe())}</code> — "
            f"{s['batches']} batches in {s['wall_s']:.2f} s; "
            f"the loop waited for data {s['wait_fraction']:.0%} of the time. The model "
            f"recommends {model['recommended_workers']} worker(s) for these costs "
            "(x = ⌈n / y⌉: the explorer leaves out the hand-over m).</p>"
            "<table><tr><th></th><th>measured</th><th>model</th></tr>"
            f"{table}</table>{notes_html}"
        )

    def _ipython_display_(self) -> None:
        # Displaying the object shows the controls only; show() also runs once.
        display(self.widget)


class MemoryExplorer:
    """Knobs for notebook 12: how a dataset keeps its file names (the storage), how many
    workers, how they start, persistence and epochs; Run records one run and draws the
    timeline with each worker's memory under it.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_runs`` holds the latest run's
    :class:`helpers.copy_on_read.MemoryRun`.
    """

    def __init__(self, *, storage: str = "list", num_workers: int = 2, items: int = 200_000,
                 batch_size: int = 2000, step_s: float = 0.005, epochs: int = 1,
                 persistent_workers: bool = False, start_method: str | None = None):
        from .copy_on_read import STORAGES

        style, layout = {"description_width": "130px"}, W.Layout(width="380px")
        self.storage = W.Dropdown(options=list(STORAGES), value=storage, description="storage",
                                  style=style, layout=layout)
        self.num_workers = W.IntSlider(value=num_workers, min=1, max=4, step=1, description="num_workers",
                                       style=style, layout=layout, continuous_update=False)
        self.items = W.IntSlider(value=items, min=50_000, max=2_000_000, step=50_000,
                                 description="file names",
                                 style=style, layout=layout, continuous_update=False)
        self.epochs = W.IntSlider(value=epochs, min=1, max=3, step=1, description="epochs",
                                  style=style, layout=layout, continuous_update=False)
        self.start_method = W.Dropdown(options=mp.get_all_start_methods(),
                                       value=start_method or config.start_method(),
                                       description="start method", style=style, layout=layout)
        self.persistent_workers = W.Checkbox(value=persistent_workers, description="persistent_workers",
                                             indent=False, layout=W.Layout(width="auto"))
        self.batch_size, self.step_s = batch_size, step_s
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status, self.summary, self.output = W.HTML(), W.HTML(), W.Output()
        self.runs = 0
        self.last_runs: list = []
        self.run_button.on_click(lambda _button: self.run(raise_errors=False))
        knobs = W.VBox([self.storage, self.num_workers, self.items, self.epochs])
        flags = W.VBox([self.start_method, self.persistent_workers, W.HBox([self.run_button]), self.status],
                       layout=W.Layout(width="400px"))
        self.widget = W.VBox([W.HBox([knobs, flags]), self.summary, self.output])

    def show(self) -> None:
        """Display the explorer and run it once with its current knobs (raises on failure)."""
        display(self.widget)
        self.run(raise_errors=True)

    def run(self, raise_errors: bool = True):
        """Record one run with the knobs' values and draw it (see :class:`TimelineExplorer`)."""
        from torch.utils.data import DataLoader

        from .copy_on_read import PathDataset, make_paths, measure_memory

        self.run_button.disabled = True
        try:
            self.status.value = "<i>running…</i>"
            dataset = PathDataset(make_paths(self.items.value), self.storage.value)
            loader = DataLoader(dataset, batch_size=self.batch_size, shuffle=True,
                                num_workers=self.num_workers.value,
                                multiprocessing_context=self.start_method.value,
                                persistent_workers=self.persistent_workers.value)
            run, timeline, memory = measure_memory(loader, ModelledStep(self.step_s),
                                                   epochs=self.epochs.value, progress=False)
            self.runs += 1
            self.last_runs = [run]
            from .plots import plot_worker_memory

            figure = plot_worker_memory(timeline, memory, dataset.data_bytes())
            MiB = 2**20
            self.summary.value = (
                f"<p><b>Run {self.runs}:</b> <code>storage={html.escape(self.storage.value)}, "
                f"num_workers={self.num_workers.value}, {self.start_method.value}, "
                f"persistent_workers={self.persistent_workers.value}, epochs={self.epochs.value}</code> — "
                f"the data: {dataset.data_bytes() / MiB:.1f} MiB; each worker's USS at its first sample "
                f"{' · '.join(f'{u / MiB:.0f}' for u in run.first_uss)} MiB, grown by "
                f"{' · '.join(f'{g / MiB:.1f}' for g in run.growth)} MiB.</p>")
            self.status.value = f"<b>run {self.runs} done</b>"
            _show_figure(self.output, figure)
            return run
        except Exception as error:  # shown in the widget; raised again on request
            self.status.value = ""
            self.summary.value = _error_html(error)
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = False

    def _ipython_display_(self) -> None:
        display(self.widget)


class RemoteExplorer:
    """Knobs for notebook 13: the round trip and bandwidth the proxy adds, the object size,
    workers, threads per worker (a thread pool in ``__getitems__``) and a local cache (two
    epochs); Run reads ``samples`` objects from ``store`` and draws the timeline with every
    request and the requests in flight under it.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_rate`` holds the latest run's samples/s."""

    def __init__(self, store, *, samples: int = 128, batch_size: int = 16, step_s: float = 0.005,
                 latency_ms: int = 40, bandwidth_mb: int = 0, size_kib: int = 16, num_workers: int = 2,
                 threads: int = 4, cache: bool = False):
        style, layout = {"description_width": "150px"}, W.Layout(width="400px")

        def slider(value, low, high, step, description):
            return W.IntSlider(value=value, min=low, max=high, step=step, description=description,
                               style=style,
                               layout=layout, continuous_update=False)

        self.store, self.samples, self.batch_size, self.step_s = store, samples, batch_size, step_s
        self.latency_ms = slider(latency_ms, 0, 200, 5, "round trip (ms)")
        self.bandwidth_mb = slider(bandwidth_mb, 0, 200, 5, "MB/s per conn. (0: no cap)")
        self.size_kib = W.Dropdown(options=[4, 16, 64, 256, 1024], value=size_kib, description="object (KiB)",
                                   style=style, layout=layout)
        self.num_workers = slider(num_workers, 0, 4, 1, "num_workers")
        self.threads = slider(threads, 1, 16, 1, "threads per worker")
        self.cache = W.Checkbox(value=cache, description="local cache (two epochs)", indent=False,
                                layout=W.Layout(width="auto"))
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status, self.summary, self.output = W.HTML(), W.HTML(), W.Output()
        self.runs, self.last_rate = 0, None
        self._buckets: dict[int, list[str]] = {}
        self.run_button.on_click(lambda _button: self.run(raise_errors=False))
        knobs = W.VBox([self.latency_ms, self.bandwidth_mb, self.size_kib])
        flags = W.VBox([self.num_workers, self.threads, self.cache, W.HBox([self.run_button]), self.status],
                       layout=W.Layout(width="420px"))
        self.widget = W.VBox([W.HBox([knobs, flags]), self.summary, self.output])

    def show(self) -> None:
        """Display the explorer and run it once with its current knobs (raises on failure)."""
        display(self.widget)
        self.run(raise_errors=True)

    def run(self, raise_errors: bool = True):
        import tempfile

        from torch.utils.data import DataLoader

        from .plots import plot_requests
        from .remote import S3Dataset, measure_requests, samples_per_s

        self.run_button.disabled = True
        try:
            self.status.value = "<i>running…</i>"
            size = self.size_kib.value * 1024
            if size not in self._buckets:
                self._buckets[size] = self.store.make_bucket(f"explore-{self.size_kib.value}k",
                                                             count=self.samples, size=size)
            endpoint = self.store.endpoint(self.latency_ms.value / 1e3, self.bandwidth_mb.value * 1e6 or None)
            epochs = 2 if self.cache.value else 1
            with tempfile.TemporaryDirectory(prefix="dllab-cache-") as folder:
                dataset = S3Dataset(endpoint, f"explore-{self.size_kib.value}k", self._buckets[size],
                                    threads=self.threads.value,
                                    cache_dir=folder if self.cache.value else None)
                loader = DataLoader(dataset, batch_size=self.batch_size, shuffle=True,
                                    num_workers=self.num_workers.value, persistent_workers=False)
                timeline, requests = measure_requests(loader, ModelledStep(self.step_s), epochs=epochs,
                                                      progress=False)
            self.runs += 1
            rates = [samples_per_s(timeline, e) for e in range(epochs)]
            self.last_rate = rates[-1]
            concurrency = max(self.num_workers.value, 1) * self.threads.value
            figure = plot_requests(timeline, requests, concurrency=concurrency)
            per_epoch = " → ".join(f"{r:.0f}" for r in rates)
            self.summary.value = (
                f"<p><b>Run {self.runs}:</b> <code>{html.escape(endpoint.describe())}, "
                f"{self.size_kib.value} KiB objects, num_workers={self.num_workers.value}, "
                f"threads={self.threads.value}, cache={self.cache.value}</code> — {per_epoch} samples/s"
                f"{' (epoch 1 → 2)' if epochs == 2 else ''}; "
                f"a request took {requests.median_s() * 1e3:.0f} ms "
                f"(median; first byte {requests.median_s('first_byte') * 1e3:.0f} ms); at most "
                f"{requests.peak_in_flight()} in flight.</p>")
            self.status.value = f"<b>run {self.runs} done</b>"
            _show_figure(self.output, figure)
            return rates
        except Exception as error:  # shown in the widget; raised again on request
            self.status.value = ""
            self.summary.value = _error_html(error)
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = False

    def _ipython_display_(self) -> None:
        display(self.widget)


class ImageExplorer:
    """Knobs for notebook 14: workers, threads per worker (a pool in ``__getitems__``), files
    or one tar shard, the crop size and whether the worker also normalises to float32; Run
    records one epoch over the JPEGs and draws its timeline with the images/s.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_rate`` holds the latest run's images/s."""

    def __init__(self, paths, labels, shard, *, batch_size: int = 32, step_s: float = 0.005,
                 num_workers: int = 2, threads: int = 1, crop: int = 224):
        style, layout = {"description_width": "150px"}, W.Layout(width="400px")
        self.paths, self.labels, self.shard = paths, labels, shard
        self.batch_size, self.step_s = batch_size, step_s
        self.num_workers = W.IntSlider(value=num_workers, min=0, max=4, description="num_workers",
                                       style=style,
                                       layout=layout, continuous_update=False)
        self.threads = W.IntSlider(value=threads, min=1, max=4, description="threads per worker", style=style,
                                   layout=layout, continuous_update=False)
        self.crop = W.Dropdown(options=[64, 128, 224, 320], value=crop, description="crop (pixels)",
                               style=style,
                               layout=layout)
        self.source = W.Dropdown(options=["files", "tar shard"], value="files", description="read from",
                                 style=style, layout=layout)
        self.normalize = W.Checkbox(value=False, description="normalise to float32 in the worker",
                                    indent=False,
                                    layout=W.Layout(width="auto"))
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status, self.summary, self.output = W.HTML(), W.HTML(), W.Output()
        self.runs, self.last_rate = 0, None
        self.run_button.on_click(lambda _button: self.run(raise_errors=False))
        knobs = W.VBox([self.num_workers, self.threads, self.crop])
        flags = W.VBox([self.source, self.normalize, W.HBox([self.run_button]), self.status],
                       layout=W.Layout(width="420px"))
        self.widget = W.VBox([W.HBox([knobs, flags]), self.summary, self.output])

    def show(self) -> None:
        """Display the explorer and run it once with its current knobs (raises on failure)."""
        display(self.widget)
        self.run(raise_errors=True)

    def run(self, raise_errors: bool = True):
        from torch.utils.data import DataLoader

        from .images import JpegDataset, images_per_s, train_transform
        from .transfer import batch_nbytes

        self.run_button.disabled = True
        try:
            self.status.value = "<i>running…</i>"
            source = self.shard if self.source.value == "tar shard" else self.paths
            dataset = JpegDataset(source, self.labels, threads=self.threads.value,
                                  transform=train_transform(self.crop.value, normalize=self.normalize.value))
            loader = DataLoader(dataset, batch_size=self.batch_size, shuffle=True,
                                num_workers=self.num_workers.value)
            nbytes = []
            step = ModelledStep(self.step_s)

            def measure(batch):
                nbytes.append(batch_nbytes(batch[0]))
                return step(batch)

            timeline = record(loader, measure, progress=False)
            self.runs += 1
            self.last_rate = images_per_s(timeline)
            _, ax = plt.subplots(figsize=(12, 1.2 + 0.42 * (max(self.num_workers.value, 0) + 1)),
                                 layout="constrained")
            plot_timeline(timeline, ax, label_batches=False)
            self.summary.value = (
                f"<p><b>Run {self.runs}:</b> <code>num_workers={self.num_workers.value}, "
                f"threads={self.threads.value}, {html.escape(self.source.value)}, crop={self.crop.value}, "
                f"normalise in worker={self.normalize.value}</code> — <b>{self.last_rate:.0f} images/s</b>; "
                f"a batch of images {nbytes[0] / 2**20:.1f} MiB.</p>")
            self.status.value = f"<b>run {self.runs} done</b>"
            _show_figure(self.output, ax.figure)
            return self.last_rate
        except Exception as error:  # shown in the widget; raised again on request
            self.status.value = ""
            self.summary.value = _error_html(error)
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = False

    def _ipython_display_(self) -> None:
        display(self.widget)


class ResumeExplorer:
    """Knobs for notebook 15: how to resume (StatefulDataLoader, restart, skip-by-count),
    ``in_order``, workers, when the training process is killed and how often it
    checkpoints; Run kills and resumes one epoch in child processes and draws, per sample,
    how often it was trained on.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_result`` holds the latest :class:`helpers.ResumeResult`."""

    def __init__(self, *, n: int = 256, batch_size: int = 8, step_s: float = 0.02):
        style, layout = {"description_width": "130px"}, W.Layout(width="380px")
        self.n, self.batch_size, self.step_s = n, batch_size, step_s
        steps = -(-n // batch_size)
        self.kind = W.Dropdown(options=["stateful", "restart", "skip"], value="stateful",
                               description="resume by", style=style, layout=layout)
        self.in_order = W.Checkbox(value=True, description="in_order", indent=False,
                                   layout=W.Layout(width="auto"))
        self.num_workers = W.IntSlider(value=2, min=0, max=4, description="num_workers", style=style,
                                       layout=layout, continuous_update=False)
        self.kill_after = W.IntSlider(value=min(13, steps - 1), min=2, max=steps - 1,
                                      description="kill after step", style=style, layout=layout,
                                      continuous_update=False)
        self.every = W.IntSlider(value=5, min=1, max=10, description="checkpoint every", style=style,
                                 layout=layout, continuous_update=False)
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status, self.summary, self.output = W.HTML(), W.HTML(), W.Output()
        self.runs, self.last_result = 0, None
        self.run_button.on_click(lambda _button: self.run(raise_errors=False))
        knobs = W.VBox([self.kind, self.num_workers, self.kill_after, self.every])
        flags = W.VBox([self.in_order, W.HBox([self.run_button]), self.status],
                       layout=W.Layout(width="300px"))
        self.widget = W.VBox([W.HBox([knobs, flags]), self.summary, self.output])

    def show(self) -> None:
        """Display the explorer and run it once with its current knobs (raises on failure)."""
        display(self.widget)
        self.run(raise_errors=True)

    def run(self, raise_errors: bool = True):
        from .plots import plot_resume
        from .resume import kill_and_resume

        self.run_button.disabled = True
        try:
            self.status.value = "<i>running…</i>"
            every = min(self.every.value, self.kill_after.value)
            in_order = self.in_order.value
            # out of order: the batch before the checkpoint is cold in the first run (as in section 2)
            cold = None if in_order or self.num_workers.value == 0 else \
                self.kill_after.value // every * every - 1
            result = kill_and_resume(self.kind.value, n=self.n, batch_size=self.batch_size,
                                     num_workers=self.num_workers.value, kill_after=self.kill_after.value,
                                     every=every, in_order=in_order, step_s=self.step_s,
                                     load_s=0.0 if in_order else 0.002, shuffle=cold is None,
                                     cold_batch=cold)
            self.runs += 1
            self.last_result = result
            name = f"{self.kind.value}, in_order={in_order}, {self.num_workers.value} workers"
            figure = plot_resume({name: result})
            self.summary.value = f"<p><b>Run {self.runs}:</b> {html.escape(result.describe())}</p>"
            self.status.value = f"<b>run {self.runs} done</b>"
            _show_figure(self.output, figure)
            return result
        except Exception as error:  # shown in the widget; raised again on request
            self.status.value = ""
            self.summary.value = _error_html(error)
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = False

    def _ipython_display_(self) -> None:
        display(self.widget)


class DiagnoseExplorer:
    """Knobs for notebook 16: a loader's settings (workers, prefetch depth, persistence, start
    method) and its costs (load per sample, collate per batch, the step); Run diagnoses it with
    :func:`helpers.diagnose` and shows the timeline, the table and the recommendations — follow
    one and run again.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_diagnosis`` holds the latest :class:`helpers.Diagnosis`."""

    def __init__(self, *, steps: int = 24, num_workers: int = 1, load_ms: int = 4, collate_ms: int = 0,
                 step_ms: int = 20):
        style, layout = {"description_width": "150px"}, W.Layout(width="400px")

        def slider(value, low, high, description):
            return W.IntSlider(value=value, min=low, max=high, description=description, style=style,
                               layout=layout, continuous_update=False)

        self.steps = steps
        self.num_workers = slider(num_workers, 0, 6, "num_workers")
        self.prefetch_factor = slider(2, 1, 8, "prefetch_factor")
        self.load_ms = slider(load_ms, 0, 20, "load per sample (ms)")
        self.collate_ms = slider(collate_ms, 0, 50, "collate per batch (ms)")
        self.step_ms = slider(step_ms, 1, 100, "step (ms)")
        self.persistent = W.Checkbox(value=False, description="persistent_workers", indent=False,
                                     layout=W.Layout(width="auto"))
        self.start_method = W.Dropdown(options=mp.get_all_start_methods(), value=config.start_method(),
                                       description="start method", style=style, layout=layout)
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status, self.summary, self.output = W.HTML(), W.HTML(), W.Output()
        self.runs, self.last_diagnosis = 0, None
        self.run_button.on_click(lambda _button: self.run(raise_errors=False))
        knobs = W.VBox([self.num_workers, self.prefetch_factor, self.load_ms, self.collate_ms])
        flags = W.VBox([self.step_ms, self.start_method, self.persistent, W.HBox([self.run_button]),
                        self.status], layout=W.Layout(width="420px"))
        self.widget = W.VBox([W.HBox([knobs, flags]), self.summary, self.output])

    def show(self) -> None:
        """Display the explorer and run it once with its current knobs (raises on failure)."""
        display(self.widget)
        self.run(raise_errors=True)

    def run(self, raise_errors: bool = True):
        from torch.utils.data import DataLoader

        from .datasets import WorkDataset
        from .diagnosis import SlowCollate, diagnose

        self.run_button.disabled = True
        try:
            self.status.value = "<i>running…</i>"
            workers = self.num_workers.value
            extra = dict(prefetch_factor=self.prefetch_factor.value, persistent_workers=self.persistent.value,
                         multiprocessing_context=self.start_method.value) if workers else {}
            loader = DataLoader(WorkDataset(256, item_wait_s=self.load_ms.value / 1e3), batch_size=16,
                                shuffle=True, num_workers=workers,
                                collate_fn=SlowCollate(self.collate_ms.value / 1e3), **extra)
            d = diagnose(loader, ModelledStep(self.step_ms.value / 1e3), steps=self.steps, progress=False)
            self.runs += 1
            self.last_diagnosis = d
            figure = d.plot().figure
            advice = "".join(f"<li><b>{html.escape(r.knob)}</b>: {html.escape(r.advice)} — "
                             f"{html.escape(r.because)}</li>" for r in d.recommendations)
            self.summary.value = (f"<p><b>Run {self.runs}:</b> headspace {d.headspace:.2f}×, the loop waited "
                                  f"{d.wait_share:.0%} of the run.</p><ul>{advice}</ul>")
            self.status.value = f"<b>run {self.runs} done</b>"
            _show_figure(self.output, figure)
            return d
        except Exception as error:  # shown in the widget; raised again on request
            self.status.value = ""
            self.summary.value = _error_html(error)
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = False

    def _ipython_display_(self) -> None:
        display(self.widget)


class DistExplorer:
    """Knobs for notebook 17: ranks, workers per rank and on the straggler rank, how slow the
    straggler's data is, set_epoch and drop_last; Run launches torchrun and draws every rank's
    loop and workers on one clock, with the steps/s and all_reduce waits per rank.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_run`` holds the latest :class:`helpers.DistRun`."""

    def __init__(self, *, n: int = 128, batch_size: int = 8, step_s: float = 0.01, load_s: float = 0.002):
        style, layout = {"description_width": "170px"}, W.Layout(width="420px")

        def slider(value, low, high, description):
            return W.IntSlider(value=value, min=low, max=high, description=description, style=style,
                               layout=layout, continuous_update=False)

        self.n, self.batch_size, self.step_s, self.load_s = n, batch_size, step_s, load_s
        self.world = slider(2, 2, 4, "ranks (nproc_per_node)")
        self.workers = slider(1, 0, 4, "num_workers per rank")
        self.straggler_workers = slider(1, 0, 6, "num_workers on rank 1")
        self.slow = slider(4, 1, 8, "rank 1's data slower (×)")
        self.set_epoch = W.Checkbox(value=True, description="set_epoch", indent=False,
                                    layout=W.Layout(width="auto"))
        self.drop_last = W.Checkbox(value=False, description="drop_last", indent=False,
                                    layout=W.Layout(width="auto"))
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status, self.summary, self.output = W.HTML(), W.HTML(), W.Output()
        self.runs, self.last_run = 0, None
        self.run_button.on_click(lambda _button: self.run(raise_errors=False))
        knobs = W.VBox([self.world, self.workers, self.straggler_workers, self.slow])
        flags = W.VBox([self.set_epoch, self.drop_last, W.HBox([self.run_button]), self.status],
                       layout=W.Layout(width="300px"))
        self.widget = W.VBox([W.HBox([knobs, flags]), self.summary, self.output])

    def show(self) -> None:
        """Display the explorer and run it once with its current knobs (raises on failure)."""
        display(self.widget)
        self.run(raise_errors=True)

    def run(self, raise_errors: bool = True):
        from .distributed import launch
        from .plots import plot_ranks

        self.run_button.disabled = True
        try:
            self.status.value = "<i>running torchrun…</i>"
            world = self.world.value
            workers = {r: self.workers.value for r in range(world)}
            workers[1] = self.straggler_workers.value
            run = launch(world, n=self.n, batch_size=self.batch_size, num_workers=workers, epochs=2,
                         set_epoch=self.set_epoch.value, drop_last=self.drop_last.value, step_s=self.step_s,
                         load_s=self.load_s, slow_rank=1, slow_factor=float(self.slow.value))
            if not run.ok:
                raise RuntimeError(f"torchrun failed (return code {run.returncode}):\n{run.output[-1500:]}")
            self.runs += 1
            self.last_run = run
            figure = plot_ranks(run)
            rates, waits = run.steps_per_s(), run.median_sync_wait()
            per_rank = "; ".join(f"rank {r}: {rates[r]:.1f} steps/s, all_reduce wait {waits[r] * 1e3:.1f} ms"
                                 for r in rates)
            self.summary.value = (
                f"<p><b>Run {self.runs}:</b> {world} ranks — {html.escape(per_rank)}. Epoch 1: "
                f"{run.repeated(0)} samples repeated; same order in both epochs: "
                f"{run.same_order_each_epoch()}.</p>")
            self.status.value = f"<b>run {self.runs} done</b>"
            _show_figure(self.output, figure)
            return run
        except Exception as error:  # shown in the widget; raised again on request
            self.status.value = ""
            self.summary.value = _error_html(error)
            if raise_errors:
                raise
            return None
        finally:
            self.run_button.disabled = False

    def _ipython_display_(self) -> None:
        display(self.widget)
