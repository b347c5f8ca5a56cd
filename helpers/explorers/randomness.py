"""RandomnessExplorer (notebook 18): where a dataset's random numbers come from, in workers."""

from __future__ import annotations

import html

import ipywidgets as W

from .base import Explorer

#: The explorer's choices: label -> (dataset kind, worker_init_fn reseeds it).
SOURCES = {
    "np.random.random() (global)": ("global", False),
    "np.random.default_rng(0) in __init__": ("numpy", False),
    "torch.Generator in __init__": ("torch", False),
    "default_rng(0) + worker_init_fn=reseed_from_worker": ("numpy", True),
    "seed from (epoch, index)": ("per sample", False),
}


class RandomnessExplorer(Explorer):
    """Knobs for notebook 18's first section: where the random numbers come from, ``num_workers``,
    ``persistent_workers`` and the epochs; Run records the loader and draws who drew which value,
    with the repeats marked.

    :meth:`show` runs once right away (a failure raises in the cell); button runs show errors in the
    widget. ``last_run`` holds the latest :class:`helpers.data.bugs.randomness.DrawRun`."""

    def __init__(self, *, length: int = 32, batch_size: int = 4,
                 source: str = "np.random.default_rng(0) in __init__", num_workers: int = 2, epochs: int = 2,
                 persistent_workers: bool = False):
        super().__init__()
        if source not in SOURCES:
            raise ValueError(f"source must be one of {list(SOURCES)}, got {source!r}")
        style, layout = {"description_width": "110px"}, W.Layout(width="420px")
        self.length, self.batch_size = length, batch_size
        self.source = W.Dropdown(options=list(SOURCES), value=source, description="random from", style=style,
                                 layout=layout)
        self.num_workers = W.IntSlider(value=num_workers, min=0, max=4, description="num_workers",
                                       style=style, layout=layout, continuous_update=False)
        self.epochs = W.IntSlider(value=epochs, min=1, max=3, description="epochs", style=style,
                                  layout=layout, continuous_update=False)
        self.persistent = W.Checkbox(value=persistent_workers, description="persistent_workers", indent=False,
                                     layout=W.Layout(width="auto"))
        self.last_run = None
        self._assemble([self.source, self.num_workers, self.epochs], [self.persistent], width="260px")

    def _loader(self):
        from torch.utils.data import DataLoader

        from ..data.bugs import randomness as r

        kind, reseeded = SOURCES[self.source.value]
        if kind == "global":
            dataset = r.GlobalDraws(self.length)
        elif kind == "per sample":
            dataset = r.PerSampleDraws(self.length)
        else:
            dataset = r.InitGeneratorDraws(self.length, kind=kind)
        workers = self.num_workers.value
        if self.persistent.value and workers == 0:
            raise ValueError("persistent_workers=True needs num_workers >= 1")
        sampler = r.EpochCountingSampler(self.length) if kind == "per sample" else None
        return DataLoader(dataset, batch_size=self.batch_size, num_workers=workers, sampler=sampler,
                          persistent_workers=self.persistent.value,
                          worker_init_fn=r.reseed_from_worker if reseeded else None)

    def _run(self):
        from ..data.bugs.randomness import KeepBatches, draws_of
        from ..plots.bugs import plot_draws
        from ..timing.recorder import record

        loader = self._loader()
        kept = KeepBatches()
        tl = record(loader, kept, epochs=self.epochs.value, progress=False)
        run = draws_of(loader, tl, kept)
        self.runs += 1
        self.last_run = run
        name = (f"{self.source.value}, {self.num_workers.value} workers"
                + (", persistent" if self.persistent.value else ""))
        self.summary.value = f"<p><b>Run {self.runs}:</b> {html.escape(run.describe())}</p>"
        return run, plot_draws({name: run})
