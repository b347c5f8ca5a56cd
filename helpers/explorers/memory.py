"""MemoryExplorer (notebook 12): storage of the file names, workers, start method; each worker's memory."""

from __future__ import annotations

import html
import multiprocessing as mp

import ipywidgets as W

from .. import config
from ..models import ModelledStep
from .base import Explorer


class MemoryExplorer(Explorer):
    """Knobs for notebook 12: how a dataset keeps its file names (the storage), how many
    workers, how they start, persistence and epochs; Run records one run and draws the
    timeline with each worker's memory under it.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_runs`` holds the latest run's
    :class:`helpers.data.copy_on_read.MemoryRun`.
    """

    def __init__(self, *, storage: str = "list", num_workers: int = 2, items: int = 200_000,
                 batch_size: int = 2000, step_s: float = 0.005, epochs: int = 1,
                 persistent_workers: bool = False, start_method: str | None = None):
        super().__init__()
        from ..data.copy_on_read.paths import STORAGES

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
        self.last_runs: list = []
        self._assemble([self.storage, self.num_workers, self.items, self.epochs],
                       [self.start_method, self.persistent_workers], width="400px")

    def _run(self):
        from torch.utils.data import DataLoader

        from ..data.copy_on_read.memory import measure_memory
        from ..data.copy_on_read.paths import PathDataset, make_paths

        dataset = PathDataset(make_paths(self.items.value), self.storage.value)
        loader = DataLoader(dataset, batch_size=self.batch_size, shuffle=True,
                            num_workers=self.num_workers.value,
                            multiprocessing_context=self.start_method.value,
                            persistent_workers=self.persistent_workers.value)
        run, timeline, memory = measure_memory(loader, ModelledStep(self.step_s),
                                               epochs=self.epochs.value, progress=False)
        self.runs += 1
        self.last_runs = [run]
        from ..plots.runs import plot_worker_memory

        figure = plot_worker_memory(timeline, memory, dataset.data_bytes())
        MiB = 2**20
        self.summary.value = (
            f"<p><b>Run {self.runs}:</b> <code>storage={html.escape(self.storage.value)}, "
            f"num_workers={self.num_workers.value}, {self.start_method.value}, "
            f"persistent_workers={self.persistent_workers.value}, epochs={self.epochs.value}</code> — "
            f"the data: {dataset.data_bytes() / MiB:.1f} MiB; each worker's USS at its first sample "
            f"{' · '.join(f'{u / MiB:.0f}' for u in run.first_uss)} MiB, grown by "
            f"{' · '.join(f'{g / MiB:.1f}' for g in run.growth)} MiB.</p>")
        return run, figure
