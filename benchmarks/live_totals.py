"""The live exporter's totals against the run's own samples, on real hardware.

A run (an idle baseline, then a GPU load) is measured with a ``PowerTracker`` listening and its
Prometheus exporter serving on 127.0.0.1; at the end, for every power and energy channel, the
tracker's energy since the start is compared with the same channel's samples as the run saved
them (a counter's increments, or the trapezoid integral of power), and the exporter is scraped
once to check it serves what the tracker holds. On a sound source no reading is refused
(``ahead``, ``late``) and no counter interval is skipped (``resets``), and the totals agree to
the samples the tracker saw before the run stopped its sources.

    python benchmarks/live_totals.py OUT_DIR                       # nvml, matmul 8192^3 fp16
    python benchmarks/live_totals.py OUT_DIR --power replay:file=p.csv,scope=gpu,prefix=gpu0. \\
        --workload sleep:seconds=0.5                                  # a CPU machine

Writes OUT_DIR/live_totals.json and OUT_DIR/live_totals.csv, and the run in OUT_DIR/run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd


def run_integral(samples: pd.DataFrame, channel: str, quantity: str) -> tuple[float, int]:
    """A channel's energy over every sample the run saved, as the tracker counts it: a counter's
    increments (a decrease skipped), or the trapezoid of power. Units: J; and the sample count."""
    rows = samples[samples["channel"] == channel].sort_values("time_s", kind="stable")
    t = rows["time_s"].to_numpy(float)
    v = rows["value"].to_numpy(float)
    ok = np.isfinite(t) & np.isfinite(v) & (v >= 0)
    t, v = t[ok], v[ok]
    if t.size < 2:
        return 0.0, int(t.size)
    if quantity == "energy":
        steps = np.diff(v)
        return float(steps[(steps >= 0) & (np.diff(t) > 0)].sum()), int(t.size)
    dt = np.diff(t)
    return float(np.sum(0.5 * (v[1:] + v[:-1]) * dt)), int(t.size)


def scrape(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        s.labels["channel"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "energyframe_energy_joules"
        for s in family.samples
        if s.name.endswith("_total")
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the table and the run")
    parser.add_argument("--power", default="nvml", help="power source spec (default: nvml)")
    parser.add_argument("--workload", default="matmul:M=8192,K=8192,N=8192", help="workload spec")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--idle", type=float, default=3.0, help="idle baseline first. Units: s")
    args = parser.parse_args(argv)

    import energyframe as ef
    from energyframe.live.prometheus import PrometheusExporter
    from energyframe.live.tracker import PowerTracker

    args.out.mkdir(parents=True, exist_ok=True)
    tracker = PowerTracker()
    exporter = PrometheusExporter(tracker, 0).start()
    try:
        result = ef.run(
            args.workload,
            power=[args.power],
            reporters=[],
            out=args.out / "run",
            settings=ef.RunSettings(trials=args.trials, idle_s=args.idle, warmup_s=1.0, min_window_s=1.0),
            listeners=[tracker],
        )
        served = scrape(exporter.url)
    finally:
        exporter.stop()
    channels = {c["name"]: c for s in result.meta["sources"] for c in s["channels"]}
    rows = []
    for r in tracker.readings():
        quantity = channels.get(r.channel, {}).get("quantity", "power")
        saved_j, saved_n = run_integral(result.samples, r.channel, quantity)
        diff_pct = 100.0 * (r.energy_j - saved_j) / saved_j if saved_j else math.nan
        rows.append({
            "channel": r.channel,
            "quantity": quantity,
            "primary": r.primary,
            "live_energy_j": r.energy_j,
            "served_energy_j": served.get(r.channel, math.nan),
            "run_samples_energy_j": saved_j,
            "diff_pct": diff_pct,
            "live_samples": r.samples,
            "run_samples": saved_n,
            "refused_ahead": r.refused.get("ahead", 0),
            "refused_late": r.refused.get("late", 0),
            "resets": r.resets,
            "power_w_last_second": r.power_w,
        })
    table = pd.DataFrame(rows)
    table.to_csv(args.out / "live_totals.csv", index=False)
    (args.out / "live_totals.json").write_text(json.dumps(
        {"power": args.power, "workload": args.workload, "status": result.status, "channels": rows},
        indent=2, default=float,
    ))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
