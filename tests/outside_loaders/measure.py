"""Steps per second of each case's loader and its fixed loader, with a sleep standing in for the step.

Usage: python tests/outside_loaders/measure.py [CASE ...] [--batches N] [--seconds S] [--keep]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from outside_loaders import CASES  # noqa: E402

SKIP = 5


def steps_per_second(loader, step_s: float, batches: int, seconds: float) -> tuple[float, float]:
    """(steps/s, share of the time spent waiting for batches) after the first SKIP batches."""
    it = iter(loader)
    try:
        for _ in range(SKIP):
            next(it)
            time.sleep(step_s)
        start = time.perf_counter()
        waited, steps = 0.0, 0
        while steps < batches and time.perf_counter() - start < seconds:
            before = time.perf_counter()
            try:
                next(it)
            except StopIteration:
                break
            waited += time.perf_counter() - before
            time.sleep(step_s)
            steps += 1
        elapsed = time.perf_counter() - start
    finally:
        del it
    return steps / elapsed, waited / elapsed


def measure(name: str, batches: int, seconds: float, keep: bool) -> tuple[float, float]:
    """Print and return (slow steps/s, fixed steps/s) of one case."""
    case = importlib.import_module(f"outside_loaders.{name}")
    step_s = case.STEP_MS / 1000
    try:
        slow, slow_wait = steps_per_second(case.make_loader(), step_s, batches, seconds)
        fixed, fixed_wait = steps_per_second(case.make_fixed_loader(), step_s, batches, seconds)
    finally:
        if not keep:
            case.cleanup()
    print(f"{name:<11} {case.DOMAIN:<17} step {case.STEP_MS:5.1f} ms   slow {slow:6.1f} steps/s "
          f"(waiting {slow_wait:4.0%})   fixed {fixed:6.1f} steps/s (waiting {fixed_wait:4.0%})   "
          f"x{fixed / slow:4.1f}", flush=True)
    return slow, fixed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", choices=[[], *CASES], default=[], metavar="CASE")
    parser.add_argument("--batches", type=int, default=80, help="batches timed per loader (after 5)")
    parser.add_argument("--seconds", type=float, default=5.0, help="most seconds timed per loader")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*suggested max number of worker")
    for name in args.cases or CASES:
        measure(name, args.batches, args.seconds, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
