"""Make the reference figures in images/ from real runs (full sizes, never smoke mode).

The blog experiment (SOURCES.md section 2): 20 items that each sleep 1 s, batch size 1,
a modelled 0.25 s step, 0-4 workers, fork. About 75 s on any machine.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import helpers  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "images"


def main() -> None:
    if helpers.is_smoke():
        raise SystemExit("make_figures.py draws full-size runs: unset DLLAB_SMOKE")
    warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
    start = "fork" if "fork" in mp.get_all_start_methods() else None
    load_s, step_s, items = 1.0, 0.25, 20
    runs = {}
    for workers in range(5):
        loader = helpers.make_loader(helpers.SleepDataset(items, load_s), num_workers=workers,
                                     prefetch_factor=2 if workers else None, start_method=start)
        runs[workers] = helpers.record(loader, helpers.ModelledStep(step_s))
        s = runs[workers].summary()
        print(f"{workers} workers: {s['mean_step_interval_s']:.3f} s/batch, first batch "
              f"{s['first_batch_s']:.2f} s, intervals "
              + " ".join(f"{v:.2f}" for v in runs[workers].intervals()))
    machine = helpers.describe_machine()
    where = f"measured on {machine['cores']} cores, torch {machine['torch']}, {start}"
    fig = helpers.plot_timelines(
        [runs[0], runs[2]],
        titles=[f"num_workers=0 ({where})", "num_workers=2"])
    fig.savefig(OUT / "blog_timeline_0_vs_2_workers.png", dpi=110)
    fig = helpers.plot_timelines(list(runs.values()),
                                 titles=[f"num_workers={x}" for x in runs])
    fig.savefig(OUT / "blog_timelines_0_to_4_workers.png", dpi=90)
    ax = helpers.plot_intervals(
        list(runs.values()), [f"{x} workers" for x in runs],
        predictions=[helpers.simulate(items, load_s, step_s, x,
                                      startup_s=tl.worker_startup_s())
                     for x, tl in runs.items()])
    ax.set_title(f"Time between loop iterations, measured vs model ({where})", fontsize=9)
    ax.figure.savefig(OUT / "blog_intervals.png", dpi=110)
    print("wrote", *sorted(p.name for p in OUT.glob("blog_*.png")), "in", os.path.relpath(OUT))


if __name__ == "__main__":
    main()
