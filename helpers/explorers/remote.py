"""RemoteExplorer (notebook 13): round trip, bandwidth, object size, workers, threads, cache."""

from __future__ import annotations

import html

import ipywidgets as W

from ..models import ModelledStep
from .base import Explorer


class RemoteExplorer(Explorer):
    """Knobs for notebook 13: the round trip and bandwidth the proxy adds, the object size,
    workers, threads per worker (a thread pool in ``__getitems__``) and a local cache (two
    epochs); Run reads ``samples`` objects from ``store`` and draws the timeline with every
    request and the requests in flight under it.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_rate`` holds the latest run's samples/s. A run finding
    ``store`` stopped (the notebook stops it in its last cell) starts it again."""

    def __init__(self, store, *, samples: int = 128, batch_size: int = 16, step_s: float = 0.005,
                 latency_ms: int = 40, bandwidth_mb: int = 0, size_kib: int = 16, num_workers: int = 2,
                 threads: int = 4, cache: bool = False):
        super().__init__()
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
        self.last_rate = None
        self._buckets: dict[int, list[str]] = {}
        self._assemble([self.latency_ms, self.bandwidth_mb, self.size_kib],
                       [self.num_workers, self.threads, self.cache], width="420px")

    def _run(self):
        import tempfile

        from torch.utils.data import DataLoader

        from ..data.remote.dataset import S3Dataset
        from ..data.remote.requests import measure_requests, samples_per_s
        from ..data.workers import freeze_gc
        from ..plots.remote import plot_requests

        restarted = not self.store.alive  # the notebook's last cell stops it: a run after Run All
        if restarted:                     # (an instructor presenting) starts it again, empty
            self.store.start()
            self._buckets.clear()
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
                                num_workers=self.num_workers.value, persistent_workers=False,
                                worker_init_fn=freeze_gc)  # as the notebook's loaders (its section 2)
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
            f"{requests.peak_in_flight()} in flight."
            f"{' (The store had been stopped: this run started it again.)' if restarted else ''}</p>")
        return rates, figure
