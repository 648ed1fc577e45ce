"""The seed's SGEMM example as one sweep: naive vs tiled, energy, ncu metrics and every plot.

Prints, per configuration, our per-launch latency (graph replays, median over trials) against
ncu's duration of one launch (``--clock-control none --cache-control none``), and the sweep's
overhead: its wall time over the sum of its measurement windows. Targets (docs/validation.md):
within 3 % of ncu for launches of at least 50 µs; wall time at most 1.5 x the windows, with the
compilation cached (a first, small sweep fills CuPy's cache).

Run on a GPU: ``python benchmarks/kernel_sweep.py --out runs/sgemm [--sizes 512,1024,2048,4096]``.

``--devices 0,1`` compares instead the same sweep run by ``energyframe sweep --devices 0`` (one
GPU) and ``--devices 0,1`` (a shard per GPU, in parallel): wall times and their ratio (target:
about 1/N), and per configuration the latency and energy of both runs (target: within 2 %; the
N-GPU run measures some configurations on other GPUs, so this is also the spread between GPUs).
Writes ``devices.json`` with the table.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import energyframe as ef
from energyframe.sweeps.results import NCU_COMPARE_MIN_S

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "examples" / "matmul_kernels.cu"
SHAPES = {"a": ("N", "K"), "b": ("K", "M"), "res": ("N", "M")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", default="512,1024,2048,4096", help="values of N and of M")
    parser.add_argument("--K", type=int, default=1024)
    parser.add_argument("--power", default="nvml:gpus=0")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--no-ncu", action="store_true")
    parser.add_argument("--devices", help="compare one GPU with these GPUs in parallel, e.g. 0,1")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.devices:
        compare_devices(args, sizes)
        return
    kernels = [
        ef.load_kernel(SOURCE, name, block=(16, 16, 1), shapes=SHAPES)
        for name in ("matmul_naive", "matmul_tiled")
    ]

    # fill the compile cache (and the CUDA context) with a tiny sweep first
    ef.sweep(
        kernels,
        N=[64],
        M=[64],
        K=[64],
        power="none",
        out=args.out / "warm",
        reporters=[],
        settings=ef.RunSettings(trials=1, min_window_s=0.01, warmup_s=0.0),
        echo=lambda s: None,
    )

    t0 = time.monotonic()
    result = ef.sweep(
        kernels,
        N=sizes,
        M=sizes,
        K=[args.K],
        reference=lambda a, b: a @ b,
        flop="2*N*M*K",
        bytes_moved="4*(N*K + K*M + N*M)",
        power=[args.power],
        profile=False,
        out=args.out / "sweep",
        settings=ef.RunSettings(trials=args.trials),
        reporters=[],
    )
    wall_s = time.monotonic() - t0
    run = ef.RunResult.load(args.out / "sweep")
    windows_s = float(run.windows.drop_duplicates(["phase", "trial"])["duration_s"].sum())
    ncu_s = math.nan
    if not args.no_ncu:
        from energyframe.sweeps.api import _with_ncu

        t1 = time.monotonic()
        result = _with_ncu(result, _configs(kernels, sizes, args.K))
        ncu_s = time.monotonic() - t1
        from energyframe.sweeps.outputs import write

        write(result, args.out / "sweep")

    print(
        f"{'kernel':<14}{'N':>6}{'M':>6}{'ours (ms)':>11}{'cv %':>7}{'ncu (ms)':>10}{'diff %':>8}"
        f"{'mJ/launch':>11}{'GFLOP/s':>9}{'GFLOP/J':>9}{'SM %':>7}{'DRAM %':>7}  check"
    )
    diffs = []
    for r in result.results:
        d = r.ncu_diff_pct
        if r.ncu_duration_s >= NCU_COMPARE_MIN_S:
            diffs.append(abs(d))
        print(
            f"{r.kernel:<14}{r.parameters['N']:>6}{r.parameters['M']:>6}{r.latency_s * 1e3:>11.4f}"
            f"{100 * r.latency_cv:>7.2f}{r.ncu_duration_s * 1e3:>10.4f}{d:>8.2f}{r.energy_j * 1e3:>11.3f}"
            f"{r.gflops:>9.0f}{r.gflop_per_j:>9.1f}{r.ncu.get('compute_throughput_pct', math.nan):>7.1f}"
            f"{r.ncu.get('dram_throughput_pct', math.nan):>7.1f}  {r.check.get('status')} {r.check.get('rel_error')}"
        )
    summary = {
        "configurations": len(result.results),
        "gpu": result.meta.get("gpu"),
        "wall_s": wall_s,
        "windows_s": windows_s,
        "overhead_ratio": wall_s / windows_s,
        "ncu_s": ncu_s,
        "ncu_compared": len(diffs),
        "ncu_max_abs_diff_pct": max(diffs) if diffs else math.nan,
        "ncu_median_abs_diff_pct": sorted(diffs)[len(diffs) // 2] if diffs else math.nan,
        "within_3pct": sum(d <= 3 for d in diffs),
    }
    print(json.dumps(summary, indent=1))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


def _cli_sweep(args, sizes, devices: str, out: Path, power: str, trials: int) -> float:
    """``energyframe sweep ... --devices DEVICES``; returns its wall time in s."""
    values = ",".join(map(str, sizes))
    cmd = [
        sys.executable,
        "-m",
        "energyframe",
        "sweep",
        str(SOURCE),
        "-k",
        "matmul_naive",
        "-k",
        "matmul_tiled",
    ]
    cmd += ["-p", f"N={values}", "-p", f"M={values}", "-p", f"K={args.K}"]
    cmd += ["--shape", "a=N,K", "--shape", "b=K,M", "--shape", "res=N,M", "--flop", "2*N*M*K"]
    cmd += ["--power", power, "--trials", str(trials), "--devices", devices, "--out", str(out)]
    t0 = time.monotonic()
    subprocess.run(cmd, check=True)
    return time.monotonic() - t0


def compare_devices(args, sizes) -> None:
    """One GPU against several in parallel: wall time ratio and per-configuration agreement."""
    from energyframe.sweeps.results import SweepResult

    first = args.devices.split(",")[0]
    _cli_sweep(args, [64], first, args.out / "warm", "none", 1)  # fill the compile cache
    one_s = _cli_sweep(args, sizes, first, args.out / "one", "nvml", args.trials)
    many_s = _cli_sweep(args, sizes, args.devices, args.out / "many", "nvml", args.trials)
    one = {r.index: r for r in SweepResult.load(args.out / "one").results}
    many = SweepResult.load(args.out / "many")
    rows, worst_t, worst_e = [], 0.0, 0.0
    print(
        f"{'kernel':<14}{'N':>6}{'M':>6}{'GPU':>5}{'1-GPU ms':>10}{'N-GPU ms':>10}{'Δt %':>7}{'1-GPU mJ':>10}{'N-GPU mJ':>10}{'ΔE %':>7}"
    )
    for r in many.results:
        base = one[r.index]
        dt = 100 * (r.latency_s / base.latency_s - 1)
        de = 100 * (r.energy_j / base.energy_j - 1)
        worst_t, worst_e = max(worst_t, abs(dt)), max(worst_e, abs(de))
        rows.append(
            {
                "kernel": r.kernel,
                **r.parameters,
                "device": r.device,
                "one_gpu_latency_s": base.latency_s,
                "n_gpu_latency_s": r.latency_s,
                "latency_diff_pct": dt,
                "one_gpu_energy_j": base.energy_j,
                "n_gpu_energy_j": r.energy_j,
                "energy_diff_pct": de,
            }
        )
        print(
            f"{r.kernel:<14}{r.parameters['N']:>6}{r.parameters['M']:>6}{r.device:>5}{base.latency_s * 1e3:>10.4f}"
            f"{r.latency_s * 1e3:>10.4f}{dt:>7.2f}{base.energy_j * 1e3:>10.3f}{r.energy_j * 1e3:>10.3f}{de:>7.2f}"
        )
    summary = {
        "devices": args.devices,
        "gpus": {label: info.get("name") for label, info in (many.meta.get("devices") or {}).items()},
        "warnings": many.meta.get("warnings"),
        "configurations": len(rows),
        "one_gpu_wall_s": one_s,
        "n_gpu_wall_s": many_s,
        "wall_ratio": many_s / one_s,
        "max_abs_latency_diff_pct": worst_t,
        "max_abs_energy_diff_pct": worst_e,
        "latency_within_2pct": sum(abs(r["latency_diff_pct"]) <= 2 for r in rows),
        "energy_within_2pct": sum(abs(r["energy_diff_pct"]) <= 2 for r in rows),
    }
    print(json.dumps(summary, indent=1))
    (args.out / "devices.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


def _configs(kernels, sizes, k):
    from energyframe.sweeps.space import expand
    from energyframe.sweeps.workload import plan

    return plan(kernels, expand({"N": sizes, "M": sizes, "K": [k]}))


if __name__ == "__main__":
    main()
