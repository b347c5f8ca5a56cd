"""Follow the diagnosis' advice and measure it: ``python benchmarks/diagnose_verify.py``.

``helpers.diagnose(..., verify=True)`` on the three mystery loaders of notebook 16 and two loaders
of its own kind — CPU-bound loading with 0 workers, slow batches that all land on one worker, and a
fetch that waits but computes part of its time —
prints, for each recommendation followed, the time per step before and after, the prediction and
the noise. Loader B's advice is a code change (a cheaper collate_fn), which verify cannot make: here
it is made by hand (the default collate) and measured against the prediction the same way.
Sizes are the notebooks' full sizes; the numbers are this machine's, measured in this run.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from torch.utils.data import DataLoader, default_collate  # noqa: E402

import helpers  # noqa: E402
from helpers.timing.diagnosis.result import Followed  # noqa: E402
from helpers.timing.diagnosis.run import _mean_and_noise, with_changes  # noqa: E402


def own_loaders():
    cpu = DataLoader(helpers.WorkDataset(192, item_cpu_s=0.01), batch_size=4)
    clumped = DataLoader(helpers.WorkDataset(192, item_wait_s=0.016, slow_every=8, slow_factor=12),
                         batch_size=1, num_workers=4)
    # Each sample computes 2 ms and waits 3: a fetch on the CPU ~40 % of its time, under the line where
    # it counts as computing; the sizing rule asks for ~8 workers, the cores can compute for ~4 at once.
    mixed = DataLoader(helpers.WorkDataset(480, item_cpu_s=0.002, item_wait_s=0.003), batch_size=4,
                       num_workers=1)
    return {"CPU-bound, 0 workers": (cpu, helpers.ModelledStep(0.01), 40),
            "slow batches on one worker": (clumped, helpers.ModelledStep(0.015), 96),
            "waiting and computing, 1 worker": (mixed, helpers.ModelledStep(0.002), 60)}


def main() -> int:
    print(helpers.describe_machine().get("cpu_limits"))
    cases = {f"mystery {name}": helpers.mystery_loader(name, smoke=False) for name in "ABC"}
    cases.update(own_loaders())
    for name, (loader, step, steps) in cases.items():
        d = helpers.diagnose(loader, step, steps=steps, verify=True, progress=False)
        print(f"\n== {name}: {d.knobs()}, waiting {d.steady_wait_share:.0%} ({d.scale})")
        for r in d.recommendations:
            print(f"   → {r.knob}: {r.advice} — because {r.because}")
        for f in d.followed:
            print(f"   followed {f.describe()}")
        if name == "mystery B":  # the code change verify cannot make, made by hand
            advice = next(r for r in d.recommendations if r.knob == "collate_fn")
            after = helpers.diagnose(with_changes(loader, collate_fn=default_collate), step, steps=steps,
                                     progress=False)
            before_s, before_noise = _mean_and_noise(d, "steady")
            after_s, after_noise = _mean_and_noise(after, "steady")
            noise = (before_noise ** 2 + after_noise ** 2) ** 0.5
            by_hand = Followed(advice, before_s, after_s, noise, after)
            print(f"   followed by hand (default collate): {by_hand.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
