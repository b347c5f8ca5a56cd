"""Make the GPU reference figures in images/ from real runs on a CUDA GPU (full sizes).

CPU-only machines show these in notebooks 06, 07 and 11 in place of the cells they skip:

* ``pinned_bandwidth.png`` (06): host-to-device bandwidth, pageable vs pinned vs pinning
  into a cached block inside the copy, 64 KiB to 256 MiB (``helpers.copy_bandwidth``).
* ``pinned_copy_segment.png`` (06): the loop's copy of each 18 MiB batch (sky blue), pageable vs
  ``pin_memory=True``, 2 workers, modelled 50 ms step.
* ``device_prefetch_gpu.png`` (07): the tutorial's model on the GPU, the loop copying each
  batch vs ``helpers.DevicePrefetcher`` vs its uint8 variant vs a serialised
  prefetcher, 4 workers (``helpers.lessons.device_prefetch.gpu_runs``, the notebook's own runs).
* ``capstone_gpu.png`` (11): notebook 11 executed in full on the GPU (the tutorial's model,
  4 workers); its stage-by-stage speedups against the tutorial's published figures.

``python scripts/make_gpu_figures.py`` (``make figures-gpu``) measures on a machine with CUDA,
saves what it measured in ``images/data/<group>.json`` and draws the figures from those files;
``python scripts/make_gpu_figures.py capstone`` (any of the groups: bandwidth, copy_segment,
device_prefetch, capstone) measures those alone and draws every figure whose data is saved.
``--render`` draws them again from the saved measurements, on any machine (no GPU: e.g. after a
change of palette); the figure's metadata says it was drawn from saved data. ``--check`` reads
the figures' metadata only and exits 1 naming each one drawn by other code, with another
palette, or before figures carried their origin (``helpers.plots.provenance``). Measuring
refuses to run without CUDA or in smoke mode.
"""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

import helpers  # noqa: E402
from helpers.plots import provenance  # noqa: E402
from helpers.plots.style import TEXT_PT, wrap  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "images"
DATA = OUT / "data"
SCRIPT = "scripts/make_gpu_figures.py"
SIZES = [2**k for k in range(16, 29, 2)]          # 64 KiB ... 256 MiB, as notebook 06


# -- measuring (CUDA) --------------------------------------------------------------------------
def measure_bandwidth(device, where: str) -> dict:
    timings = helpers.copy_bandwidth(SIZES, device)
    for t in timings:
        print(f"{t.nbytes / 2**20:8.2f} MiB  pageable {t.pageable_gbps:5.1f} GB/s  pinned "
              f"{t.pinned_gbps:5.1f} GB/s  pin+copy {t.pin_then_copy_gbps:5.1f} GB/s  non_blocking call "
              f"pageable {t.pageable_nonblocking_call_s * 1e3:.3f} ms, pinned "
              f"{t.pinned_nonblocking_call_s * 1e3:.3f} ms")
    return {"where": where, "timings": [asdict(t) for t in timings]}


def measure_copy_segment(device, where: str) -> dict:
    from torch.utils.data import DataLoader

    def image_loader(pin_memory: bool):
        dataset = helpers.TutorialDataset(32 * 8, shape=(3, 224, 224), item_wait_s=0.005)
        return DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=pin_memory)

    runs = {f"pin_memory={pin}": helpers.record(image_loader(pin), helpers.ModelledStep(0.05), device=device)
            for pin in (False, True)}
    for name, tl in runs.items():
        print(f"{name}: the loop's copy {tl.summary()['mean_copy_s'] * 1e3:.2f} ms per batch")
    return {"where": where, "runs": {name: tl.to_dict() for name, tl in runs.items()}}


def measure_device_prefetch(device, where: str) -> dict:
    runs = helpers.lessons.device_prefetch.gpu_runs(device)
    for name, tl in runs.items():
        s = tl.summary()
        print(f"{name}: {s['median_step_interval_s'] * 1e3:.2f} ms per batch (median), loop waiting "
              f"{s['wait_fraction']:.1%}")
    return {"where": where, "runs": {name: tl.to_dict() for name, tl in runs.items()}}


#: Put into notebook 11 in memory (never on disk) before its lesson checks: prints what its chart
#: draws and what the model was fed, so a run whose checks fail still says what it measured.
_CAPSTONE_DUMP = ('import json\nprint("DLLAB-CAPSTONE " + json.dumps({'
                  '"ratios": {n: wall["baseline"] / wall[n] for n in names}, "published": dict(published), '
                  '"batches": len(measured["baseline"].batches), "step": step_text, '
                  '"predicted": predicted, "costs": {n: vars(c) for n, c in costs.items()}}))')


def measure_capstone(device, where: str) -> dict:
    """Execute notebook 11 on this GPU (the notebook is the one definition of the chain) and keep
    the speedups its chart draws. When its lesson checks fail, print what was measured and fail."""
    import nbclient
    import nbformat

    sys.path.insert(0, str(ROOT / "scripts"))
    import nbclient_poll  # a missed zmq wake-up would cost the 900 s cell timeout (nbclient_poll.py)

    nbclient_poll.install()
    path = ROOT / "notebooks" / "11_capstone.ipynb"
    nb = nbformat.read(path, as_version=4)
    checks_at = next(i for i, c in enumerate(nb.cells) if "capstone.checks(" in c.source)
    nb.cells.insert(checks_at, nbformat.v4.new_code_cell(_CAPSTONE_DUMP))
    try:
        nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        table = next(c for c in nb.cells if c.cell_type == "code" and "efficiency vs bound" in c.source)
        print(next((o["data"]["text/plain"] for o in table.get("outputs", []) if "data" in o), "(no table)"))
        text = "".join(o.get("text", "") for o in nb.cells[checks_at].get("outputs", []))
        print(text or "(notebook 11 stopped before its lesson checks)")
    dump = json.loads(text.split("DLLAB-CAPSTONE ", 1)[1])
    return {"where": where, **{k: dump[k] for k in ("ratios", "published", "batches", "step")}}


# -- drawing (any machine) ----------------------------------------------------------------------
def draw_bandwidth(data: dict):
    from helpers.data.transfer import CopyTiming

    ax = helpers.plot_bandwidth([CopyTiming(**t) for t in data["timings"]])
    ax.set_title(wrap(f"Host-to-device copies ({data['where']})", ax.figure), fontsize=TEXT_PT, loc="left")
    return ax.figure


def draw_copy_segment(data: dict):
    runs = [helpers.Timeline.from_dict(tl) for tl in data["runs"].values()]
    return helpers.plot_timelines(runs, titles=[f"pageable ({data['where']})", "pin_memory=True"])


def draw_device_prefetch(data: dict):
    titles = list(data["runs"])
    titles[0] += f" ({data['where']})"
    return helpers.plot_timelines([helpers.Timeline.from_dict(tl) for tl in data["runs"].values()],
                                  titles=titles, label_batches=False)


def draw_capstone(data: dict):
    ax = helpers.plot_ratios(data["ratios"], reference=data["published"],
                             xlabel="speedup vs baseline (×); orange: the tutorial's published figure")
    title = f"{data['batches']} batches per stage; step: {data['step']} ({data['where']})"
    ax.set_title(wrap(title, ax.figure), fontsize=TEXT_PT, loc="left")
    return ax.figure


#: group -> (its figure, how it is measured, how it is drawn)
FIGURES = {
    "bandwidth": ("pinned_bandwidth.png", measure_bandwidth, draw_bandwidth),
    "copy_segment": ("pinned_copy_segment.png", measure_copy_segment, draw_copy_segment),
    "device_prefetch": ("device_prefetch_gpu.png", measure_device_prefetch, draw_device_prefetch),
    "capstone": ("capstone_gpu.png", measure_capstone, draw_capstone),
}


def expected() -> dict[str, tuple[str, str]]:
    """Each figure → (the command that draws it, the digest its metadata must carry)."""
    return {name: (f"{SCRIPT} {group}", provenance.digest(measure, draw))
            for group, (name, measure, draw) in FIGURES.items()}


def check(folder: Path = OUT) -> list[str]:
    """A line per GPU figure in ``folder`` that the current code did not draw (metadata only)."""
    return provenance.stale(folder, expected())


def render(data_folder: Path = DATA, out: Path = OUT, *, redrawn: bool = True) -> list[str]:
    """Draw every figure whose measurements are saved in ``data_folder``; returns their names."""
    drawn = []
    for group, (name, _, draw) in FIGURES.items():
        path = data_folder / f"{group}.json"
        if not path.exists():
            print(f"{name}: no saved measurements ({path.relative_to(data_folder.parent.parent)}): "
                  "measure on a GPU with `make figures-gpu`")
            continue
        data = json.loads(path.read_text())
        source, digest = expected()[name]
        how = "redrawn without a GPU from the measurements saved" if redrawn else "measured and saved"
        figure = draw(data)
        provenance.save(figure, out / name, source=source, digest=digest,
                        description=f"{group}: {name}, {data['where']}; {how} in images/data/{group}.json")
        plt.close(figure)
        drawn.append(name)
    return drawn


def main() -> None:
    if sys.argv[1:] == ["--check"]:
        problems = check()
        print("\n".join(problems) or f"every figure of {SCRIPT} is current")
        raise SystemExit(1 if problems else 0)
    if sys.argv[1:] == ["--render"]:
        print("drew", *render(), "from images/data/")
        return
    groups = sys.argv[1:] or list(FIGURES)
    if any(g not in FIGURES for g in groups):
        raise SystemExit(f"usage: {SCRIPT} [--render | --check | GROUP ...], "
                         f"GROUP one of {', '.join(FIGURES)}")
    import torch

    if helpers.is_smoke():
        raise SystemExit("make_gpu_figures.py draws full-size runs: unset DLLAB_SMOKE")
    if not torch.cuda.is_available():
        raise SystemExit("make_gpu_figures.py needs a CUDA GPU (torch.cuda.is_available() is False); "
                         "on a CPU-only machine use scripts/make_figures.py, or --render to redraw "
                         "from saved measurements")
    warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
    device = helpers.get_device()
    where = f"{helpers.accelerator_name()}, torch {torch.__version__}"
    DATA.mkdir(exist_ok=True)
    for group in groups:  # each group's measurements saved as soon as they are taken
        (DATA / f"{group}.json").write_text(json.dumps(FIGURES[group][1](device, where), default=str) + "\n")
    print("wrote", *render(redrawn=False), "in images/ (measurements in images/data/)")


if __name__ == "__main__":
    main()
