"""Run a command beside busy processes: ``python scripts/stress.py --competitors 1 -- make notebooks``.

Each competitor is a Python process that spins on the CPU (``while True: pass``), the way
another program on a shared machine would. They start before the command and are always
stopped after it — on success, on failure, on Ctrl-C. The exit status is the command's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/stress.py")
    parser.add_argument("--competitors", type=int, default=1, help="CPU-bound processes to run beside")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command or options.competitors < 0:
        parser.error("give a command after --, and --competitors >= 0")
    competitors = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(options.competitors)
    ]
    print(
        f"stress: {len(competitors)} CPU-bound competitor(s) running beside: {' '.join(command)}", flush=True
    )
    try:
        return subprocess.run(command).returncode
    finally:
        for competitor in competitors:
            competitor.kill()
            competitor.wait()


if __name__ == "__main__":
    sys.exit(main())
