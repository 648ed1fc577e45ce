"""How long ``energyframe --help`` and ``energyframe list`` take, and what they import.

``python benchmarks/startup_time.py [--runs 10]`` prints a table: median and max wall time of
each command as a fresh process, and whether torch was imported (it must not be).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PROBE = (
    "import sys\n"
    "from energyframe.cli import main\n"
    "try:\n"
    "    main({args!r})\n"
    "except SystemExit:\n"
    "    pass\n"
    "print('TORCH-IMPORTED' if 'torch' in sys.modules else 'TORCH-NOT-IMPORTED', file=sys.stderr)\n"
)


def measure(args: list[str], runs: int) -> tuple[list[float], bool]:
    times, torch_imported = [], False
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        torch_imported |= "TORCH-IMPORTED" in proc.stderr
    return times, torch_imported


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    print(f"{'command':28s} {'median':>9s} {'max':>9s}  torch imported")
    bad = False
    for cmd in (["--help"], ["list"], ["run", "--help"]):
        times, torch_imported = measure(cmd, args.runs)
        bad |= torch_imported
        print(
            f"{'energyframe ' + ' '.join(cmd):28s} {statistics.median(times) * 1e3:7.0f}ms "
            f"{max(times) * 1e3:7.0f}ms  {'YES' if torch_imported else 'no'}"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
