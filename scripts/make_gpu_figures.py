"""Make the GPU reference figures in images/ from real runs on a CUDA GPU (full sizes).

CPU-only machines show these in notebooks 06, 07 and 11 in place of the cells they skip:

* ``pinned_bandwidth.png`` (06): host-to-device bandwidth, pageable vs pinned vs pinning
  into a cached block inside the copy, 64 KiB to 256 MiB (``helpers.copy_bandwidth``).
* ``pinned_copy_segment.png`` (06): the loop's copy of each 18 MiB batch (cyan), pageable vs
  ``pin_memory=True``, 2 workers, modelled 50 ms step.
* ``device_prefetch_gpu.png`` (07): the tutorial's model on the GPU, the loop copying each
  batch vs ``helpers.DevicePrefetcher`` vs its uint8 variant vs the former serialised
  prefetcher, 4 workers (``helpers.lessons.device_prefetch.gpu_runs``, the notebook's own runs).
* ``capstone_gpu.png`` (11): notebook 11 executed in full on the GPU (the tutorial's model,
  4 workers); its stage-by-stage chart against the tutorial's published figures.

Run with ``python scripts/make_gpu_figures.py`` on a machine with CUDA; it prints the
figures it measured. It refuses to run without CUDA or in smoke mode.
"""

from __future__ import annotations

import base64
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import helpers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "images"
SIZES = [2**k for k in range(16, 29, 2)]          # 64 KiB ... 256 MiB, as notebook 06


def main() -> None:
    if helpers.is_smoke():
        raise SystemExit("make_gpu_figures.py draws full-size runs: unset DLLAB_SMOKE")
    if not torch.cuda.is_available():
        raise SystemExit("make_gpu_figures.py needs a CUDA GPU (torch.cuda.is_available() is False); "
                         "on a CPU-only machine use scripts/make_figures.py")
    warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
    device = helpers.get_device()
    where = f"{helpers.accelerator_name()}, torch {torch.__version__}"

    timings = helpers.copy_bandwidth(SIZES, device)
    for t in timings:
        print(f"{t.nbytes / 2**20:8.2f} MiB  pageable {t.pageable_gbps:5.1f} GB/s  pinned "
              f"{t.pinned_gbps:5.1f} GB/s  pin+copy {t.pin_then_copy_gbps:5.1f} GB/s  non_blocking call "
              f"pageable {t.pageable_nonblocking_call_s * 1e3:.3f} ms, pinned "
              f"{t.pinned_nonblocking_call_s * 1e3:.3f} ms")
    ax = helpers.plot_bandwidth(timings)
    ax.set_title(f"Host-to-device copies ({where})", fontsize=9)
    ax.figure.savefig(OUT / "pinned_bandwidth.png", dpi=110)

    def image_loader(pin_memory: bool):
        dataset = helpers.TutorialDataset(32 * 8, shape=(3, 224, 224), item_wait_s=0.005)
        return DataLoader(dataset, batch_size=32, num_workers=2, pin_memory=pin_memory)

    runs = [helpers.record(image_loader(pin), helpers.ModelledStep(0.05), device=device)
            for pin in (False, True)]
    for pin, tl in zip((False, True), runs, strict=True):
        print(f"pin_memory={pin}: the loop's copy {tl.summary()['mean_copy_s'] * 1e3:.2f} ms per batch")
    fig = helpers.plot_timelines(runs, titles=[f"pageable ({where})", "pin_memory=True"])
    fig.savefig(OUT / "pinned_copy_segment.png", dpi=100)

    runs = helpers.lessons.device_prefetch.gpu_runs(device)
    for name, tl in runs.items():
        s = tl.summary()
        print(f"{name}: {s['median_step_interval_s'] * 1e3:.2f} ms per batch (median), loop waiting "
              f"{s['wait_fraction']:.1%}")
    titles = list(runs)
    titles[0] += f" ({where})"
    fig = helpers.plot_timelines(list(runs.values()), titles=titles, label_batches=False)
    fig.savefig(OUT / "device_prefetch_gpu.png", dpi=100)
    capstone()
    print("wrote pinned_bandwidth.png, pinned_copy_segment.png, device_prefetch_gpu.png, capstone_gpu.png "
          "in images/")


def capstone() -> None:
    """Execute notebook 11 on this GPU and keep its chart (the notebook is the one definition of
    the chain; the chart's title names the GPU and torch)."""
    import nbclient
    import nbformat

    path = ROOT / "notebooks" / "11_capstone.ipynb"
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    chart = next(c for c in nb.cells if c.cell_type == "code" and "plot_ratios" in c.source)
    data = [o["data"] for o in chart.outputs if "data" in o]
    (OUT / "capstone_gpu.png").write_bytes(base64.b64decode(next(d["image/png"] for d in data
                                                                 if "image/png" in d)))
    table = next(c for c in nb.cells if c.cell_type == "code" and "efficiency vs bound" in c.source)
    print(next(o["data"]["text/plain"] for o in table.outputs if "data" in o))


if __name__ == "__main__":
    main()
