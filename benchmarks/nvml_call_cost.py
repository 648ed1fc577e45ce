"""What each NVML query the nvml source makes costs the host: wall time and CPU time per call.

The sampler's CPU share is its calls' cost times how often it makes them (kit/schedule.py,
power/nvml/poller.py): this benchmark measures the first factor per query, on the GPU that CUDA
sees first (``CUDA_VISIBLE_DEVICES`` honoured through the UUID), idle and under a steady bf16
GEMM load run by a child process. Per query: median and p95 wall time of one call, and the CPU
time it used (``time.thread_time``: a driver that spins while it waits counts here).

Run on a GPU (about 30 s): ``python benchmarks/nvml_call_cost.py --out $OUT/nvml_cost.json``.
Prints one table; ``--calls`` per query and load (default 200).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

LOAD = """
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
end = time.monotonic() + float(__import__("sys").argv[1])
while time.monotonic() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
"""


def handle(nvml):
    """The NVML handle of the GPU CUDA numbers 0 (by UUID when CUDA_VISIBLE_DEVICES names one)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith("GPU-"):
        return nvml.nvmlDeviceGetHandleByUUID(visible)
    return nvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)


def queries(nvml, h) -> dict[str, Callable[[], object]]:
    f = nvml
    last = {"us": 0}

    def samples():
        try:
            _, got = f.nvmlDeviceGetSamples(h, f.NVML_TOTAL_POWER_SAMPLES, last["us"])
        except getattr(f, "NVMLError_NotFound", f.NVMLError):
            return None
        if got:
            last["us"] = got[-1].timeStamp
        return got

    reasons = getattr(f, "nvmlDeviceGetCurrentClocksEventReasons", None) or f.nvmlDeviceGetCurrentClocksThrottleReasons
    energy, instant, average = (
        f.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        f.NVML_FI_DEV_POWER_INSTANT,
        f.NVML_FI_DEV_POWER_AVERAGE,
    )
    return {
        "fields [energy]": lambda: f.nvmlDeviceGetFieldValues(h, [energy]),
        "fields [instant]": lambda: f.nvmlDeviceGetFieldValues(h, [instant]),
        "fields [average]": lambda: f.nvmlDeviceGetFieldValues(h, [average]),
        "fields [instant, average]": lambda: f.nvmlDeviceGetFieldValues(h, [instant, average]),
        "fields [energy, instant, average]": lambda: f.nvmlDeviceGetFieldValues(h, [energy, instant, average]),
        "nvmlDeviceGetTotalEnergyConsumption": lambda: f.nvmlDeviceGetTotalEnergyConsumption(h),
        "nvmlDeviceGetPowerUsage": lambda: f.nvmlDeviceGetPowerUsage(h),
        "nvmlDeviceGetSamples (power buffer)": samples,
        "clock SM": lambda: f.nvmlDeviceGetClockInfo(h, f.NVML_CLOCK_SM),
        "clock memory": lambda: f.nvmlDeviceGetClockInfo(h, f.NVML_CLOCK_MEM),
        "temperature": lambda: f.nvmlDeviceGetTemperature(h, f.NVML_TEMPERATURE_GPU),
        "clock-event reasons": lambda: reasons(h),
    }


def measure(call: Callable[[], object], n: int, pause_s: float) -> dict:
    wall, cpu = [], []
    for _ in range(n):
        c0, w0 = time.thread_time(), time.perf_counter()
        call()
        w1, c1 = time.perf_counter(), time.thread_time()
        wall.append(w1 - w0)
        cpu.append(c1 - c0)
        time.sleep(pause_s)
    wall.sort()
    return {
        "calls": n,
        "wall_median_ms": 1e3 * statistics.median(wall),
        "wall_p95_ms": 1e3 * wall[int(0.95 * (n - 1))],
        "cpu_per_call_ms": 1e3 * sum(cpu) / n,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--pause-ms", type=float, default=2.0, help="pause between two calls")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    ap.add_argument("--no-load", action="store_true", help="idle only")
    args = ap.parse_args(argv)

    import pynvml as nvml

    nvml.nvmlInit()
    h = handle(nvml)
    name = nvml.nvmlDeviceGetName(h)
    results: dict[str, dict] = {}
    loads = ["idle"] if args.no_load else ["idle", "bf16 GEMM load"]
    for load in loads:
        child = None
        if load != "idle":
            child = subprocess.Popen([sys.executable, "-c", LOAD, "600"], stdout=subprocess.PIPE, text=True)
            assert child.stdout is not None
            child.stdout.readline()  # ready
            time.sleep(1.0)
        try:
            for label, call in queries(nvml, h).items():
                try:
                    results[f"{load} | {label}"] = measure(call, args.calls, args.pause_ms / 1e3)
                except Exception as e:  # a query this GPU or driver lacks: say so, measure the rest
                    results[f"{load} | {label}"] = {"error": f"{type(e).__name__}: {e}"}
        finally:
            if child is not None:
                child.kill()
                child.wait()
    nvml.nvmlShutdown()

    print(f"NVML query cost on {name}, {args.calls} calls each, {time.strftime('%Y-%m-%d')}")
    print("| load | query | wall median ms | wall p95 ms | CPU per call ms |")
    print("|---|---|---|---|---|")
    for key, r in results.items():
        load, label = key.split(" | ")
        if "error" in r:
            print(f"| {load} | {label} | {r['error']} | | |")
            continue
        print(f"| {load} | {label} | {r['wall_median_ms']:.3f} | {r['wall_p95_ms']:.3f} | {r['cpu_per_call_ms']:.3f} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"gpu": str(name), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
