"""Does the diagnosis's advice, followed, get a loader it has never seen as far as an expert's fix?

For each loader of ``tests/outside_loaders`` (written outside the lab, one cause each inside
``__getitem__`` or ``collate_fn``, with an expert's fix beside it):

1. the diagnosis runs on the loader as written, with a modelled step of the case's length;
2. it names a function and a call: the ones the case planted, or not;
3. "followed" is what the advice says to do: change the function it names as it says (the expert's
   fix: ``tests/test_diagnose.py`` checks that the advice names it), then diagnose again and apply
   every DataLoader setting that diagnosis advises;
4. one run each, side by side: steps per second of the loader as written, the expert's fix and the
   advice followed; the ratio followed ÷ expert (the target: at least 0.9);
5. the profile's own time against the whole diagnosis's (the target: at most 10 %).

Run: ``.venv/bin/python benchmarks/diagnose_outside.py [CASE ...]`` (about 6 minutes on 2 cores).
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from outside_loaders import CASES  # noqa: E402
from outside_loaders.measure import steps_per_second  # noqa: E402
from test_diagnose import names_call  # noqa: E402

import helpers  # noqa: E402
from helpers.timing.diagnosis.run import with_changes  # noqa: E402

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")


def one(name: str) -> dict:
    case = importlib.import_module(f"outside_loaders.{name}")
    step_s = case.STEP_MS / 1000
    start = time.perf_counter()
    d = helpers.diagnose(case.make_loader(), helpers.ModelledStep(step_s), progress=False)
    diagnosis_s = time.perf_counter() - start
    named = next((r for r in d.recommendations if r.function is not None), None)
    again = helpers.diagnose(case.make_fixed_loader(), helpers.ModelledStep(step_s), progress=False)
    settings: dict = {}
    for r in again.recommendations:
        settings.update(r.change or {})
    slow, _ = steps_per_second(case.make_loader(), step_s, 60, 8.0)
    expert, _ = steps_per_second(case.make_fixed_loader(), step_s, 60, 8.0)
    followed, _ = steps_per_second(with_changes(case.make_fixed_loader(), **settings) if settings
                                   else case.make_fixed_loader(), step_s, 60, 8.0)
    return {
        "name": name, "function": bool(named and case.CAUSE_FUNCTION in named.advice),
        "call": bool(named and names_call(case.CAUSE_CALL, named.call)), "settings": settings,
        "slow": slow, "expert": expert, "followed": followed,
        "profile": (d.profile.profile_s / diagnosis_s) if d.profile is not None else None,
    }


def main(names: list[str]) -> None:
    os.environ.setdefault("OUTSIDE_LOADERS_DIR", tempfile.mkdtemp(prefix="dllab-outside-"))
    print(f"{'case':<11} {'names fn':>8} {'call':>5}  {'as written':>10} {'expert':>7} {'followed':>8}  "
          f"{'followed/expert':>15}  {'profile share':>13}  advised settings")
    ratios, shares = [], []
    for name in names:
        r = one(name)
        ratio = r["followed"] / r["expert"]
        ratios.append(ratio)
        if r["profile"] is not None:
            shares.append(r["profile"])
        share = "—" if r["profile"] is None else f"{r['profile']:.0%}"
        print(f"{name:<11} {'yes' if r['function'] else 'NO':>8} {'yes' if r['call'] else 'NO':>5}  "
              f"{r['slow']:8.1f}/s {r['expert']:6.1f}/s {r['followed']:7.1f}/s  {ratio:15.2f}  {share:>13}  "
              f"{helpers.timing.diagnosis.advice.describe_change(r['settings']) or 'none'}", flush=True)
        importlib.import_module(f"outside_loaders.{name}").cleanup()
    print(f"followed ÷ expert: lowest {min(ratios):.2f}, median {sorted(ratios)[len(ratios) // 2]:.2f}; "
          f"the profile's share of a diagnosis: at most {max(shares, default=0):.0%}")


if __name__ == "__main__":
    main(sys.argv[1:] or CASES)
