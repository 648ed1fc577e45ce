"""What keeping the ranks in step costs: the time of one exchange, and how far apart the ranks
stamp a window's edges.

Every rank opens and closes ``--windows`` empty windows (each edge: a device sync, then an
exchange of the ranks through rank 0); rank 0 prints, as JSON, the time per exchange and, over
the windows, the median and largest difference between each rank's edges and rank 0's and
between their window lengths.

    torchrun --standalone --nproc-per-node 8 benchmarks/distributed_edges.py [--power nvml] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import energyframe as ef


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=200, help="empty windows to open and close")
    ap.add_argument("--power", default="none", help="power source spec (none: timing only)")
    ap.add_argument("--json", help="write the figures here (rank 0)")
    args = ap.parse_args()
    with ef.measure(power="none" if args.power == "none" else [args.power]) as m:
        started = time.monotonic()
        for _ in range(args.windows):
            with m.window("empty"):
                pass
        elapsed = time.monotonic() - started
    if not m.coordinator.is_root:
        return 0
    w = m.result.windows
    if "rank" not in w:
        print("one process: nothing to agree (run it under torchrun)")
        return 0
    w = w[w["channel"] != "total"]  # a rank's channels share its edges
    starts = w.pivot_table(index="trial", columns="rank", values="start_s", aggfunc="first")
    lengths = w.pivot_table(index="trial", columns="rank", values="duration_s", aggfunc="first")
    ranks = [r for r in starts.columns if r != 0]
    start_skew = (starts[ranks].sub(starts[0], axis=0)).abs()
    length_skew = (lengths[ranks].sub(lengths[0], axis=0)).abs()
    figures = {
        "world_size": m.coordinator.world_size,
        "windows": args.windows,
        "exchange_s": elapsed / (2 * args.windows),
        "start_skew_median_s": float(start_skew.stack().median()),
        "start_skew_max_s": float(start_skew.stack().max()),
        "length_skew_median_s": float(length_skew.stack().median()),
        "length_skew_max_s": float(length_skew.stack().max()),
        "clock_offsets_s": {
            r["rank"]: [r["clock_offset_s"], r["clock_offset_uncertainty_s"]]
            for r in m.result.meta["distributed"]["ranks"]
        },
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
