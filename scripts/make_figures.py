"""Make the reference figures in images/ from real runs (full sizes, never smoke mode).

* The blog experiment (a 2020 post on choosing num_workers, notebook 01): 20 items that each wait 1 s, batch
  size 1, a modelled 0.25 s step, 0-4 workers.
* Notebook 02: a calibration run with 1 worker, then the sizing rule's count and one fewer
  (batches of 4 items that wait 0.175 s, a modelled 0.25 s step).
* Notebook 03: slow samples (1 in 7 is 6x slower) with prefetch_factor 1 vs 4.
* Notebook 05: worker start-up by start method (and forkserver with preload), each in a fresh
  process; 6 short epochs with spawn, persistent_workers off vs on.
* Notebook 07: a per-batch main-process transform in the loop's thread vs a prefetch thread.
* Notebook 11: the chain's modelled speedups across step/load ratios, fed with a CPU run of the
  chain (the notebook's own functions).
* Notebook 12: two forked workers reading 2 million file names kept in a Python list, each
  worker's USS and PSS under the timeline; the same with persistent workers over two epochs.
* Notebook 13: one GET of 4 KiB to 8 MiB from a local file, the object store on loopback and
  through a 40 ms / 25 MB/s proxy; 512 objects of 16 KiB read by 2 workers, each with a pool
  of 8 threads in ``__getitems__``, from a store that serves 8 at once, every request under the
  timeline.
* Notebook 14: 960 synthetic 448-pixel JPEGs decoded and augmented by 0-3 workers; 1 worker,
  2 threads in one worker and 2 workers, for those and for 4096 tiny 32-pixel JPEGs.
* Notebook 15: an epoch of 512 ids killed with SIGKILL after step 23 and resumed from the
  checkpoint at step 20 — StatefulDataLoader, a restarted DataLoader, skip-by-count in order;
  out of order (sequential ids, the batch before the checkpoint cold in the first run), the
  skip and the StatefulDataLoader.
* Notebook 16: the three mystery loaders diagnosed (timelines, with each diagnosis in its title).
* Notebook 17: torchrun with 4 ranks (gloo), rank 1's data 6× slower, one worker per rank.

``scripts/make_figures.py copy_on_read`` (or ``blog``, ``sizing``, ``core_series``, ``remote``, ``images``,
``resume``, ``diagnose``, ``distributed``) draws one group only.

The workloads are those of the notebooks, through the same helpers. About 4 minutes on 2 cores
(mostly waiting). Every figure is 1280 px wide and at most 16:9 tall, in the lab's palette
(``helpers.palette``), and carries its origin in its PNG metadata: the group that drew it and a
digest of that group's code and the palette (``helpers.plots.provenance``).
``scripts/make_figures.py --check`` reads that metadata only (no run) and exits 1 naming every
figure drawn by other code, with another palette, or before figures carried their origin.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import helpers  # noqa: E402
from helpers.plots import provenance  # noqa: E402
from helpers.plots.style import COLORS, TEXT_PT, wrap  # noqa: E402
from helpers.plots.timeline import timeline_legend  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "images"
SCRIPT = "scripts/make_figures.py"
#: group -> the figures it draws (the GPU ones are scripts/make_gpu_figures.py's).
FIGURES = {
    "blog": ["blog_timeline_0_vs_2_workers.png", "blog_timelines_0_to_4_workers.png", "blog_intervals.png"],
    "sizing": ["num_workers_sizing.png"],
    "core_series": ["prefetch_slow_samples.png", "startup_methods.png", "persistent_workers_spawn.png",
                    "host_prefetch_thread.png", "chain_step_ratio.png"],
    "copy_on_read": ["copy_on_read_list.png", "copy_on_read_persistent.png"],
    "remote": ["remote_first_byte.png", "remote_requests.png"],
    "images": ["image_pipeline.png"],
    "resume": ["resume.png"],
    "diagnose": ["diagnose_mysteries.png"],
    "distributed": ["distributed_straggler.png"],
}


def expected() -> dict[str, tuple[str, str]]:
    """Each figure → (the command that draws it, the digest its metadata must carry)."""
    return {name: (f"{SCRIPT} {group}", provenance.digest(globals()[group]))
            for group, names in FIGURES.items() for name in names}


def check(folder: Path = OUT) -> list[str]:
    """A line per figure in ``folder`` that the current code did not draw (metadata only)."""
    return provenance.stale(folder, expected())


def save(figure, name: str, where: str) -> None:
    """Write ``images/<name>`` with its origin (its group's digest) and where it was measured."""
    group = next(g for g, names in FIGURES.items() if name in names)
    source, digest = expected()[name]
    provenance.save(figure, OUT / name, source=source, digest=digest,
                    description=f"{group}: {name}, {where}")
    plt.close(figure)


def main() -> None:
    if sys.argv[1:] == ["--check"]:
        problems = check()
        print("\n".join(problems) or f"every figure of {SCRIPT} is current")
        raise SystemExit(1 if problems else 0)
    if helpers.is_smoke():
        raise SystemExit("make_figures.py draws full-size runs: unset DLLAB_SMOKE")
    warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
    warnings.filterwarnings("ignore", message=".*pin_memory.*no accelerator")
    start = helpers.use_start_method()
    machine = helpers.describe_machine()
    where = f"measured on {machine['cores']} cores, torch {machine['torch']}, {start}"
    groups = {name: globals()[name] for name in FIGURES}
    chosen = sys.argv[1:] or list(groups)
    unknown = [name for name in chosen if name not in groups]
    if unknown:
        raise SystemExit(f"unknown figure group(s) {unknown}: choose from {', '.join(groups)}")
    for name in chosen:
        groups[name](where)
    print("wrote", *(f for name in chosen for f in FIGURES[name]), "in", os.path.relpath(OUT))


def blog(where: str) -> None:
    item_wait_s, step_s, items = 1.0, 0.25, 20
    dataset = helpers.WorkDataset(items, item_wait_s=item_wait_s)
    runs = {}
    for workers in range(5):
        loader = DataLoader(dataset, batch_size=1, num_workers=workers)
        runs[workers] = helpers.record(loader, helpers.ModelledStep(step_s), progress=False)
        print(f"{workers} workers: intervals " + " ".join(f"{v:.2f}" for v in runs[workers].intervals()))
    fig = helpers.plot_timelines([runs[0], runs[2]], titles=[f"num_workers=0 ({where})", "num_workers=2"])
    save(fig, "blog_timeline_0_vs_2_workers.png", where)
    fig = helpers.plot_timelines(list(runs.values()), titles=[f"num_workers={x}" for x in runs])
    save(fig, "blog_timelines_0_to_4_workers.png", where)
    ax = helpers.plot_intervals(
        list(runs.values()),
        [f"{x} workers" for x in runs],
        predictions=[
            helpers.simulate(items, item_wait_s, step_s, x, startup_s=tl.worker_startup_s())
            for x, tl in runs.items()
        ],
    )
    ax.set_title(wrap(f"Time between loop iterations, measured vs model ({where})", ax.figure),
                 fontsize=TEXT_PT, loc="left")
    save(ax.figure, "blog_intervals.png", where)


def steady(tl, workers: int) -> float:
    """The share of the time the loop waits, each worker's first batch left out (notebook 00b's rule)."""
    return helpers.wait_share([b.wait_s for b in tl.batches], [b.step_s for b in tl.batches], skip=workers)


def sizing(where: str) -> None:
    batch, step = 4, helpers.ModelledStep(0.25)
    dataset = helpers.WorkDataset(batch * 24, item_wait_s=0.175, item_shape=(3, 64, 64))
    calibration = helpers.record(DataLoader(dataset, batch_size=batch, num_workers=1), step, max_batches=6,
                                 progress=False)
    cal = helpers.lessons.num_workers.calibrate(calibration)
    x = cal.recommended
    runs = {w: helpers.record(DataLoader(dataset, batch_size=batch, num_workers=w), step, progress=False)
            for w in (x - 1, x)}
    titles = [f"calibration, 1 worker: n {cal.n * 1e3:.0f} ms, y {cal.y * 1e3:.0f} ms, "
              f"m {cal.m * 1e3:.1f} ms ({where})",
              *(f"num_workers={w}: after each worker's first batch the loop waits "
                f"{steady(tl, w):.0%} of the time" for w, tl in runs.items())]
    fig = helpers.plot_timelines([calibration, *runs.values()], titles=titles, label_batches=False)
    save(fig, "num_workers_sizing.png", where)
    waits = ", ".join(f"{w}: {steady(tl, w):.0%}" for w, tl in runs.items())
    print(f"x = {x}; waiting {waits}")


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
    save(fig, "prefetch_slow_samples.png", where)

    methods = mp.get_all_start_methods()
    children = {m: helpers.data.startup.record_in_child(m, item_wait_s=0.1) for m in methods}
    if "forkserver" in methods:
        children["forkserver + preload"] = helpers.data.startup.record_in_child(
            "forkserver", preload=["torch", "helpers"], item_wait_s=0.1
        )
    fig = helpers.plot_timelines(
        list(children.values()),
        titles=[f"{name}, 2 epochs, fresh workers each ({where.split(', ')[0]})" for name in children],
        label_batches=False,
    )
    save(fig, "startup_methods.png", where)

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
        save(fig, "persistent_workers_spawn.png", where)

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
    save(fig, "host_prefetch_thread.png", where)

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
    ax.set_title(wrap(f"The tutorial's chain: modelled speedups from this run's costs ({where})", ax.figure),
                 fontsize=TEXT_PT, loc="left")
    save(ax.figure, "chain_step_ratio.png", where)


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
        save(fig, name, where)
        print(name, "growth per worker (MiB):", [round(g / 2**20, 1) for g in run.growth])


def remote(where: str) -> None:
    import tempfile

    sizes = [4 * 1024, 16 * 1024, 64 * 1024, 256 * 1024, 2**20, 8 * 2**20]
    rtt, bandwidth = 0.040, 25e6
    with helpers.ObjectStore() as store, tempfile.TemporaryDirectory() as folder:
        remote_end = store.endpoint(latency_s=rtt, bandwidth=bandwidth)
        timings = []
        for size in sizes:
            keys = store.make_bucket("sizes", count=5, size=size, prefix=f"size-{size}")
            timings += helpers.time_files(helpers.download(store.endpoint(), "sizes", keys, folder))
            timings += helpers.time_objects(store.endpoint(), "sizes", keys, source="server")
            timings += helpers.time_objects(remote_end, "sizes", keys, source="remote")
        fig = helpers.plot_object_timings(timings, latency_s=rtt, bandwidth=bandwidth,
                                          server_s=helpers.median_timing(timings, "server", 16 * 1024))
        heading = f"one GET, 40 ms round trip and 25 MB/s per connection added by the proxy — {where}"
        fig.suptitle(wrap(heading, fig, margin_in=0.4), fontsize=TEXT_PT)
        save(fig, "remote_first_byte.png", where)
        print(helpers.timing_table([t for t in timings if t.size in (16 * 1024, 8 * 2**20)]))
        keys = store.make_bucket("lab", count=512, size=16 * 1024)
        limited = store.endpoint(latency_s=rtt, bandwidth=bandwidth, concurrency=8)  # as notebook 13's
        loader = DataLoader(helpers.S3Dataset(limited, "lab", keys, threads=8), batch_size=32,
                            shuffle=True,
                            num_workers=2, worker_init_fn=helpers.freeze_gc)  # as notebook 13's loaders
        timeline, requests = helpers.measure_requests(loader, helpers.ModelledStep(0.005))
        title = (f"512 objects of 16 KiB, 2 workers × 8 threads in __getitems__, 40 ms round trip, a store "
                 f"serving 8 at once: {requests.samples_per_s():.0f} samples/s — {where}")
        fig = helpers.plot_requests(timeline, requests, title=title, concurrency=16)
        save(fig, "remote_requests.png", where)
        print("remote_requests.png:", f"{requests.samples_per_s():.0f} samples/s,",
              f"request {requests.median_s() * 1e3:.1f} ms")


def images(where: str) -> None:
    import tempfile

    step = helpers.ModelledStep(0.005)
    cores = helpers.available_cores()
    with tempfile.TemporaryDirectory() as folder:
        paths, labels = helpers.make_jpegs(f"{folder}/large", 960, 448)
        tiny_paths, tiny_labels = helpers.make_jpegs(f"{folder}/tiny", 4096, 32)
        cores_free = helpers.free_cores(min(cores, 4))
        dataset = helpers.JpegDataset(paths, labels, transform=helpers.train_transform(224))
        # as notebook 14 measures: each run twice, interleaved, the faster kept (helpers.record_best)
        loaders = {workers: DataLoader(dataset, batch_size=32, shuffle=True, num_workers=workers,
                                       worker_init_fn=helpers.freeze_gc)
                   for workers in sorted({0, 1, 2, cores, cores + 1})}
        runs = helpers.record_best(loaders, step, progress=False)
        rates = {w: helpers.images_per_s(tl) for w, tl in runs.items()}
        loaders = {}
        for name, (ps, ls, crop, batch) in {"448-pixel images": (paths, labels, 224, 32),
                                            "32-pixel images": (tiny_paths, tiny_labels, 28, 256)}.items():
            for label, workers, pool in (("1 worker", 1, 1), ("2 threads", 1, 2), ("2 workers", 2, 1)):
                ds = helpers.JpegDataset(ps, ls, transform=helpers.train_transform(crop), threads=pool)
                loaders[name, label] = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                                  worker_init_fn=helpers.freeze_gc)
        threads = {}
        for (name, label), tl in helpers.record_best(loaders, step, progress=False).items():
            threads.setdefault(name, {})[label] = helpers.decode_rate(tl)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.8, 5.6), layout="constrained", width_ratios=[1, 1.7])
    left.bar([str(w) for w in rates], list(rates.values()), color=COLORS["fetch"])
    for i, r in enumerate(rates.values()):
        left.text(i, r, f"{r:.0f}", ha="center", va="bottom", fontsize=TEXT_PT)
    left.set_ylim(0, max(rates.values()) * 1.12)
    left.set_xlabel(f"num_workers\n({cores} cores, {cores_free:.2f} measured free)")
    left.set_ylabel("images/s (448 px JPEG → crop 224)")
    left.grid(alpha=0.3, axis="y")
    helpers.plot_image_rates(threads, cores_free=cores_free, ax=right,
                             title="threads vs processes, relative to 1 worker with 1 thread")
    fig.suptitle(wrap(f"decode_jpeg + RandomResizedCrop + flip in DataLoader workers — {where}", fig,
                      margin_in=0.4), fontsize=TEXT_PT)
    save(fig, "image_pipeline.png", where)
    print("image_pipeline.png:", {w: round(r) for w, r in rates.items()},
          {n: {k: round(v) for k, v in t.items()} for n, t in threads.items()})


def resume(where: str) -> None:
    import warnings

    warnings.filterwarnings("ignore", message=helpers.SET_VITAL_FILTER)
    common = dict(n=512, batch_size=8, num_workers=2, kill_after=23, every=5, step_s=0.02)
    results = {kind: helpers.kill_and_resume(kind, **common) for kind in ("stateful", "restart", "skip")}
    for kind in ("skip", "stateful"):  # in order of ids; batch 19 cold in the first run only
        results[f"{kind}, in_order=False"] = helpers.kill_and_resume(
            kind, **common, in_order=False, load_s=0.002, shuffle=False, cold_batch=19)
    fig = helpers.plot_resume(results)
    fig.suptitle(wrap(f"one epoch of 512 ids, killed (SIGKILL) after step 23, resumed from step 20 — {where}",
                      fig, margin_in=0.4), fontsize=TEXT_PT)
    save(fig, "resume.png", where)
    for result in results.values():
        print(result.describe())


def diagnose(where: str) -> None:

    diagnoses = {}
    for name in ("A", "B", "C"):
        loader, step, steps = helpers.mystery_loader(name, smoke=False)
        diagnoses[name] = helpers.diagnose(loader, step, steps=steps, progress=False)
    fig, axes = plt.subplots(3, 1, figsize=(12.8, 7.2), layout="constrained",
                             height_ratios=[len(d.timeline.workers) + 1.4 for d in diagnoses.values()])
    def short(r) -> str:  # the change and the number that triggered it (its first clause), for a slide
        change = ", ".join(f"{k}={v}" for k, v in (r.change or {}).items()) or r.knob
        reason = re.split(r"[:;]", r.because)[0]
        return f"{change} ({reason}{')' * (reason.count('(') - reason.count(')'))})"

    for ax, (name, d) in zip(axes, diagnoses.items(), strict=True):
        advice = "; ".join(short(r) for r in d.recommendations)
        helpers.plot_timeline(d.timeline, ax, label_batches=False, legend=False,
                              title=f"loader {name}: headroom {d.headroom:.2f}× → {advice}")
        ax.set_xlabel("")
    axes[-1].set_xlabel("time since the recording started (s)")
    timeline_legend(fig, [d.timeline for d in diagnoses.values()])
    heading = f"helpers.diagnose on three loaders with a planted problem — {where}"
    fig.suptitle(wrap(heading, fig, margin_in=3.2), x=0.01, ha="left", fontsize=TEXT_PT)  # beside the legend
    save(fig, "diagnose_mysteries.png", where)
    for name, d in diagnoses.items():
        print(name, d.knobs(), f"headroom {d.headroom:.2f}")


def distributed(where: str) -> None:
    run = helpers.launch(4, n=251, batch_size=8, num_workers=1, epochs=1, step_s=0.01, load_s=0.001,
                         slow_rank=1, slow_factor=6.0)
    if not run.ok:
        raise SystemExit(f"torchrun failed: {run.output[-2000:]}")
    rates, waits = run.steps_per_s(), run.median_sync_wait()
    title = (f"torchrun, 4 ranks (gloo), rank 1's data 6× slower: every rank at {min(rates.values()):.1f} "
             f"steps/s, the others waiting {max(waits.values()) * 1e3:.0f} ms per step in all_reduce "
             f"— {where}")
    save(helpers.plot_ranks(run, title=title), "distributed_straggler.png", where)
    print(rates, waits)


if __name__ == "__main__":
    main()
