"""ImageExplorer (notebook 14): workers, threads, crop, source and where to normalise; images/s."""

from __future__ import annotations

import html

import ipywidgets as W
import matplotlib.pyplot as plt

from ..models import ModelledStep
from ..plots.timeline import plot_timeline
from ..timing.recorder import record
from .base import Explorer


class ImageExplorer(Explorer):
    """Knobs for notebook 14: workers, threads per worker (a pool in ``__getitems__``), files
    or one tar shard, the crop size and whether the worker also normalises to float32; Run
    records one epoch over the JPEGs and draws its timeline with the images/s.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_rate`` holds the latest run's images/s."""

    def __init__(self, paths, labels, shard, *, batch_size: int = 32, step_s: float = 0.005,
                 num_workers: int = 2, threads: int = 1, crop: int = 224):
        super().__init__()
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
        self.last_rate = None
        self._assemble([self.num_workers, self.threads, self.crop],
                       [self.source, self.normalize], width="420px")

    def _run(self):
        from torch.utils.data import DataLoader

        from ..data.images import JpegDataset, images_per_s, train_transform
        from ..timing.device import batch_nbytes

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
        return self.last_rate, ax.figure
