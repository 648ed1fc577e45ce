"""Where a per-layer run's time goes, and which settings make it fast and still close.

Each configuration runs as its own process (``python -m energyframe run ... --per-layer``), so
its wall time is what a user waits for (process start to saved run) and a configuration that
fails (a CUDA error, memory) does not stop the others. Per configuration it prints:

- wall time around the process, and run.json's ``timings_s.process`` (process start to saved run);
- run.json's ``timings_s`` breakdown (sources_start, setup, phase_setup, idle_baseline, warmup,
  calibration, windows, between_windows, stop_sources, integrate, save, ...) and the per-layer
  wrapper's own preparation times (build_model, decompose, capture, probe, profile);
- median and max per-unit energy CV over trials (the figure of merit: <= 1 % for the median unit),
  and the median bias of each unit's first and last window against its other windows (a window
  that opens or closes on a load step reads wrong, docs/validation.md "Transient");
- with validate: Σ units against the whole model (latency and energy, %), the same with the
  measured launch gaps added, and the residual's cause.

On a GPU (about 7 minutes on one H100; ``--budget-s`` skips what would not fit)::

    python benchmarks/perlayer_speed.py --json perlayer_speed.json
    python benchmarks/perlayer_speed.py --only speed          # or closure, defaults, or ids: old,auto-0.1
    python benchmarks/perlayer_speed.py --list

A dry run of the machinery on the CPU (tiny model, timing only): ``--smoke``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

#: the timings_s keys in the order a run spends them
TIMING_KEYS = (
    "before_run",
    "sources_start",
    "setup",
    "idle_baseline",
    "phase_setup",
    "warmup",
    "calibration",
    "windows",
    "between_windows",
    "guard",
    "teardown",
    "stop_sources",
    "integrate",
    "save",
    "other",
)


@dataclass(frozen=True)
class Config:
    """One run: an id, its group, the model spec (per-layer options included), CLI flags, and a
    rough time on an H100 (to keep within the budget)."""

    id: str
    group: str
    spec: str
    flags: tuple[str, ...] = ()
    validate: bool = False
    estimate_s: float = 30.0
    what: str = ""


FAST = "window_s=0.1,prepare=ahead"
CONFIGS = (
    # in order of importance: what the budget skips is at the end
    Config(
        "old",
        "speed",
        "resnet50:batch=1",
        (),
        False,
        70,
        "the defaults today: calibrated 0.2-s windows, idle 2 s",
    ),
    Config(
        "capture-0.1-ahead",
        "speed",
        f"resnet50:batch=1,{FAST}",
        ("--idle", "1"),
        False,
        35,
        "and every unit captured before the first window",
    ),
    Config(
        "auto-0.1",
        "speed",
        f"resnet50:batch=1,granularity=auto,{FAST}",
        ("--idle", "1"),
        False,
        15,
        "granularity chosen from the model (blocks at batch 1)",
    ),
    Config(
        "closure-r50-b1-auto",
        "closure",
        f"resnet50:batch=1,granularity=auto,kernel_gaps=true,{FAST}",
        ("--idle", "1"),
        True,
        18,
    ),
    Config(
        "closure-r50-b64-auto",
        "closure",
        f"resnet50:batch=64,granularity=auto,kernel_gaps=true,{FAST}",
        ("--idle", "1"),
        True,
        22,
    ),
    Config(
        "closure-vit-b1-auto",
        "closure",
        f"vit_b_16:batch=1,granularity=auto,kernel_gaps=true,{FAST}",
        ("--idle", "1"),
        True,
        15,
    ),
    Config(
        "closure-vit-b64-auto",
        "closure",
        f"vit_b_16:batch=64,granularity=auto,kernel_gaps=true,{FAST}",
        ("--idle", "1"),
        True,
        18,
    ),
    Config(
        "closure-mnv3-b1-auto",
        "closure",
        f"mobilenet_v3_small:batch=1,granularity=auto,kernel_gaps=true,{FAST}",
        ("--idle", "1"),
        True,
        18,
    ),
    Config(
        "closure-mnv3-b64-auto",
        "closure",
        f"mobilenet_v3_small:batch=64,granularity=auto,kernel_gaps=true,{FAST}",
        ("--idle", "1"),
        True,
        18,
    ),
    Config(
        "closure-r50-b1-leaf",
        "closure",
        f"resnet50:batch=1,kernel_gaps=true,{FAST}",
        ("--idle", "1"),
        True,
        40,
        "leaf units: how much of the gap the launch gaps explain",
    ),
    Config(
        "capture-0.1-ahead-lead",
        "speed",
        f"resnet50:batch=1,{FAST},lead_s=0.05",
        ("--idle", "1"),
        False,
        38,
        "and 50 ms of each unit before its first window",
    ),
    Config(
        "capture-0.05-ahead",
        "speed",
        "resnet50:batch=1,window_s=0.05,prepare=ahead",
        ("--idle", "1"),
        False,
        25,
        "half-length windows",
    ),
    Config(
        "minwin-0.1",
        "speed",
        "resnet50:batch=1",
        ("--min-window", "0.1", "--idle", "1"),
        False,
        45,
        "only shorter windows: the run still calibrates each unit",
    ),
    Config(
        "capture-0.1",
        "speed",
        "resnet50:batch=1,window_s=0.1",
        ("--idle", "1"),
        False,
        35,
        "windows counted from the capture timing, captured one by one",
    ),
    Config(
        "closure-r50-b1-leaf-act",
        "closure",
        f"resnet50:batch=1,kernel_gaps=true,activations=rotate,{FAST}",
        ("--idle", "1"),
        True,
        40,
        "leaf units reading rotated input copies",
    ),
)
#: as a user gets it: the README's per-layer command, and closure with nothing but --validate
#: (granularity=auto, calibrated windows, idle 2 s)
DEFAULTS = (
    Config("default-r50", "defaults", "resnet50:batch=1", (), False, 35, "the README's per-layer command"),
) + tuple(
    Config(
        f"default-{short}-b{batch}",
        "defaults",
        f"{model}:batch={batch},kernel_gaps=true",
        (),
        True,
        35,
        "the shipped defaults",
    )
    for model, short in (("resnet50", "r50"), ("vit_b_16", "vit"), ("mobilenet_v3_small", "mnv3"))
    for batch in (1, 64)
)
CONFIGS = CONFIGS + DEFAULTS
#: the CPU dry run: the same paths (calibrated, timed at capture ahead, auto, closure) on a tiny input
_TINY = "resnet18:image_size=32,unroll=2,whole_unroll=1,device=cpu"
_TINY_FLAGS = ("--trials", "2", "--min-window", "0.01", "--idle", "0")
SMOKE = (
    Config("smoke-old", "smoke", _TINY, _TINY_FLAGS, False, 60),
    Config(
        "smoke-fast", "smoke", f"{_TINY},window_s=0.01,prepare=ahead,granularity=auto", _TINY_FLAGS, False, 60
    ),
    Config(
        "smoke-closure",
        "smoke",
        f"{_TINY},window_s=0.01,kernel_gaps=true,lead_s=0.005",
        _TINY_FLAGS,
        True,
        60,
    ),
)


@dataclass
class Outcome:
    """What one configuration gave (``error`` when it did not finish)."""

    config: Config
    wall_s: float = math.nan
    row: dict = field(default_factory=dict)
    error: str | None = None


def command(config: Config, power: str, out: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "energyframe",
        "-q",
        "run",
        "--power",
        power,
        "--workload",
        config.spec,
        "--per-layer",
        "--out",
        str(out),
        *config.flags,
    ]
    if config.validate:
        cmd.append("--validate")
    return cmd


def _table(run: dict, name: str) -> dict | None:
    return next((t for t in run.get("derived", []) if t.get("name") == name), None)


def _finite(values) -> list[float]:
    return [float(v) for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]


def window_edges(run_dir: Path) -> dict:
    """Median over units of the first and of the last window's energy per call against the
    unit's other windows (%), from windows.csv on the first primary channel."""
    path = run_dir / "windows.csv"
    if not path.exists():
        return {}
    import pandas as pd

    frame = pd.read_csv(path)
    if frame.empty:
        return {}
    out = {"window_s_median": float(frame.drop_duplicates(["phase", "trial"])["duration_s"].median())}
    frame = frame[frame["energy_per_iter_j"].notna()]
    if frame.empty:
        return out
    frame = frame[frame["channel"] == frame["channel"].iloc[0]]
    first, last = [], []
    for _phase, windows in frame.groupby("phase"):
        e = windows.sort_values("trial")["energy_per_iter_j"].tolist()
        if len(e) < 3:
            continue
        first.append(100 * (e[0] / median(e[1:]) - 1))
        last.append(100 * (e[-1] / median(e[:-1]) - 1))
    out["first_window_bias_pct"] = median(first) if first else math.nan
    out["last_window_bias_pct"] = median(last) if last else math.nan
    return out


def summarize(run_dir: Path) -> dict:
    """One row of the benchmark's table from a saved run directory."""
    run = json.loads((run_dir / "run.json").read_text())
    timings = run.get("timings_s") or {}
    info = (run.get("workload") or {}).get("info") or {}
    row: dict = {
        "status": run.get("status"),
        "reason": run.get("reason"),
        "process_s": timings.get("process"),
        "timings_s": {k: timings.get(k) for k in TIMING_KEYS if timings.get(k) is not None},
        "prepare_timings_s": info.get("prepare_timings_s", {}),
        "gpu": info.get("gpu") or info.get("device"),
    }
    layers, summary, closure = _table(run, "layers"), _table(run, "summary"), _table(run, "closure")
    if layers:
        cvs = _finite(r.get("energy_cv_pct") for r in layers["rows"])
        row["units"] = len(layers["rows"])
        row["median_energy_cv_pct"] = median(cvs) if cvs else math.nan
        row["max_energy_cv_pct"] = max(cvs) if cvs else math.nan
        row["eager_units"] = sum(1 for r in layers["rows"] if r.get("execution") != "cuda graph")
        row["capture_s_median"] = median(_finite(r.get("capture_s") for r in layers["rows"]) or [math.nan])
    if summary:
        s = summary["rows"][0]
        for key in (
            "granularity",
            "granularity_choice",
            "latency_diff_pct",
            "energy_diff_pct",
            "kernel_gap_s",
            "gap_corrected_latency_diff_pct",
            "gap_corrected_energy_diff_pct",
            "residual_cause",
            "whole_latency_s",
            "sum_latency_s",
        ):
            if key in s:
                row[key] = s[key]
    if closure:
        row["closure"] = closure["rows"]
    row.update(window_edges(run_dir))
    return row


def run_config(config: Config, power: str, out: Path, timeout_s: float) -> Outcome:
    run_dir = out / config.id
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(config)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            command(config, power, run_dir),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=os.environ.copy(),
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            outcome.error = f"exit {proc.returncode}: " + " | ".join(tail)
    except subprocess.TimeoutExpired:
        outcome.error = f"timed out after {timeout_s:.0f} s"
    outcome.wall_s = time.monotonic() - t0
    if (run_dir / "run.json").exists():
        try:
            outcome.row = summarize(run_dir)
        except Exception as e:  # a half-written run must not stop the table
            outcome.error = (outcome.error or "") + f" (run.json unreadable: {type(e).__name__}: {e})"
    return outcome


def _f(value, spec: str = ".3g", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def print_tables(outcomes: list[Outcome]) -> None:
    print("\n## Wall time, repeatability and closure\n")
    print(
        "| config | wall s | process s | units | granularity | window s | CV med / max % | first / last "
        "window bias % | Σ vs whole lat / energy % | with gaps lat / energy % | gap µs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for o in outcomes:
        r = o.row
        if o.error and not r:
            print(f"| {o.config.id} | {_f(o.wall_s, '.1f')} | FAILED: {o.error[:160]} |||||||||")
            continue
        gap = r.get("kernel_gap_s")
        print(
            f"| {o.config.id} | {_f(o.wall_s, '.1f')} | {_f(r.get('process_s'), '.1f')} | {r.get('units', '-')} | "
            f"{r.get('granularity', '-')} | {_f(r.get('window_s_median'), '.3f')} | "
            f"{_f(r.get('median_energy_cv_pct'), '.2f')} / {_f(r.get('max_energy_cv_pct'), '.2f')} | "
            f"{_f(r.get('first_window_bias_pct'), '+.2f')} / {_f(r.get('last_window_bias_pct'), '+.2f')} | "
            f"{_f(r.get('latency_diff_pct'), '+.1f')} / {_f(r.get('energy_diff_pct'), '+.1f')} | "
            f"{_f(r.get('gap_corrected_latency_diff_pct'), '+.1f')} / "
            f"{_f(r.get('gap_corrected_energy_diff_pct'), '+.1f')} | "
            f"{_f(gap * 1e6 if isinstance(gap, (int, float)) else None, '.2f')} |"
            + (f" ({o.error[:80]})" if o.error else "")
        )
    print(
        "\n## Where the time goes (run.json timings_s; prepare: the per-layer wrapper's own, inside setup "
        "and phase_setup)\n"
    )
    keys = [k for k in TIMING_KEYS if any(k in o.row.get("timings_s", {}) for o in outcomes)]
    prep = sorted({k for o in outcomes for k in o.row.get("prepare_timings_s", {})})
    print("| config | " + " | ".join(keys + [f"prepare:{k}" for k in prep]) + " |")
    print("|---" * (1 + len(keys) + len(prep)) + "|")
    for o in outcomes:
        t, p = o.row.get("timings_s", {}), o.row.get("prepare_timings_s", {})
        print(
            f"| {o.config.id} | "
            + " | ".join([_f(t.get(k), ".2f") for k in keys] + [_f(p.get(k), ".2f") for k in prep])
            + " |"
        )
    print("\n## Residual causes\n")
    for o in outcomes:
        if o.row.get("residual_cause") or o.row.get("granularity_choice"):
            print(
                f"- {o.config.id}: {o.row.get('granularity_choice', '')}; residual: {o.row.get('residual_cause', '-')}"
            )


def select(only: str | None, smoke: bool) -> list[Config]:
    pool = SMOKE if smoke else CONFIGS
    if not only:
        return list(pool)
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    known = {c.id for c in pool} | {c.group for c in pool}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"unknown config or group {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return [c for c in pool if c.id in wanted or c.group in wanted]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated config ids or groups (speed, closure, defaults)")
    ap.add_argument("--power", default="nvml:gpus=0", help="power spec ('none': timing only)")
    ap.add_argument("--out", default="runs/perlayer_speed", help="where the runs are saved")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--budget-s", type=float, default=470.0, help="skip configs that would not fit")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU configs, timing only (a dry run)")
    ap.add_argument("--list", action="store_true", help="list the configs and exit")
    args = ap.parse_args()
    configs = select(args.only, args.smoke)
    if args.list:
        for c in configs:
            print(
                f"{c.id:26s} {c.group:8s} ~{c.estimate_s:3.0f} s  {c.spec}  {' '.join(c.flags)}"
                f"{' --validate' if c.validate else ''}  {c.what}"
            )
        return 0
    power = "none" if args.smoke else args.power
    started = time.monotonic()
    outcomes: list[Outcome] = []
    skipped = []
    for config in configs:
        left = args.budget_s - (time.monotonic() - started)
        if config.estimate_s > left:
            skipped.append(config.id)
            continue
        o = run_config(config, power, Path(args.out), timeout_s=max(30.0, min(left, 3 * config.estimate_s)))
        outcomes.append(o)
        r = o.row
        print(
            f"{config.id}: {o.wall_s:.1f} s wall, process {_f(r.get('process_s'), '.1f')} s, CV med "
            f"{_f(r.get('median_energy_cv_pct'), '.2f')} %, closure {_f(r.get('latency_diff_pct'), '+.1f')} / "
            f"{_f(r.get('energy_diff_pct'), '+.1f')} %" + (f"  [{o.error}]" if o.error else ""),
            flush=True,
        )
    print_tables(outcomes)
    if skipped:
        print(f"\nskipped (budget {args.budget_s:g} s): {', '.join(skipped)}")
    device = next((o.row.get("gpu") for o in outcomes if o.row.get("gpu")), "unknown")
    print(f"\n{device}, {time.strftime('%Y-%m-%d')}, power {power}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "device": device,
                    "date": time.strftime("%Y-%m-%d"),
                    "power": power,
                    "skipped": skipped,
                    "configs": [
                        {
                            "id": o.config.id,
                            "spec": o.config.spec,
                            "flags": list(o.config.flags),
                            "validate": o.config.validate,
                            "wall_s": o.wall_s,
                            "error": o.error,
                            **o.row,
                        }
                        for o in outcomes
                    ],
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
