"""The main process's share of a batch, m, split: advice for the part that dominates it (the
sampler, receiving many tensor storages, the loop's own work), each with the step the model
predicts without that part, when m bounds the step."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from ..advice import Recommendation
from ..advice import ms as _ms
from ..thresholds import MANY_STORAGES, PART_SHARE
from .context import Context


class PrecomputedIndices:
    """A sampler that replays indices computed once (``--verify`` of the sampler advice): ``next()`` on
    it costs the main process nothing but a list's step."""

    def __init__(self, indices: list[Any]):
        self.indices = list(indices)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __repr__(self) -> str:
        return f"<the sampler's {len(self.indices)} indices, computed once>"


def main_process_advice(d: Any, loader: DataLoader, own_m: float, y: float,
                        workers_pace: float, m: float | None = None) -> Recommendation:
    """Advice for a loop bound by the main process's share m, for the part of it that dominates: the
    sampler (``next()`` on it runs in the loop's thread for every batch), receiving many tensor
    storages one by one, or the loop's own work; each with the step the model predicts without it.
    ``own_m``: m with its receiving as measured alone; ``m``: as measured in the run (default own_m)."""
    bound = (f"{own_m / (y + own_m):.0%} of the loop's {_ms(y + own_m)} per step: no number of workers "
             "makes a step shorter than y + m")
    sampler_s = min(d.sampler_s or 0.0, own_m)
    if sampler_s >= PART_SHARE * own_m:
        change = None
        if loader.batch_sampler is not None and loader.batch_size is not None \
                and not isinstance(loader.dataset, IterableDataset):
            try:
                change = {"sampler": PrecomputedIndices(loader.sampler)}
            except Exception:  # noqa: BLE001 - a sampler that cannot be listed: advice without --verify
                change = None
        # Without the sampler, the rest of m stays as the run measures it: receiving a batch beside the
        # workers takes 0.8–1.3 ms with or without the sampler, against 0.3 ms alone (own_m's), and
        # own_m less the sampler predicts about a millisecond a step too little.
        rest = max((own_m if m is None else m) - sampler_s, d.receive_alone_s or 0.0)
        return Recommendation(
            "main_process", "precompute the sampler's indices (once per epoch, into a list or a tensor), or "
            "move its per-index work into the dataset's __getitems__, which runs in the workers: the "
            "DataLoader calls next() on the sampler in the loop's thread for every batch",
            f"next() on the sampler takes {_ms(sampler_s)} of the main process's {_ms(own_m)} per batch "
            f"(measured alone), {bound}", change, max(workers_pace, y + rest))
    receive = min(d.receive_alone_s or 0.0, own_m)
    if d.storages is not None and d.storages >= MANY_STORAGES and receive >= PART_SHARE * own_m:
        per = receive / d.storages
        batch = loader.batch_size or 1
        per_field = (d.stacked or 0.0) >= 0.5  # already a tensor per field: merge the fields
        after = 1 if per_field else max(1, round(d.storages / batch))
        saved = per * (d.storages - after)
        if per_field:
            what = ("put the fields into fewer tensors (one stacked tensor per batch, split on the device or "
                    "in the step): receiving a batch from a worker costs per tensor storage (notebook 19)")
        else:
            what = ("stack each field's tensors in collate_fn (one tensor per field, as default_collate "
                    "does), not a tensor per sample and field: receiving a batch from a worker costs per "
                    "tensor storage (notebook 19)")
        return Recommendation(
            "main_process", what,
            f"a batch holds {d.storages} tensor storages; taking one in from a worker costs {_ms(receive)} "
            f"alone, about {per * 1e6:.0f} µs a storage, of the main process's {_ms(own_m)}; with "
            f"{after} storage{'s' if after > 1 else ''}: {bound}", None, max(workers_pace, y + own_m - saved))
    if d.device is not None:
        what = ("fewer and smaller tensors per batch (uint8, one stacked tensor), normalise on the device "
                "(notebooks 19, 11, 14)")
    else:
        what = ("less Python in the loop around the step (a transform there belongs in the workers' "
                "collate_fn or dataset); this run has no device to move work to: on a CPU, normalising in "
                "the loop adds its time to every step (notebook 19)")
    return Recommendation(
        "main_process", "make the main process's share per batch smaller: " + what,
        f"the main process spends {_ms(own_m)} per batch taking it in (measured alone; the sampler "
        f"{_ms(sampler_s)}, receiving {_ms(receive)}), {bound}")


def main_process(c: Context) -> Recommendation | None:
    """The main process's own share m bounds the step (where the workers could keep its pace)."""
    if not c.main_bound:
        return None
    return main_process_advice(c.d, c.loader, c.own_m, c.y, c.workers_pace, c.m)
