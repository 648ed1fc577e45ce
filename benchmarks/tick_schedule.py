"""The energy counter's tick stamps under each schedule of the nvml sampler: ``sampler=grid``
(the default: polls densely only around each expected tick) against ``sampler=dense`` (every
1 ms throughout), on a GPU or on the fake NVML of the tests.

The two schedules alternate (the sampler process, as a run samples) for ``--seconds`` each,
``--rounds`` times, at idle and, on a GPU, under a square wave of bf16 GEMMs (100 ms on, 200 ms
off: the load steps that make the field query block). Per load and schedule it prints:

- ticks and their stamps' distance from the counter's update grid fitted through their
  neighbours (``core/tickgrid.py``): |r| p50 / p95 / p99 / max in ms, the robust spread, and the
  ticks farther than 5 ms (they widen a window's bound) and 15 ms (flagged ``tick_off_grid``);
- with ``--fake``: each stamp's error against the true tick (the fake ticks every 100 ms);
- the brackets (how far apart the two polls around each tick read; a stamp lies within half);
- polls per tick (in all, and once on the grid), ticks stamped across a sleep (``early``) or a
  blocked poll (``wide``), the grid found / lost;
- the sampler process's CPU share while it sampled (run.json's ``acquisition.cpu_share``);
- instant power (field 186): the share of its changes stamped within 5 ms of a counter tick, and
  their brackets: whether it updates with the counter (then the grid schedule stamps it as tightly).

Run on a GPU (about 2.5 minutes): ``python benchmarks/tick_schedule.py --out $OUT``; without one:
``python benchmarks/tick_schedule.py --fake --out DIR`` (the fake's poll takes ``--fake-cost-ms``,
3 ms as NVML's field query on an H100). Raw data: ``OUT/tick_schedule.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = ("grid", "dense")


def use_fake(out: Path, cost_ms: float) -> dict:
    """Make ``import pynvml`` (here and in the sampler process) the tests' fake, ticking every
    100 ms from now."""
    scenario = {
        "t0_wall": time.time(),
        "gpus": [{"uuid": "GPU-52dfc441-e9da-23f3-17f9-2b876aae0d10", "name": "NVIDIA H200", "power_w": 300.0,
                  "field_cost_s": cost_ms / 1e3}],
    }
    path = out / "fake-nvml-scenario.json"
    path.write_text(json.dumps(scenario))
    fake = str(ROOT / "tests" / "fake_nvml")
    os.environ["FAKE_NVML_SCENARIO"] = str(path)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [fake, os.environ.get("PYTHONPATH", "")] if p)
    sys.path.insert(0, fake)
    return scenario


def square_wave(seconds: float, on_s: float = 0.1, off_s: float = 0.2) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_load import gemm_step, time_per_step

    step, sync = gemm_step()
    n = max(1, round(on_s / time_per_step(step, sync, 20)))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(n):
            step()
        sync()
        time.sleep(off_s)


def record(schedule: str, seconds: float, load) -> dict:
    from energyframe.plugin import SourceContext
    from energyframe.power.nvml import NVMLPowerSource

    source = NVMLPowerSource(name="nvml", gpus="0", sampler=schedule, channels="instant")
    source.start(SourceContext())
    samples = []
    try:
        load(seconds)
        samples += source.read()
    finally:
        source.stop()
    samples += source.read()
    info = dict(source.info())
    offset = time.time() - time.monotonic()
    ticks = sorted(s.time_s for s in samples if s.channel == "gpu0")
    instant = sorted((s.time_s, s.value) for s in samples if s.channel == "gpu0.power_instant")
    # its changes only (the base also repeats a steady value, and holds one before a change)
    changes = [t for (t, v), (_, before) in zip(instant[1:], instant) if v != before]
    return {"ticks_s": ticks, "instant_s": changes, "wall_offset_s": offset, "acquisition": info.get("acquisition")}


def summary(runs: list[dict], scenario: dict | None) -> dict:
    from energyframe.core.tickgrid import OFF_GRID_S, WIDEN_S, grid_residual_s, robust_sd

    r, err, brackets, near, shares, per_tick, on_grid = [], [], [], [], [], [], []
    early = wide = found = lost = 0
    for run in runs:
        t = np.array(run["ticks_s"])
        if t.size >= 11:
            r.append(grid_residual_s(t))
        if scenario is not None and t.size:
            since = t + run["wall_offset_s"] - scenario["t0_wall"]
            err.append(since - np.round(since / 0.1) * 0.1)
        inst = np.array(run["instant_s"])
        if t.size and inst.size:
            near.append(np.min(np.abs(inst[:, None] - t[None, :]), axis=1) <= 0.005)
        cost = run["acquisition"] or {}
        shares.append(cost.get("cpu_share"))
        b = (cost.get("tick_brackets_s") or {}).get("gpu0")
        if b:
            brackets.append(b)
        loop = (cost.get("loops") or {}).get("nvml-gpu0", {})
        if t.size:
            per_tick.append(loop.get("polls", 0) / t.size)
        if loop.get("polls_per_tick_on_grid") is not None:
            on_grid.append(loop["polls_per_tick_on_grid"])
        early += loop.get("early", 0)
        wide += loop.get("wide", 0)
        found += loop.get("grid_found", 0)
        lost += loop.get("grid_lost", 0)
    out: dict = {"runs": len(runs)}
    if r:
        a = np.abs(np.concatenate(r)) * 1e3
        out.update(
            ticks=int(a.size),
            residual_ms=[round(float(v), 2) for v in np.quantile(a, [0.5, 0.95, 0.99, 1.0])],
            spread_ms=round(1e3 * robust_sd(np.concatenate(r)), 2),
            widening=int((a > 1e3 * WIDEN_S).sum()),
            off_grid=int((a > 1e3 * OFF_GRID_S).sum()),
        )
    if err:
        e = np.abs(np.concatenate(err)) * 1e3
        out["error_ms"] = [round(float(v), 2) for v in np.quantile(e, [0.5, 0.95, 1.0])]
    if brackets:
        out["bracket_ms"] = [round(1e3 * float(np.median([b["median"] for b in brackets])), 2),
                             round(1e3 * max(b["p95"] for b in brackets), 2)]
    if near:
        out["instant_at_ticks"] = round(float(np.concatenate(near).mean()), 3)
    valid = [s for s in shares if s is not None]
    out["cpu_share"] = round(float(np.median(valid)), 4) if valid else None
    out["polls_per_tick"] = round(float(np.median(per_tick)), 2) if per_tick else None
    out["polls_per_tick_on_grid"] = round(float(np.median(on_grid)), 2) if on_grid else None
    out.update(early=early, wide=wide, grid_found=found, grid_lost=lost)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("tick-schedule"))
    ap.add_argument("--seconds", type=float, default=12.0, help="per schedule, load and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fake", action="store_true", help="the tests' fake NVML instead of a GPU (idle only)")
    ap.add_argument("--fake-cost-ms", type=float, default=3.0, help="how long the fake's field query takes")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    scenario = use_fake(args.out, args.fake_cost_ms) if args.fake else None
    loads = {"idle": time.sleep}
    if not args.fake:
        loads["square 100/200 ms"] = square_wave
    raw: dict = {}
    for load_name, load in loads.items():
        for k in range(args.rounds):
            for schedule in SCHEDULES if k % 2 == 0 else SCHEDULES[::-1]:
                run = record(schedule, args.seconds, load)
                raw.setdefault(load_name, {}).setdefault(schedule, []).append(run)
                print(f"{load_name} round {k} {schedule}: {len(run['ticks_s'])} ticks", flush=True)
    table = {load: {s: summary(runs, scenario) for s, runs in by.items()} for load, by in raw.items()}
    what = "the fake NVML" if args.fake else "GPU 0"
    print(f"\ntick stamps by schedule on {what}, {time.strftime('%Y-%m-%d')}: {args.rounds} x {args.seconds:g} s each")
    header = ("| load | schedule | ticks | |r| about the grid p50/p95/p99/max ms | spread ms | >5 ms | >15 ms |"
              " error vs truth p50/p95/max ms | bracket median/p95 ms | polls/tick (on grid) | early | wide |"
              " grid found/lost | sampler CPU | instant changes at ticks |")
    print(header)
    print("|" + "---|" * 15)
    for load, by in table.items():
        for schedule, s in by.items():
            print(
                f"| {load} | {schedule} | {s.get('ticks', 0)} | {' / '.join(map(str, s.get('residual_ms', [])))} | "
                f"{s.get('spread_ms', '-')} | {s.get('widening', '-')} | {s.get('off_grid', '-')} | "
                f"{' / '.join(map(str, s.get('error_ms', ['-'])))} | {' / '.join(map(str, s.get('bracket_ms', ['-'])))} | "
                f"{s['polls_per_tick']} ({s['polls_per_tick_on_grid']}) | {s['early']} | {s['wide']} | "
                f"{s['grid_found']}/{s['grid_lost']} | {s['cpu_share']} | {s.get('instant_at_ticks', '-')} |"
            )
    (args.out / "tick_schedule.json").write_text(json.dumps({"table": table, "raw": raw, "fake": scenario}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
