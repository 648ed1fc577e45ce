"""Every power reading of a GPU against a square-wave load (0.5 s on, 0.5 s off).

Plots the power the counter implies between ticks, instant power (field 186), the 1-s average
(185), the 20-ms sample buffer and nvidia-smi's readings on one time axis, shades the "on"
windows, estimates by cross-correlation how far the 1-s average lags the 20-ms buffer, and
prints each method's energy for the on and off windows.

Run on a GPU: ``python benchmarks/transient.py --png docs/img/transient.png [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_load import gemm_step, run_for  # noqa: E402

import energyframe as ef  # noqa: E402
from energyframe.power.nvidia_smi import NvidiaSmiPowerSource  # noqa: E402
from energyframe.power.nvml import NVMLPowerSource  # noqa: E402

SERIES = [
    ("gpu0.power_samples", "NVML 20-ms sample buffer", "tab:blue"),
    ("gpu0.power_instant", "NVML instant (186)", "tab:green"),
    ("gpu0.power_average", "NVML 1-s average (185)", "tab:red"),
    ("smi.gpu0", "nvidia-smi power.draw.instant", "tab:purple"),
    ("smi.gpu0.power_average", "nvidia-smi power.draw.average", "tab:brown"),
]


def lag_s(t_ref, v_ref, t_other, v_other, step=0.01, max_lag=2.0) -> float:
    """Shift of ``other`` behind ``ref`` that maximises their correlation. Units: s."""
    grid = np.arange(max(t_ref[0], t_other[0]), min(t_ref[-1], t_other[-1]), step)
    a = np.interp(grid, t_ref, v_ref)
    b = np.interp(grid, t_other, v_other)
    a, b = a - a.mean(), b - b.mean()
    lags = np.arange(0, int(max_lag / step))
    scores = [np.dot(a[: len(a) - k], b[k:]) for k in lags]
    return float(lags[int(np.argmax(scores))] * step)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--png", default="transient.png")
    ap.add_argument("--json")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    step, sync = gemm_step()
    run_for(step, sync, 1.0)
    sources = [
        NVMLPowerSource(name="nvml", gpus="0"),
        NvidiaSmiPowerSource(name="nvidia-smi", gpus="0", prefix="smi."),
    ]
    with ef.measure(power=sources, sync=sync) as m:
        time.sleep(1.5)
        for _ in range(args.cycles):
            with m.window("on") as w:
                w.iterations = run_for(step, sync, 0.5, batch=4)
            with m.window("off"):
                time.sleep(0.5)
        time.sleep(1.5)
    result = m.result
    s = result.samples
    t0 = s["time_s"].min()
    series = {name: s[s["channel"] == name].sort_values("time_s") for name, _, _ in SERIES}
    ticks = s[s["channel"] == "gpu0"].sort_values("time_s")
    tt, te = ticks["time_s"].to_numpy() - t0, ticks["value"].to_numpy()
    counter_power = np.diff(te) / np.diff(tt)

    fig, ax = plt.subplots(figsize=(12, 5))
    w = result.windows[result.windows["channel"] == "gpu0"]
    for row in w[w["phase"] == "on"].itertuples():
        ax.axvspan(row.start_s - t0, row.end_s - t0, color="0.9", zorder=0)
    ax.step(
        tt[1:],
        counter_power,
        where="pre",
        color="black",
        lw=1.8,
        label="energy counter, between ticks (100 ms)",
    )
    for name, label, colour in SERIES:
        d = series[name]
        if len(d):
            ax.plot(
                d["time_s"] - t0,
                d["value"],
                color=colour,
                lw=1.0,
                label=label,
                drawstyle="steps-post" if "smi" in name or "instant" in name else "default",
            )
    first, last = w["start_s"].min() - t0, w["end_s"].max() - t0
    ax.set_xlim(first - 1.0, last + 1.0)  # the sample buffer also holds 2.4 s from before the run
    ax.set_xlabel("time (s); shaded: GEMM load on")
    ax.set_ylabel("power (W)")
    device = torch.cuda.get_device_name(0)
    ax.set_title(f"{device}: power readings under a 0.5 s on / 0.5 s off load ({time.strftime('%Y-%m-%d')})")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=110)

    buf = series["gpu0.power_samples"]
    lags = {}
    for name in ("gpu0.power_average", "gpu0.power_instant", "smi.gpu0", "smi.gpu0.power_average"):
        d = series[name]
        if len(d) > 10 and len(buf) > 10:
            lags[name] = lag_s(
                buf["time_s"].to_numpy(),
                buf["value"].to_numpy(),
                d["time_s"].to_numpy(),
                d["value"].to_numpy(),
            )
    print(
        f"\ntransient on {device}, {time.strftime('%Y-%m-%d')}: {args.cycles} cycles of 0.5 s on / 0.5 s off"
    )
    print("lag behind the 20-ms sample buffer (cross-correlation):")
    for name, value in lags.items():
        print(f"  {name:28s} {value * 1e3:6.0f} ms")
    print("\nmean energy per window (J) by method; counter = reference:")
    table = {}
    for phase in ("on", "off"):
        rows = result.windows[result.windows["phase"] == phase]
        ref = rows[rows["channel"] == "gpu0"]["energy_j"].mean()
        line = f"  {phase:4s} counter {ref:8.1f}"
        table[phase] = {"gpu0": ref}
        for name, label, _ in SERIES:
            e = rows[rows["channel"] == name]["energy_j"].mean()
            table[phase][name] = e
            line += f" | {label.split('(')[0].strip()[:22]} {e:7.1f} ({100 * (e / ref - 1):+5.1f}%)"
        print(line)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"device": device, "date": time.strftime("%Y-%m-%d"), "lags_s": lags, "energy_j": table},
                indent=1,
            )
        )
    print(f"plot: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
