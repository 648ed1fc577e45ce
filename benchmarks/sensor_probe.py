"""Characterise this GPU's power sensors: how often each NVML reading changes, what its
timestamp means, how the driver's power-sample buffer is spaced, and what nvidia-smi reports.

Run on a GPU machine: ``python benchmarks/sensor_probe.py [--gpu 0] [--seconds 4] [--json OUT]``.
A bf16 GEMM load runs in a child process for the middle of the probe so that loaded and idle
behaviour are both seen. Prints a table; ``--json`` keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

LOAD_SCRIPT = """
import sys, time, torch
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
"""


def quantiles(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(p * (len(xs) - 1)))]  # noqa: E731
    return {"n": len(xs), "p10": q(0.1), "median": q(0.5), "p90": q(0.9), "min": xs[0], "max": xs[-1]}


def probe_fields(pynvml, handle, seconds: float, poll_s: float) -> dict:
    """Poll fields 83/186/185 and record value changes with poll times and field timestamps."""
    fields = [
        pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        pynvml.NVML_FI_DEV_POWER_INSTANT,
        pynvml.NVML_FI_DEV_POWER_AVERAGE,
    ]
    polls = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        w0 = time.time()
        vals = pynvml.nvmlDeviceGetFieldValues(handle, fields)
        w1 = time.time()
        polls.append(
            (
                w0,
                w1,
                [
                    (v.nvmlReturn, v.timestamp, v.latencyUsec, v.value.ullVal if i == 0 else v.value.uiVal)
                    for i, v in enumerate(vals)
                ],
            )
        )
        time.sleep(poll_s)
    out = {"polls": len(polls), "call_cost_us": quantiles([(p[1] - p[0]) * 1e6 for p in polls])}
    for i, name in enumerate(["energy_mJ", "power_instant_mW", "power_average_mW"]):
        rets = {p[2][i][0] for p in polls}
        changes, ts_minus_poll, ts_changes_without_value = [], [], 0
        prev = None
        for w0, w1, vals in polls:
            ret, ts, lat, value = vals[i]
            if ret != 0:
                continue
            ts_minus_poll.append(ts / 1e6 - (w0 + w1) / 2)
            if prev is not None:
                if value != prev[1]:
                    changes.append(((w0 + w1) / 2, ts / 1e6, value))
                elif ts != prev[0]:
                    ts_changes_without_value += 1
            prev = (ts, value)
        poll_gaps = [b[0] - a[0] for a, b in zip(changes, changes[1:])]
        ts_gaps = [b[1] - a[1] for a, b in zip(changes, changes[1:])]
        out[name] = {
            "returns": sorted(rets),
            "changes": len(changes),
            "change_period_by_poll_ms": quantiles([g * 1e3 for g in poll_gaps]),
            "change_period_by_field_ts_ms": quantiles([g * 1e3 for g in ts_gaps]),
            "field_ts_minus_poll_ms": quantiles([d * 1e3 for d in ts_minus_poll]),
            "field_ts_moved_while_value_constant": ts_changes_without_value,
        }
    return out


def probe_samples(pynvml, handle) -> dict:
    now = time.time()
    t0 = time.perf_counter()
    vtype, samples = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    cost = time.perf_counter() - t0
    ts = [s.timeStamp / 1e6 for s in samples]
    gaps = [(b - a) * 1e3 for a, b in zip(ts, ts[1:])]
    out = {
        "value_type": vtype,
        "count": len(samples),
        "call_cost_ms": cost * 1e3,
        "spacing_ms": quantiles(gaps),
        "newest_age_ms": (now - ts[-1]) * 1e3 if ts else None,
        "history_s": (ts[-1] - ts[0]) if ts else None,
        "first_values_mW": [s.sampleValue.uiVal for s in samples[-5:]],
    }
    time.sleep(0.3)
    try:
        _, newer = pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_TOTAL_POWER_SAMPLES, samples[-1].timeStamp)
        out["new_after_300ms"] = len(newer)
        out["new_all_newer"] = all(s.timeStamp > samples[-1].timeStamp for s in newer)
    except pynvml.NVMLError as e:  # NOT_FOUND when nothing is newer
        out["new_after_300ms_error"] = str(e)
    return out


def probe_misc(pynvml, handle) -> dict:
    out = {}
    for label, fn in [
        ("total_energy_call", lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)),
        ("power_usage_call", lambda: pynvml.nvmlDeviceGetPowerUsage(handle)),
        ("sm_clock_call", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        ("mem_clock_call", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
        ("temperature_call", lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
        ("clocks_event_reasons_call", lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
    ]:
        costs, value, err = [], None, None
        for _ in range(20):
            t0 = time.perf_counter()
            try:
                value = fn()
            except Exception as e:  # noqa: BLE001 - a probe reports whatever happens
                err = repr(e)
                break
            costs.append((time.perf_counter() - t0) * 1e6)
        out[label] = {"cost_us": quantiles(costs), "value": value, "error": err}
    try:
        out["mig_mode"] = pynvml.nvmlDeviceGetMigMode(handle)
    except Exception as e:  # noqa: BLE001
        out["mig_mode"] = repr(e)
    out["architecture"] = pynvml.nvmlDeviceGetArchitecture(handle)
    out["power_limit_mW"] = pynvml.nvmlDeviceGetPowerManagementLimit(handle)
    return out


def probe_smi(gpu: int, seconds: float) -> dict:
    fields = "timestamp,index,uuid,power.draw,power.draw.instant,power.draw.average,clocks.sm,clocks.mem,temperature.gpu,clocks_event_reasons.active"
    cmd = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,nounits", "-lms", "20", "-i", str(gpu)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, arrivals = [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        arrivals.append(time.time())
    proc.terminate()
    err = proc.communicate(timeout=5)[1]
    gaps = [(b - a) * 1e3 for a, b in zip(arrivals[1:], arrivals[2:])]
    return {
        "command": cmd,
        "lines": len(lines),
        "head": lines[:4],
        "tail": lines[-2:],
        "arrival_gap_ms": quantiles(gaps),
        "stderr": err[-500:],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--poll-ms", type=float, default=0.5)
    ap.add_argument("--json")
    args = ap.parse_args()

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    report = {
        "device": pynvml.nvmlDeviceGetName(handle),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "nvml_py": getattr(pynvml, "__version__", None),
        "wall_time": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
    report["misc"] = probe_misc(pynvml, handle)
    report["idle_fields"] = probe_fields(pynvml, handle, args.seconds / 2, args.poll_ms / 1e3)
    report["idle_samples"] = probe_samples(pynvml, handle)
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD_SCRIPT, str(args.seconds * 2 + 6)], stdout=subprocess.PIPE, text=True
    )
    load.stdout.readline()
    time.sleep(1.0)
    report["loaded_fields"] = probe_fields(pynvml, handle, args.seconds, args.poll_ms / 1e3)
    report["loaded_samples"] = probe_samples(pynvml, handle)
    report["loaded_smi"] = probe_smi(args.gpu, args.seconds)
    load.kill()
    load.wait()
    pynvml.nvmlShutdown()

    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
    print(f"{report['device']}  driver {report['driver']}  {report['wall_time']}")
    for phase in ("idle_fields", "loaded_fields"):
        r = report[phase]
        print(f"[{phase}] polls={r['polls']} call cost median {r['call_cost_us']['median']:.1f} us")
        for name in ("energy_mJ", "power_instant_mW", "power_average_mW"):
            x = r[name]
            print(
                f"  {name:17s} changes={x['changes']:4d} period(poll) med={x['change_period_by_poll_ms'].get('median')} "
                f"period(ts) med={x['change_period_by_field_ts_ms'].get('median')} "
                f"ts-poll med={x['field_ts_minus_poll_ms'].get('median')} p10={x['field_ts_minus_poll_ms'].get('p10')} "
                f"ts moved w/o value={x['field_ts_moved_while_value_constant']}"
            )
    for phase in ("idle_samples", "loaded_samples"):
        print(f"[{phase}]", json.dumps(report[phase], default=str))
    print("[misc]", json.dumps(report["misc"], default=str))
    print("[smi]", json.dumps(report["loaded_smi"], default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
