"""DiagnoseExplorer (notebook 16): a loader's knobs and costs, diagnosed."""

from __future__ import annotations

import html
import multiprocessing as mp

import ipywidgets as W

from .. import config
from ..data.datasets import WorkDataset
from ..models import ModelledStep
from .base import Explorer


class DiagnoseExplorer(Explorer):
    """Knobs for notebook 16: a loader's settings (workers, prefetch depth, persistence, start
    method) and its costs (load per sample, collate per batch, the step); Run diagnoses it with
    :func:`helpers.diagnose` and shows the timeline, the table and the recommendations — follow
    one and run again.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_diagnosis`` holds the latest :class:`helpers.Diagnosis`."""

    def __init__(self, *, steps: int = 24, num_workers: int = 1, load_ms: int = 4, collate_ms: int = 0,
                 step_ms: int = 20):
        super().__init__()
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
        self.last_diagnosis = None
        self._assemble([self.num_workers, self.prefetch_factor, self.load_ms, self.collate_ms],
                       [self.step_ms, self.start_method, self.persistent], width="420px")

    def _run(self):
        from torch.utils.data import DataLoader

        from ..data.mysteries import SlowCollate
        from ..timing.diagnosis.run import diagnose

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
        self.summary.value = (f"<p><b>Run {self.runs}:</b> headroom {d.headroom:.2f}×, the loop waited "
                              f"{d.wait_share:.0%} of the run.</p><ul>{advice}</ul>")
        return d, figure
