"""How much does the instrument cost? The same loop with and without helpers.record().

Prints ratios measured in one run (medians over alternating repetitions), for:
  * a realistic pipeline: 2 workers, a 1 ms per-item load, batches of 8 small
    images, a modelled 5 ms step (the lab's typical shape);
  * the worst case: 0 workers, free items, no step - nothing but per-batch overhead.

Run: `make benchmark` (or `.venv/bin/python benchmarks/overhead.py`).
"""

from __future__ import annotations

import statistics
import time
import warnings

from torch.utils.data import DataLoader

import helpers

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")


def plain_loop(loader, step) -> float:
    start = time.perf_counter()
    for batch in loader:
        step(batch)
    return time.perf_counter() - start


def recorded_loop(loader, step) -> float:
    start = time.perf_counter()
    helpers.record(loader, step, progress=False)
    return time.perf_counter() - start


def compare(name: str, loader, step, repeats: int) -> dict[str, float]:
    plain_loop(loader, step)  # warm-up (imports, page cache)
    plain, recorded = [], []
    for _ in range(repeats):  # alternate, so drift hits both alike
        plain.append(plain_loop(loader, step))
        recorded.append(recorded_loop(loader, step))
    batches = len(loader)
    p, r = statistics.median(plain), statistics.median(recorded)
    overhead = r / p - 1
    print(f"{name}: {batches} batches, median {p * 1e3:.1f} ms plain vs {r * 1e3:.1f} ms "
          f"recorded -> overhead {overhead:+.2%} ({(r - p) / batches * 1e6:+.1f} us/batch)")
    return {"plain_s": p, "recorded_s": r, "overhead": overhead}


def main() -> None:
    print(helpers.describe_machine(), "\n")
    realistic = DataLoader(helpers.WorkDataset(400, item_wait_s=0.001, item_shape=(3, 32, 32)),
                           batch_size=8, num_workers=2, prefetch_factor=2)
    result = compare("realistic (2 workers, 1 ms/item, 5 ms step)", realistic,
                     helpers.ModelledStep(0.005), repeats=9)
    worst = DataLoader(helpers.WorkDataset(5000), batch_size=1)
    compare("worst case (0 workers, free items, no step)", worst, lambda batch: None,
            repeats=9)
    verdict = "within" if result["overhead"] <= 0.02 else "ABOVE"
    print(f"\nrealistic overhead {result['overhead']:+.2%}: {verdict} the 2 % budget")


if __name__ == "__main__":
    main()
