"""DistExplorer (notebook 17): ranks, workers, a straggler; torchrun on one clock."""

from __future__ import annotations

import html

import ipywidgets as W

from .base import Explorer


class DistExplorer(Explorer):
    """Knobs for notebook 17: ranks, workers per rank and on the straggler rank, how slow the
    straggler's data is, set_epoch and drop_last; Run launches torchrun and draws every rank's
    loop and workers on one clock, with the steps/s and all_reduce waits per rank.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show
    errors in the widget. ``last_run`` holds the latest :class:`helpers.DistRun`."""

    running = "running torchrun…"

    def __init__(self, *, n: int = 128, batch_size: int = 8, step_s: float = 0.01, load_s: float = 0.002):
        super().__init__()
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
        self.last_run = None
        self._assemble([self.world, self.workers, self.straggler_workers, self.slow],
                       [self.set_epoch, self.drop_last], width="300px")

    def _run(self):
        from ..data.distributed.launch import launch
        from ..plots.runs import plot_ranks

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
        return run, figure
