"""Make the reference figures in images/ from real runs (full sizes, never smoke mode).

* The blog experiment (a 2020 post on choosing num_workers, notebook 01): 20 items that each wait 1 s, batch
  size 1, a modelled 0.25 s step, 0-4 workers.
* Notebook 03: slow samples (1 in 7 is 6x slower) with prefetch_factor 1 vs 4.
* Notebook 05: worker start-up by start method (and forkserver with preload), each in a fresh
  process; 6 short epochs with spawn, persistent_workers off vs on.
* Notebook 07: a per-batch main-process transform in the loop's thread vs a prefetch thread.
* Notebook 11: the chain's modelled speedups across step/load ratios, fed with a CPU run of the
  chain (the notebook's own functions).
* Notebook 12: two forked workers reading 2 million file names kept in a Python list, each
  worker's USS and PSS under the timeline; the same with persistent workers over two epochs.

``scripts/make_figures.py copy_on_read`` (or ``blog``, ``core_series``) draws one group only.

The workloads are those of the notebooks, through the same helpers. About 4 minutes on 2 cores
(mostly waiting).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from torch.utils.data import DataLoader  # noqa: E402

import helpers  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "images"


def main() -> None:
    if helpers.is_smoke():
        raise SystemExit("make_figures.py draws full-size runs: unset DLLAB_SMOKE")
    warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
    warnings.filterwarnings("ignore", message=".*pin_memory.*no accelerator")
    start = helpers.use_start_method()
    machine = helpers.describe_machine()
    where = f"measured on {machine['cores']} cores, torch {machine['torch']}, {start}"
    groups = {"blog": blog, "core_series": core_series, "copy_on_read": copy_on_read}
    chosen = sys.argv[1:] or list(groups)
    unknown = [name for name in chosen if name not in groups]
    if unknown:
        raise SystemExit(f"unknown figure group(s) {unknown}: choose from {', '.join(groups)}")
    for name in chosen:
        groups[name](where)
    print("wrote", *sorted(p.name for p in OUT.glob("*.png")), "in", os.path.relpath(OUT))


def blog(where: str) -> None:
    item_wait_s, step_s, items = 1.0, 0.25, 20
    dataset = helpers.WorkDataset(items, item_wait_s=item_wait_s)
    runs = {}
    for workers in range(5):
        loader = DataLoader(dataset, batch_size=1, num_workers=workers)
        runs[workers] = helpers.record(loader, helpers.ModelledStep(step_s), progress=False)
        print(f"{workers} workers: intervals " + " ".join(f"{v:.2f}" for v in runs[workers].intervals()))
    fig = helpers.plot_timelines([runs[0], runs[2]], titles=[f"num_workers=0 ({where})", "num_workers=2"])
    fig.savefig(OUT / "blog_timeline_0_vs_2_workers.png", dpi=110)
    fig = helpers.plot_timelines(list(runs.values()), titles=[f"num_workers={x}" for x in runs])
    fig.savefig(OUT / "blog_timelines_0_to_4_workers.png", dpi=90)
    ax = helpers.plot_intervals(
        list(runs.values()),
        [f"{x} workers" for x in runs],
        predictions=[
            helpers.simulate(items, item_wait_s, step_s, x, startup_s=tl.worker_startup_s())
            for x, tl in runs.items()
        ],
    )
    ax.set_title(f"Time between loop iterations, measured vs model ({where})", fontsize=9)
    ax.figure.savefig(OUT / "blog_intervals.png", dpi=110)


def core_series(where: str) -> None:
    step = helpers.ModelledStep(0.1)
    slow = helpers.WorkDataset(36, item_wait_s=0.08, slow_every=7, slow_factor=6.0)
    runs = [
        helpers.record(DataLoader(slow, num_workers=2, prefetch_factor=pf), step, progress=False)
        for pf in (1, 4)
    ]
    fig = helpers.plot_timelines(
        runs,
        titles=[f"prefetch_factor=1, 1 item in 7 is 6x slower ({where})", "prefetch_factor=4"],
        label_batches=False,
    )
    fig.savefig(OUT / "prefetch_slow_samples.png", dpi=100)

    methods = mp.get_all_start_methods()
    children = {m: helpers.startup.record_in_child(m, item_wait_s=0.1) for m in methods}
    if "forkserver" in methods:
        children["forkserver + preload"] = helpers.startup.record_in_child(
            "forkserver", preload=["torch", "helpers"], item_wait_s=0.1
        )
    fig = helpers.plot_timelines(
        list(children.values()),
        titles=[f"{name}, 2 epochs, fresh workers each ({where.split(', ')[0]})" for name in children],
        label_batches=False,
    )
    fig.savefig(OUT / "startup_methods.png", dpi=100)

    if "spawn" in methods:
        dataset = helpers.WorkDataset(8, item_wait_s=0.1)
        runs = [
            helpers.record(
                DataLoader(
                    dataset, num_workers=2, persistent_workers=persistent, multiprocessing_context="spawn"
                ),
                helpers.ModelledStep(0.05),
                epochs=6,
                progress=False,
            )
            for persistent in (False, True)
        ]
        fig = helpers.plot_timelines(
            runs, titles=[f"spawn, persistent_workers={p}" for p in (False, True)], label_batches=False
        )
        fig.savefig(OUT / "persistent_workers_spawn.png", dpi=100)

    def loader():
        return DataLoader(helpers.WorkDataset(32, item_wait_s=0.04), batch_size=2, num_workers=2)

    transform = helpers.HostTransform(cpu_s=0.08)
    runs = [
        helpers.record(loader(), step, wrap=lambda it: helpers.BatchTransform(it, transform), progress=False),
        helpers.record(
            loader(), step, wrap=lambda it: helpers.ThreadPrefetcher(it, transform), progress=False
        ),
    ]
    fig = helpers.plot_timelines(
        runs,
        titles=[
            f"0.08 s transform in the loop's thread ({where})",
            "the same transform in a prefetch thread",
        ],
    )
    fig.savefig(OUT / "host_prefetch_thread.png", dpi=100)

    capstone = helpers.lessons.capstone
    chain = capstone.stages(min(4, helpers.available_cores()))
    measured = {
        name: capstone.run_stage(
            name,
            stage,
            shape=(3, 224, 224),
            item_wait_s=0.005,
            step=helpers.ModelledStep(0.25),
            device="cpu",
            epochs=10,
            batches_per_epoch=16,
            batches=160,
        )
        for name, stage in chain.items()
    }
    costs = {name: capstone.stage_costs(measured[name], chain[name]) for name in chain}
    ratios = [2 ** (k / 2) for k in range(-10, 8)]
    curves = capstone.speedup_curves(chain, costs, ratios, 16, 160)
    base = measured["baseline"].wall_s
    ax = helpers.plot_speedup_curves(
        ratios,
        curves,
        measured={n: base / tl.wall_s for n, tl in measured.items()},
        at_ratio=0.25 / costs["baseline"].batch_load_s,
        xlabel="step ÷ the baseline's load per batch",
    )
    ax.set_title(f"The tutorial's chain: modelled speedups from this run's costs ({where})", fontsize=9)
    ax.figure.savefig(OUT / "chain_step_ratio.png", dpi=110)



def copy_on_read(where: str) -> None:
    if "fork" not in mp.get_all_start_methods():
        print("copy_on_read: skipped (no fork on this platform)")
        return
    paths = helpers.make_paths(2_000_000)
    for persistent, name in ((False, "copy_on_read_list.png"), (True, "copy_on_read_persistent.png")):
        loader = DataLoader(helpers.PathDataset(paths, "list"), batch_size=4000, shuffle=True, num_workers=2,
                            multiprocessing_context="fork", persistent_workers=persistent)
        run, timeline, memory = helpers.measure_memory(loader, helpers.ModelledStep(0.01),
                                                       epochs=2 if persistent else 1)
        title = (f"2 forked workers reading a list of 2,000,000 names ({run.data_bytes / 2**20:.0f} MiB)"
                 + (", persistent_workers=True, 2 epochs" if persistent else "") + f" — {where}")
        fig = helpers.plot_worker_memory(timeline, memory, run.data_bytes, title=title)
        fig.savefig(OUT / name, dpi=100)
        print(name, "growth per worker (MiB):", [round(g / 2**20, 1) for g in run.growth])


if __name__ == "__main__":
    main()
