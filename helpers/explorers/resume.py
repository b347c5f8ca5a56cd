"""ResumeExplorer (notebook 15): kill a run at a step, resume it from its checkpoint."""

from __future__ import annotations

import html

import ipywidgets as W

from .base import Explorer


class ResumeExplorer(Explorer):
    """Knobs for notebook 15: how to resume (StatefulDataLoader, restart, skip-by-count),
    ``in_order``, a seeded generator or none, workers, when the training process is killed and how often it
    checkpoints; Run kills and resumes one epoch in child processes and draws, per sample,
    how often it was trained on.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_result`` holds the latest :class:`helpers.ResumeResult`."""

    def __init__(self, *, n: int = 256, batch_size: int = 8, step_s: float = 0.02):
        super().__init__()
        style, layout = {"description_width": "130px"}, W.Layout(width="380px")
        self.n, self.batch_size, self.step_s = n, batch_size, step_s
        steps = -(-n // batch_size)
        self.kind = W.Dropdown(options=["stateful", "restart", "skip"], value="stateful",
                               description="resume by", style=style, layout=layout)
        self.in_order = W.Checkbox(value=True, description="in_order", indent=False,
                                   layout=W.Layout(width="auto"))
        self.seeded = W.Checkbox(value=True, description="seeded generator", indent=False,
                                 layout=W.Layout(width="auto"))
        self.num_workers = W.IntSlider(value=2, min=0, max=4, description="num_workers", style=style,
                                       layout=layout, continuous_update=False)
        self.kill_after = W.IntSlider(value=min(13, steps - 1), min=2, max=steps - 1,
                                      description="kill after step", style=style, layout=layout,
                                      continuous_update=False)
        self.every = W.IntSlider(value=5, min=1, max=10, description="checkpoint every", style=style,
                                 layout=layout, continuous_update=False)
        self.last_result = None
        self._assemble([self.kind, self.num_workers, self.kill_after, self.every],
                       [self.in_order, self.seeded], width="300px")

    def _run(self):
        from ..data.resume import kill_and_resume
        from ..plots.runs import plot_resume

        every = min(self.every.value, self.kill_after.value)
        in_order = self.in_order.value
        # out of order: the batch before the checkpoint is cold in the first run (as in section 2)
        cold = None if in_order or self.num_workers.value == 0 else \
            self.kill_after.value // every * every - 1
        result = kill_and_resume(self.kind.value, n=self.n, batch_size=self.batch_size,
                                 num_workers=self.num_workers.value, kill_after=self.kill_after.value,
                                 every=every, in_order=in_order, step_s=self.step_s,
                                 load_s=0.0 if in_order else 0.002, shuffle=cold is None,
                                 cold_batch=cold, seed=0 if self.seeded.value else None)
        self.runs += 1
        self.last_result = result
        name = (f"{self.kind.value}, in_order={in_order}, {self.num_workers.value} workers"
                + ("" if self.seeded.value else ", no seed"))
        figure = plot_resume({name: result})
        self.summary.value = f"<p><b>Run {self.runs}:</b> {html.escape(result.describe())}</p>"
        return result, figure
