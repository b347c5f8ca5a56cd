"""Make the reference figures in images/ from real runs (full sizes, never smoke mode).

* The blog experiment (SOURCES.md section 2): 20 items that each sleep 1 s, batch size
  1, a modelled 0.25 s step, 0-4 workers, fork.
* Notebook 02: slow samples (1 in 6 is 6x slower) with prefetch_factor 1 vs 4.
* Notebook 04: 6 short epochs with spawn, persistent_workers off vs on.
* Notebook 05: a per-batch main-process transform in the loop's thread vs a prefetch thread.

About 2.5 minutes on any machine (sleep-based workloads).
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
    core_series(start, where)
    print("wrote", *sorted(p.name for p in OUT.glob("*.png")), "in", os.path.relpath(OUT))


def core_series(start: str | None, where: str) -> None:
    """One reference figure each for notebooks 02, 04 and 05 (CPU paths, full size)."""
    step = helpers.ModelledStep(0.1)
    bursty = helpers.StragglerDataset(36, 0.08, every=6, factor=6.0)
    runs = [helpers.record(helpers.make_loader(bursty, num_workers=2, prefetch_factor=pf,
                                               start_method=start), step) for pf in (1, 4)]
    fig = helpers.plot_timelines(runs, titles=[f"prefetch_factor=1, 1 item in 6 is 6x slower ({where})",
                                               "prefetch_factor=4"], label_batches=False)
    fig.savefig(OUT / "prefetch_slow_samples.png", dpi=100)

    if "spawn" in mp.get_all_start_methods():
        runs = [helpers.record(helpers.make_loader(helpers.SleepDataset(8, 0.1), num_workers=2,
                                                   prefetch_factor=2, persistent_workers=persistent,
                                                   start_method="spawn"),
                               helpers.ModelledStep(0.05), epochs=6) for persistent in (False, True)]
        fig = helpers.plot_timelines(runs, titles=[f"spawn, persistent_workers={p}" for p in (False, True)],
                                     label_batches=False)
        fig.savefig(OUT / "persistent_workers_spawn.png", dpi=100)

    def loader():
        return helpers.make_loader(helpers.WorkDataset(32, item_sleep_s=0.04), batch_size=2,
                                   num_workers=2, prefetch_factor=2, start_method=start)

    transform = helpers.HostTransform(busy_s=0.08)
    runs = [helpers.record(loader(), step, wrap=lambda it: helpers.BatchTransform(it, transform)),
            helpers.record(loader(), step, wrap=lambda it: helpers.ThreadPrefetcher(it, transform))]
    fig = helpers.plot_timelines(runs, titles=[f"0.08 s transform in the loop's thread ({where})",
                                               "the same transform in a prefetch thread"])
    fig.savefig(OUT / "host_prefetch_thread.png", dpi=100)


if __name__ == "__main__":
    main()
