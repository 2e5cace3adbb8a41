"""Start-up of the `safeshare` command: seconds until `--help` and a few subcommands' `--help` have printed (the
interpreter, the dispatcher and every component's registration), best of five runs each.

    .venv/bin/python benchmarks/startup_bench.py
"""
from __future__ import annotations

import subprocess
import sys
import time

COMMANDS = (["--help"], ["revoke", "--help"], ["audit", "verify", "--help"], ["deid", "--help"])


def seconds(argv: list[str], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "safeshare.cli", *argv], capture_output=True, check=True)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    print(f"{'command':<28}{'seconds':>8}")
    for argv in COMMANDS:
        print(f"{'safeshare ' + ' '.join(argv):<28}{seconds(argv):>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
