"""Per-call latency of the built-in kernels, against two other clocks.

For each kernel, energyframe's per-call latency (graph replays between device syncs, host
monotonic clock, calibrated windows) is compared with ``torch.cuda.Event`` timing of the same
captured graph, and with the PyTorch profiler's kernel durations (GPU-side, without the gaps
between kernels). Also prints energy per call and power. Target: within 3 %.

Run on a GPU: ``python benchmarks/kernel_latency.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import energyframe as ef
from energyframe.kit import registry
from energyframe.options import parse_spec
from energyframe.workloads.graph import Captured

KERNELS = [
    "matmul:M=4096,K=4096,N=4096",
    "matmul:M=8192,K=8192,N=8192,dtype=bf16",
    "conv:N=32,C=64,M=64,P=56,Q=56,R=3,S=3",
    "conv:N=32,C=256,M=512,P=28,Q=28,R=1,S=1,HS=2,WS=2",
    "dwconv:N=8,C=128,P=56,Q=56,R=31,S=31",
    "elementwise:op=add_relu,M=8192,N=8192",
    "layernorm:M=8192,N=4096",
    "softmax:M=8192,N=4096",
    "sdpa:B=4,H=16,L=2048,D=128,causal=true",
    "embedding:V=50272,D=4096,T=8192",
]


def event_time(captured: Captured, replays: int = 20) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        start.record()
        for _ in range(replays):
            captured.step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / (replays * captured.unroll))
    return statistics.median(times)


def profiler_time(captured: Captured, replays: int = 3) -> float:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            captured.step()
        torch.cuda.synchronize()
    # GPU-side time of the kernels (and memsets) the replays ran; the graph launch has none
    total_us = sum(e.self_device_time_total for e in prof.key_averages())
    return total_us * 1e-6 / (replays * captured.unroll)


def profiler_detail(spec: str) -> None:
    """Every GPU event the profiler sees for 3 replays of one kernel's graph."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    workload = registry.create(registry.WORKLOADS, parse_spec(spec))
    workload.setup()
    captured = Captured(workload.make_state, workload.launch, workload.options["unroll"], workload.device)
    captured.build()
    for _ in range(20):
        captured.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            captured.step()
        torch.cuda.synchronize()
    print(f"\nprofiler events for 3 replays x {captured.unroll} calls of {spec}:")
    for e in sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:8]:
        print(
            f"  {e.key[:70]:70s} count {e.count:5d}  device {e.self_device_time_total:10.1f} us  cpu {e.self_cpu_time_total:9.1f} us"
        )
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    starts = sorted((e.time_range.start, e.time_range.end) for e in events)
    gaps = [b[0] - a[1] for a, b in zip(starts, starts[1:])]
    if gaps:
        gaps.sort()
        print(
            f"  {len(starts)} GPU events; gap between consecutive kernels: median {gaps[len(gaps) // 2]:.2f} us, "
            f"max {gaps[-1]:.2f} us; first start to last end {(starts[-1][1] - starts[0][0]):.1f} us"
        )
    captured.release()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--detail", help="only print the profiler's events for this kernel spec")
    args = ap.parse_args()
    import torch

    if args.detail:
        profiler_detail(args.detail)
        return 0

    rows = []
    for spec in KERNELS:
        result = ef.run(
            spec,
            power=["nvml:gpus=0"],
            reporters=[],
            settings=ef.RunSettings(trials=5, min_window_periods=5, warmup_s=0.2),
        )
        name = spec.split(":")[0]
        s = result.summary(name, "gpu0")
        workload = registry.create(registry.WORKLOADS, parse_spec(spec))
        workload.setup()
        captured = Captured(workload.make_state, workload.launch, workload.options["unroll"], workload.device)
        captured.build()
        events = event_time(captured)
        prof = profiler_time(captured)
        captured.release()
        ours = s.time_per_iter_s.median
        rows.append(
            {
                "kernel": spec,
                "ours_s": ours,
                "events_s": events,
                "profiler_s": prof,
                "vs_events_pct": 100 * (ours / events - 1),
                "vs_profiler_pct": 100 * (ours / prof - 1),
                "energy_j": s.energy_per_iter_j.median,
                "energy_cv_pct": 100 * s.energy_per_iter_j.cv,
                "power_w": s.mean_power_w.median,
                "flags": list(s.flags),
            }
        )
    device = torch.cuda.get_device_name(0)
    print(
        f"\nper-call latency of built-in kernels on {device}, {time.strftime('%Y-%m-%d')} (CUDA graphs of 100 calls)"
    )
    print(
        f"{'kernel':52s} {'ours':>10s} {'events':>10s} {'diff':>7s} {'profiler':>10s} {'diff':>7s} {'energy':>10s} {'CV':>6s} {'power':>7s}"
    )
    for r in rows:
        print(
            f"{r['kernel']:52s} {r['ours_s'] * 1e6:8.2f}us {r['events_s'] * 1e6:8.2f}us {r['vs_events_pct']:+6.2f}% "
            f"{r['profiler_s'] * 1e6:8.2f}us {r['vs_profiler_pct']:+6.2f}% {r['energy_j'] * 1e3:8.3f}mJ "
            f"{r['energy_cv_pct']:5.2f}% {r['power_w']:6.0f}W"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": device, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
