"""What recording power costs the measured program.

A launch-bound workload (thousands of tiny kernels issued eagerly from Python, the kind a
sampling thread slows down most) is timed with no source, with ``nvml`` sampling in its own
process, with ``nvml`` sampling in a thread of the measured process, and with ``nvidia-smi``.
Configurations alternate over several rounds; the table gives each one's median time per
iteration over the no-source median (target: <= 1.01).

Run on a GPU: ``python benchmarks/sampler_overhead.py [--rounds 3] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import energyframe as ef
from energyframe.power.nvidia_smi import NvidiaSmiPowerSource
from energyframe.power.nvml import NVMLPowerSource

CONFIGS = {
    "none": lambda: [],
    "nvml (process)": lambda: [NVMLPowerSource(name="nvml", gpus="0")],
    "nvml (thread)": lambda: [NVMLPowerSource(name="nvml", gpus="0", mode="thread")],
    "nvidia-smi": lambda: [NvidiaSmiPowerSource(name="nvidia-smi", gpus="0")],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=20000, help="tiny kernels per iteration")
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    x = torch.zeros(256, device="cuda")

    def step():
        for _ in range(args.kernels):
            x.add_(1.0)

    step()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    order = list(CONFIGS)
    for _ in range(args.rounds):
        random.shuffle(order)  # no configuration always runs first (or after the same one)
        for name in order:
            make = CONFIGS[name]
            with ef.measure(power=make(), sync=torch.cuda.synchronize) as m:
                step()
                for _ in range(args.trials):
                    with m.window("launch"):
                        step()
            times[name] += list(m.result.windows.drop_duplicates(["phase", "trial"])["duration_s"])
    base = statistics.median(times["none"])
    print(
        f"\nsampling overhead on {torch.cuda.get_device_name(0)}, {time.strftime('%Y-%m-%d')}: "
        f"{args.kernels} tiny kernels per iteration, {args.rounds} rounds x {args.trials} trials"
    )
    print(f"{'configuration':18s} {'median':>10s} {'ratio':>8s} {'IQR/median':>11s}")
    out = {}
    for name, values in times.items():
        med = statistics.median(values)
        q = statistics.quantiles(values, n=4)
        out[name] = {
            "median_s": med,
            "ratio": med / base,
            "relative_iqr": (q[2] - q[0]) / med,
            "n": len(values),
        }
        print(f"{name:18s} {med * 1e3:8.2f}ms {med / base:8.4f} {100 * (q[2] - q[0]) / med:10.2f}%")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name(0),
                    "date": time.strftime("%Y-%m-%d"),
                    "kernels": args.kernels,
                    "results": out,
                    "times_s": times,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
