"""Windows on load steps and in steady load: energyframe's default number, its bound, and Zeus,
side by side in one run.

The step family: square waves of work at the 700-W cap (bf16 GEMMs: on / off 50/100, 100/200,
200/300 and 500/500 ms), memory-bound (a large elementwise add, 100/200) and a partial load
(small GEMMs, 100/200). Each window is exactly one period and opens as the host launches the
burst's first kernel; a random idle gap of up to ``GAP_S`` ends each period so that the
counter's ticks fall at every phase of the cycle. Even periods are energyframe windows
(``m.window``), odd ones Zeus's (``ZeusMonitor.begin_window`` / ``end_window``); every burst is
also an inner energyframe window ``on``, which gives the cycle's edges.

A second truth for every configuration, the counter's own held-out ticks (``held_out_ticks.py``):
windows between hidden ticks, the default number computed from the ticks left. It needs no
model of the load, and it judges the bound on steady load, where the first truths are not
good enough at 200 ms. Beside the share inside the bound, the share inside it widened by the
hidden ticks' own stamp spread: where the two differ, the truth's noise is part of the misses.

The truth of a step window is the cycle truth (``cycle_truth.py``, docs/validation.md): the
counter between the ticks inside the window, plus the mean cycle profile's share of each edge's
tick interval. Beside it, for the windows whose edges both lie in settled idle, the idle truth
(``cycle_truth.idle_truth``): the counter between the ticks before the two edges, less the
idle power from the first tick to the start, plus it from the last tick to the end. It needs
no profile, so a burst that differs from the mean cycle does not move it; the cycle truth's
distance from it is printed too. The steady windows (200 ms and 1 s, ±10 %, inside
back-to-back GEMMs) have the truth of the steady power (the counter over the whole 20-40 s of
GEMMs) times their duration.

Per configuration: median / max |error| and bias of energyframe's default number (``gpu0``, the
estimator chosen per edge), of ``gpu0.fused`` and of the interpolated counter, and of Zeus; the
share of windows whose truth lies inside energyframe's stated bound (its random part), the
median bound over the median error, and the least that ratio could be for a bound of one size
per configuration that holds 95 % of its windows (their 95th percentile |error| over the median):
a bound below it on a row must know which of the row's windows will be off. Beside them, how far
each window's cycle truth moves when its profile is fitted on the other half of the cycles or
smoothed x4 and /4 (``cycle_truth.other_truths``): an error of that size is not resolved.

On one GPU (about 5 minutes; Zeus optional: ``pip install zeus==0.16.0``)::

    python benchmarks/step_family.py --out step-family.json --run-dir step-family-runs

Some configurations only, with three times the periods (a cycle truth from three times the
tick intervals; about 5 minutes for these three)::

    python benchmarks/step_family.py --only "200/300 ms cap,500/500 ms cap,100/200 ms partial" --scale 3 --out finer.json

The table again from a saved run (its JSON and run directories, moved under ``--run-root``),
with ``--recompute`` the default channel's windows computed again by this checkout's estimator::

    python benchmarks/step_family.py --analyse step-family.json --run-root step-family-runs --recompute --out again.json

On a CPU, the same table on the simulated family (``step_sim.py``; Zeus is its counter read at
the window's edges)::

    python benchmarks/step_family.py --simulate --out step-family-sim.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycle_truth import Segments, fit_profile, idle_truth, other_truths, window_truth  # noqa: E402
from held_out_ticks import bound_figures, held_out, held_out_stats, stamp_spread_ms  # noqa: E402
from run_data import counter_energy_of, from_result, gpu_info, load_run  # noqa: E402

from energyframe.core.clock import ClockModel  # noqa: E402
from energyframe.core.vocabulary import SHORT_WINDOW  # noqa: E402
from energyframe.model import split_flags  # noqa: E402
from energyframe.results.store import json_safe  # noqa: E402

#: a random idle gap of up to this ends each period, so the ticks see every phase. Units: s.
GAP_S = 0.05
#: windows of a steady load are this long ± 10 %, with random padding up to 0.1 s between
STEADY_S = (0.2, 1.0)
#: energyframe's default channel, its fused power, and the methods in the table
DEFAULT, FUSED, COUNTER, ZEUS = "energyframe gpu0 (default)", "gpu0.fused", "counter interpolated", "Zeus"
METHODS = (DEFAULT, FUSED, COUNTER, ZEUS)
#: the key, in ``analyse_steps``'s windows, of how far each window's cycle truth moves when its
#: profile is fitted otherwise (``cycle_truth.other_truths``). Units: J.
TRUTH_MOVES = "truth moves"
#: the key, in ``analyse_steps``'s windows, of each method's windows against the idle truth
#: (``cycle_truth.idle_truth``): per method, that truth. Units: J.
IDLE_TRUTH = "idle truth"


@dataclass(frozen=True)
class Config:
    """One square wave: ``on_s`` of ``work`` then ``off_s`` idle, ``periods`` times."""

    on_s: float
    off_s: float
    work: str
    periods: int

    @property
    def name(self) -> str:
        return f"{self.on_s * 1e3:.0f}/{self.off_s * 1e3:.0f} ms {self.work}"


FAMILY = (
    Config(0.05, 0.1, "cap", 160),
    Config(0.1, 0.2, "cap", 100),
    Config(0.2, 0.3, "cap", 60),
    Config(0.5, 0.5, "cap", 36),
    Config(0.1, 0.2, "memory", 80),
    Config(0.1, 0.2, "partial", 80),
)
STEADY_WINDOWS = {0.2: 60, 1.0: 30}


# -- the table --------------------------------------------------------------------------------


def method_stats(truth: np.ndarray, energy: np.ndarray) -> dict:
    """median / max |error| %, mean error % (bias), windows."""
    ok = np.isfinite(truth) & np.isfinite(energy) & (truth > 0)
    if not np.any(ok):
        return {"median_abs_pct": math.nan, "max_abs_pct": math.nan, "bias_pct": math.nan, "n": 0}
    e = 100.0 * (energy[ok] / truth[ok] - 1.0)
    return {
        "median_abs_pct": float(np.median(np.abs(e))),
        "max_abs_pct": float(np.max(np.abs(e))),
        "bias_pct": float(np.mean(e)),
        "n": int(e.size),
    }


def bound_stats(truth: np.ndarray, energy: np.ndarray, bound: np.ndarray) -> dict:
    """``held_out_ticks.bound_figures`` of the windows with a truth, and the median bound in %."""
    ok = np.isfinite(truth) & np.isfinite(energy) & np.isfinite(bound)
    if not np.any(ok):
        return {"coverage": math.nan, "ratio": math.nan, "least_ratio": math.nan, "rank_correlation": math.nan, "median_bound_pct": math.nan}
    return {
        **bound_figures(energy[ok] - truth[ok], bound[ok]),
        "median_bound_pct": float(np.median(100.0 * bound[ok] / truth[ok])),
    }


def truth_moves(truth: np.ndarray, energy: np.ndarray, moves: np.ndarray, judged: np.ndarray) -> dict:
    """How far the cycle truth of the judged windows moves when its profile is fitted otherwise
    (median / max %), how many of their errors are larger than their truth's own move, and the
    move of the truth of the window with the largest error."""
    ok = judged & np.isfinite(truth) & np.isfinite(energy) & np.isfinite(moves) & (truth > 0)
    if not np.any(ok):
        return {"median_pct": math.nan, "max_pct": math.nan, "beyond": 0, "n": 0, "worst_window_pct": math.nan}
    move = 100.0 * moves[ok] / truth[ok]
    error = 100.0 * np.abs(energy[ok] / truth[ok] - 1.0)
    return {
        "median_pct": float(np.median(move)),
        "max_pct": float(np.max(move)),
        "beyond": int(np.count_nonzero(error > move)),
        "n": int(ok.sum()),
        "worst_window_pct": float(move[np.argmax(error)]),
    }


def table_row(name: str, windows: dict) -> dict:
    """One configuration: ``windows`` holds, per method, (truth, energy) arrays, and for the
    default its bound and estimators."""
    row = {"config": name, "methods": {}}
    for method in METHODS:
        if method in windows:
            truth, energy = windows[method][:2]
            row["methods"][method] = method_stats(truth, energy)
    truth, energy, bound, estimators, flags = windows[DEFAULT]
    row["bound"] = bound_stats(truth, energy, bound)
    # windows flagged short_window (under two update periods with a step at an edge) are not
    # printed as confident; the targets judge the others
    short = np.array([SHORT_WINDOW in split_flags(f) for f in flags], dtype=bool)
    row["short_windows"] = int(short.sum())
    row["confident"] = method_stats(np.asarray(truth)[~short], np.asarray(energy)[~short])
    if TRUTH_MOVES in windows:
        row["truth_moves"] = truth_moves(np.asarray(truth), np.asarray(energy), windows[TRUTH_MOVES], ~short)
    if IDLE_TRUTH in windows:
        row["idle_truth"] = idle_row(windows, short)
    names, counts = np.unique(np.asarray(estimators, dtype=str), return_counts=True)
    row["estimators"] = {str(k): int(v) for k, v in zip(names, counts)}
    return row


def idle_row(windows: dict, short: np.ndarray) -> dict:
    """The default (its unflagged windows) and Zeus against the idle truth, the default's bound
    against it, and how far the cycle truth lies from it."""
    idle = windows[IDLE_TRUTH]
    truth, energy, bound = (np.asarray(x, dtype=float) for x in windows[DEFAULT][:3])
    mine = np.where(short, np.nan, idle[DEFAULT])
    out = {
        DEFAULT: method_stats(mine, energy),
        "bound": bound_stats(mine, energy, bound),
        "cycle_truth": method_stats(idle[DEFAULT], truth),
    }
    if ZEUS in windows and ZEUS in idle:
        out[ZEUS] = method_stats(idle[ZEUS], np.asarray(windows[ZEUS][1], dtype=float))
    return out


def print_table(rows: list[dict], title: str) -> None:
    print(
        f"\n{title}\nmedian / max |error| %, bias %; bound: windows inside it, median bound / median error, and"
        " the least that ratio can be for a bound of one size holding 95 % of the row (p95 / median |error|)"
    )
    header = (
        f"{'configuration':22s}" + "".join(f"{m:>30s}" for m in METHODS)
        + f"{'inside bound':>14s}{'ratio':>7s}{'least':>7s}{'short':>7s}{'max unflagged':>15s}"
    )
    print(header)
    for row in rows:
        cells = []
        for method in METHODS:
            s = row["methods"].get(method)
            if s is None or not s["n"]:
                cells.append(f"{'-':>30s}")
                continue
            cells.append(f"{s['median_abs_pct']:9.2f} /{s['max_abs_pct']:7.2f}, {s['bias_pct']:+6.2f}")
        b = row["bound"]
        confident = row.get("confident", {}).get("max_abs_pct", math.nan)
        print(
            f"{row['config']:22s}" + "".join(f"{c:>30s}" for c in cells)
            + f"{100 * b['coverage']:13.1f}%{b['ratio']:7.2f}{b.get('least_ratio', math.nan):7.2f}"
            + f"{row.get('short_windows', 0):7d}{confident:15.2f}"
        )
    for row in rows:
        if "gemm_truth" in row:
            g = row["gemm_truth"]
            print(
                f"{row['config']} against GEMM count x energy per GEMM of the reference window: default "
                f"{g[DEFAULT]['median_abs_pct']:.2f} / {g[DEFAULT]['max_abs_pct']:.2f} %, counter interpolated "
                f"{g[COUNTER]['median_abs_pct']:.2f} / {g[COUNTER]['max_abs_pct']:.2f} %"
            )
    moved = [r for r in rows if "truth_moves" in r]
    if moved:
        print(
            "\nhow far the cycle truth of the unflagged windows moves, fitted on the other half of the cycles or"
            " smoothed x4 and /4 (median / max %); the windows whose error is larger than their truth's move; and"
            " the move of the truth of the window with the largest error"
        )
        for r in moved:
            m = r["truth_moves"]
            print(
                f"{r['config']:22s}  {m['median_pct']:.2f} / {m['max_pct']:.2f} %, {m['beyond']} of {m['n']} beyond,"
                f" worst window's truth moves {m['worst_window_pct']:.2f} %"
            )
    idle = [r for r in rows if "idle_truth" in r]
    if idle:
        print(
            "\nagainst the idle truth (cycle_truth.idle_truth: windows whose edges lie in settled idle; the"
            " counter between the ticks before the edges, the idle power before each edge): median / max |error| %,"
            " bias %, windows; the default's unflagged windows inside its bound, the ratio, the least ratio, and how"
            " well the bound ranks their errors (rank correlation); and how far the cycle truth lies from it"
        )
        for r in idle:
            i = r["idle_truth"]
            cells = []
            for name in (DEFAULT, ZEUS):
                m = i.get(name)
                cells.append(
                    f"{name} {m['median_abs_pct']:.2f} / {m['max_abs_pct']:.2f}, {m['bias_pct']:+.2f} ({m['n']})" if m and m["n"] else f"{name} -"
                )
            b, c = i["bound"], i["cycle_truth"]
            print(
                f"{r['config']:22s}  " + "  |  ".join(cells)
                + f"  |  inside {100 * b['coverage']:.1f} %, ratio {b['ratio']:.2f}, least {b['least_ratio']:.2f},"
                f" ranks {b.get('rank_correlation', math.nan):+.2f}  |  cycle truth {c['median_abs_pct']:.2f} / {c['max_abs_pct']:.2f}"
            )
    print("estimators of the default:", "; ".join(f"{r['config']}: {r['estimators']}" for r in rows))
    held = [r for r in rows if "held_out" in r]
    if held:
        print(
            "\nthe default against held-out ticks (held_out_ticks.py: every other tick hidden, windows between"
            " hidden ticks; median / max |error| %, inside bound %, inside it widened by the truth's own stamps %, ratio,"
            " least ratio, rank correlation of bound and error), and the ticks' distance from the counter's update grid (robust sd; p95 / p99 / max, ms)"
        )
        for r in held:
            cells = []
            for span, s in r["held_out"].items():
                if not s.get("n"):
                    cells.append(f"{span}: -")
                    continue
                cells.append(
                    f"{span}: {s['median_abs_pct']:.2f} / {s['max_abs_pct']:.2f}, {100 * s['coverage']:.1f} %"
                    f" ({100 * s.get('coverage_with_truth_stamps', math.nan):.1f} %), {s['ratio']:.2f},"
                    f" {s.get('least_ratio', math.nan):.2f}, {s.get('rank_correlation', math.nan):+.2f}"
                )
            st = r["stamps_ms"]
            print(f"{r['config']:22s}  " + "  |  ".join(cells) + f"  |  stamps sd {st.get('sd', math.nan):.2f}, {st['p95']:.1f} / {st['p99']:.1f} / {st['max']:.1f}")


# -- the simulation (CPU) ---------------------------------------------------------------------


def held_counter(ticks_true: np.ndarray, counter: np.ndarray, t: float) -> float:
    """What a read of the counter at ``t`` returns: the value of the last tick before it."""
    return float(counter[max(int(np.searchsorted(ticks_true, t, side="right")) - 1, 0)])


def simulated(load, seed: int) -> dict:
    """Every method on every window of a simulated load (Zeus: the counter read at the edges)."""
    import step_sim

    from energyframe.core.clock import ClockPair
    from energyframe.core.edge import Evidence
    from energyframe.core.fusion import fused_channels
    from energyframe.core.windows import compute_windows

    channels, series = step_sim.read(load.trace, np.random.default_rng(seed))
    results: dict = {}
    channels, series = fused_channels(channels, series, results=results)
    evidence = {n: Evidence.of(r) for n, r in results.items()}
    frame = compute_windows(load.records, channels, series, ClockModel(ClockPair(0.0, 0.0, 0.0)), evidence=evidence)
    truth = np.array([float(load.trace.window_j(r.start_s, r.end_s)) for r in load.records])
    gpu, fused = frame[frame["channel"] == "gpu0"], frame[frame["channel"] == "gpu0.fused"]
    counter = counter_energy_of(series["gpu0"])
    # what a read returns: the stamps are the poller's, the values change at the true ticks
    ticks = series["gpu0"].times_s
    zeus = [
        held_counter(ticks, series["gpu0"].values, r.end_s) - held_counter(ticks, series["gpu0"].values, r.start_s)
        for r in load.records
    ]
    return {
        DEFAULT: (truth, gpu["energy_j"].to_numpy(float), gpu["energy_random_j"].to_numpy(float), list(gpu["estimator"]), list(gpu["flags"].fillna(""))),
        FUSED: (truth, fused["energy_j"].to_numpy(float)),
        COUNTER: (truth, np.array([counter(r.start_s, r.end_s) for r in load.records])),
        ZEUS: (truth, np.array(zeus)),
    }


def merge(parts: list[dict]) -> dict:
    out: dict = {}
    for part in parts:
        for method, arrays in part.items():
            if method not in out:
                out[method] = [np.asarray(a) if not isinstance(a, list) else list(a) for a in arrays]
                continue
            out[method] = [
                (out[method][k] + list(a)) if isinstance(a, list) else np.concatenate((out[method][k], a))
                for k, a in enumerate(arrays)
            ]
    return out


def simulate(seeds: int) -> list[dict]:
    import step_sim

    rows = []
    for cfg in FAMILY:
        parts = [
            simulated(step_sim.square_load(np.random.default_rng(s), cfg.on_s, cfg.off_s, cfg.work, periods=40), 100 + s)
            for s in range(seeds)
        ]
        rows.append(table_row(cfg.name, merge(parts)))
    for window_s in STEADY_S:
        parts = [
            simulated(step_sim.steady_load(np.random.default_rng(s), window_s, "cap"), 100 + s) for s in range(seeds)
        ]
        rows.append(table_row(steady_name(window_s), merge(parts)))
    return rows


# -- recording (GPU) --------------------------------------------------------------------------


def zeus_monitor():
    """Zeus's monitor of GPU 0, or None (with a message) where zeus is not installed."""
    try:
        from zeus.monitor import ZeusMonitor
    except ImportError:
        print("zeus is not installed (pip install zeus==0.16.0): the Zeus column is left out")
        return None
    return ZeusMonitor(gpu_indices=[0], approx_instant_energy=False)


def work_steps():
    """(step, sync) per kind of work: GEMMs at the cap, a memory-bound add, small GEMMs."""
    import torch
    from gpu_load import gemm_step

    x = torch.randn(1 << 28, device="cuda")  # 1 GiB each: the add streams 3 GiB per step
    y, z = torch.randn_like(x), torch.empty_like(x)

    def add():
        torch.add(x, y, out=z)

    cap, sync = gemm_step(8192)
    partial, _ = gemm_step(2048)
    return {"cap": cap, "memory": add, "partial": partial}, sync


def record_steps(cfg: Config, step, sync, zeus, run_dir: Path, rng: random.Random) -> dict:
    """One square wave under energyframe (even periods) and Zeus (odd ones)."""
    from gpu_load import time_per_step

    import energyframe as ef

    n = max(1, round(cfg.on_s / time_per_step(step, sync)))
    zeus_windows = []
    with ef.measure(power="nvml", sync=sync, out=run_dir) as m:
        time.sleep(1.0)
        for k in range(cfg.periods):
            rest = cfg.off_s + rng.uniform(0.0, GAP_S)
            if k % 2 == 0 or zeus is None:
                with m.window("period"):
                    _burst(m, step, n, rest)
            else:
                t0 = time.monotonic()
                zeus.begin_window("period", sync_execution=False)
                t1 = time.monotonic()
                _burst(m, step, n, rest)
                t2 = time.monotonic()
                energy = zeus.end_window("period", sync_execution=False).gpu_energy[0]
                zeus_windows.append(((t0 + t1) / 2, (t2 + time.monotonic()) / 2, energy))
        time.sleep(0.5)
    return {"run_dir": str(run_dir), "zeus": zeus_windows, "steps_per_burst": n}


def _burst(m, step, n: int, rest_s: float) -> None:
    with m.window("on", iterations=n):
        for _ in range(n):
            step()
    time.sleep(rest_s)


def record_steady(window_s: float, count: int, step, sync, zeus, run_dir: Path, rng: random.Random) -> dict:
    """Windows of ``window_s`` ± 10 % inside back-to-back GEMMs, alternating energyframe and Zeus,
    and a 5-s reference window for the energy per GEMM."""
    from gpu_load import run_for, time_per_step

    import energyframe as ef

    per_step = time_per_step(step, sync)
    zeus_windows = []
    with ef.measure(power="nvml", sync=sync, out=run_dir) as m:
        run_for(step, sync, 1.0)
        n_ref = int(5.0 / per_step)
        with m.window("reference", iterations=n_ref):
            for _ in range(n_ref):
                step()
        for k in range(count):
            for _ in range(rng.randint(0, int(0.1 / per_step))):
                step()
            n = max(1, round(window_s * rng.uniform(0.9, 1.1) / per_step))
            if k % 2 == 0 or zeus is None:
                with m.window("steady", iterations=n):
                    for _ in range(n):
                        step()
                continue
            sync()
            t0 = time.monotonic()
            zeus.begin_window("steady", sync_execution=False)
            t1 = time.monotonic()
            for _ in range(n):
                step()
            sync()
            t2 = time.monotonic()
            energy = zeus.end_window("steady", sync_execution=False).gpu_energy[0]
            zeus_windows.append(((t0 + t1) / 2, (t2 + time.monotonic()) / 2, energy, n))
        run_for(step, sync, 0.3)
    return {"run_dir": str(run_dir), "zeus": zeus_windows}


# -- analysis of a recorded run ----------------------------------------------------------------


def channel_rows(result, phase: str, channel: str):
    w = result.windows
    rows = w[(w["phase"] == phase) & (w["channel"] == channel)].sort_values("trial")
    if channel == "gpu0" and RECOMPUTE:
        rows = recomputed(result, rows)
    return rows


#: ``--analyse --recompute``: the default channel's windows computed again from the saved samples
#: with this checkout's estimator (the fused channel and the counter read the same samples)
RECOMPUTE = False


def placed(result):
    """A saved run's data, its recording, and its samples placed on its timeline (each channel's
    timing applied) as the run placed them."""
    from energyframe.core.pipeline import Recording, place_samples

    run = from_result(result)
    recording = Recording(
        clock=ClockModel.from_json(result.meta["clock"]),
        channels=run.channels,
        channel_source={},
        series=run.series,
        samples=result.samples.iloc[0:0],
    )
    return run, recording, place_samples(recording, None, print)


def held_out_row(run_dir: Path) -> dict:
    """The default number against the counter's own held-out ticks (``held_out_ticks.py``), and
    how far the run's ticks lie from the counter's update grid."""
    from energyframe.results.result import RunResult

    run, _, placement = placed(RunResult.load(run_dir))
    return {
        "held_out": held_out_stats(held_out(run.channels, placement.series)),
        "stamps_ms": stamp_spread_ms(run.series["gpu0"].times_s),
    }


def recomputed(result, rows):
    """``rows`` (the gpu0 windows) with energy, random bound, estimator and flags as this
    checkout computes them from the run's samples: placed as a run places them, fused, each
    edge's estimator chosen by the evidence, the counter's ticks checked against their grid."""
    from energyframe.core.edge import Span
    from energyframe.core.pipeline import add_fused_power
    from energyframe.core.windows import channel_energy, counter_ticks, first_start_after

    run, recording, placement = placed(result)
    # the run's own steps: each channel's timing applied, then the fused channel and its evidence,
    # each edge's estimator chosen by it, and the stamps' errors the counter's grid shows
    recording, placement, _ = add_fused_power(recording, placement, print)
    counters = counter_ticks(recording.channels, placement.series, placement.evidence)
    channel = recording.channels["gpu0"]
    rows = rows.copy()
    # every window of the step family opens after a device sync (record_steps, record_steady): an
    # end edge shares its reading with the first start at or after it (windows.compute_windows)
    every = result.windows
    starts = np.sort(every.loc[every["channel"] == "gpu0", "start_s"].to_numpy(float))
    for index, (a, b) in zip(rows.index, rows[["start_s", "end_s"]].to_numpy(float)):
        span = Span(start_s=a, end_s=b, synced=True, next_synced_start_s=first_start_after(starts, b))
        w = channel_energy(channel, placement.series, span, counters)
        rows.loc[index, ["energy_j", "energy_random_j"]] = [w.energy_j, w.random_j]
        rows.loc[index, "estimator"] = w.estimator
        rows.loc[index, "flags"] = ";".join(w.flags)
    return rows


def analyse_steps(run_dir: Path, zeus_windows, off_s: float) -> dict:
    """Every method on the recorded period windows, against the cycle truth."""
    from energyframe.results.result import RunResult

    result = RunResult.load(run_dir)
    run = load_run(run_dir)
    on = run.phase("on")
    segments = Segments.from_cycles(on["start_s"], on["end_s"], float(on["end_s"].iloc[-1]) + off_s)
    ticks, counter = run.series["gpu0"].times_s, run.series["gpu0"].values
    profile = fit_profile(ticks, counter, segments)
    gpu = channel_rows(result, "period", "gpu0")
    fused = channel_rows(result, "period", "gpu0.fused")
    spans = gpu[["start_s", "end_s"]].to_numpy(float)
    truth = window_truth(profile, ticks, counter, segments, spans)
    # how far the truth itself moves when its profile is fitted otherwise (cycle_truth.other_truths)
    cycles = np.column_stack((segments.starts_s[0::2], segments.starts_s[1::2], segments.ends_s[1::2]))
    cycle_of = np.searchsorted(cycles[:, 0], spans[:, 0] + 1e-9, side="right") - 1
    moves = np.column_stack([np.abs(t - truth) for t in other_truths(ticks, counter, cycles, spans, cycle_of).values()])
    interpolate = counter_energy_of(run.series["gpu0"])
    out = {
        DEFAULT: (truth, gpu["energy_j"].to_numpy(float), gpu["energy_random_j"].to_numpy(float), list(gpu["estimator"]), list(gpu["flags"].fillna(""))),
        FUSED: (truth, fused["energy_j"].to_numpy(float)),
        COUNTER: (truth, np.array([interpolate(a, b) for a, b in spans])),
        # the largest move of each window's truth (NaN where no variant has a truth there)
        TRUTH_MOVES: np.where(np.isfinite(moves).any(axis=1), np.fmax.reduce(moves, axis=1), np.nan),
        IDLE_TRUTH: {DEFAULT: idle_truth(ticks, counter, segments, spans)},
    }
    if zeus_windows:
        clock = ClockModel.from_json(result.meta["clock"])
        z = np.array([(clock.to_unix(a), clock.to_unix(b), e) for a, b, e in zeus_windows])
        out[ZEUS] = (window_truth(profile, ticks, counter, segments, z[:, :2]), z[:, 2])
        out[IDLE_TRUTH][ZEUS] = idle_truth(ticks, counter, segments, z[:, :2])
    return out


def analyse_steady(run_dir: Path, zeus_windows) -> dict:
    """Every method on the steady windows. The truth of a window is the steady power times its
    duration; the steady power is the counter's energy over the whole steady section (the
    reference window's start to the last window's end, 20-40 s of back-to-back GEMMs) over its
    duration, as in window_accuracy.py. At the power cap the power holds while the clocks move,
    so the energy per GEMM drifts and a GEMM count is no truth."""
    from energyframe.results.result import RunResult

    result = RunResult.load(run_dir)
    run = load_run(run_dir)
    reference = channel_rows(result, "reference", "gpu0").iloc[0]
    gpu = channel_rows(result, "steady", "gpu0")
    fused = channel_rows(result, "steady", "gpu0.fused")
    interpolate = counter_energy_of(run.series["gpu0"])
    clock = ClockModel.from_json(result.meta["clock"])
    spans = gpu[["start_s", "end_s"]].to_numpy(float)
    first, last = float(reference["start_s"]), float(spans[:, 1].max())
    if zeus_windows:
        last = max(last, max(clock.to_unix(w[1]) for w in zeus_windows))
    power_w = interpolate(first, last) / (last - first)
    truth = power_w * (spans[:, 1] - spans[:, 0])
    fused_spans = fused[["start_s", "end_s"]].to_numpy(float)
    out = {
        DEFAULT: (truth, gpu["energy_j"].to_numpy(float), gpu["energy_random_j"].to_numpy(float), list(gpu["estimator"]), list(gpu["flags"].fillna(""))),
        FUSED: (power_w * (fused_spans[:, 1] - fused_spans[:, 0]), fused["energy_j"].to_numpy(float)),
        COUNTER: (truth, np.array([interpolate(a, b) for a, b in spans])),
    }
    if zeus_windows:
        z = np.array([(w[0], w[1], w[2]) for w in zeus_windows], dtype=float)
        out[ZEUS] = (power_w * (z[:, 1] - z[:, 0]), z[:, 2])
    # the earlier truth, for comparison: GEMM count x energy per GEMM of the reference window
    out["gemm truth"] = gpu["iterations"].to_numpy(float) * reference["energy_j"] / reference["iterations"]
    return out


def analyse(name: str, rec: dict) -> dict:
    """One recorded configuration's table row."""
    run_dir = Path(rec["run_dir"])
    if name.startswith("steady"):
        windows = analyse_steady(run_dir, rec["zeus"])
        row = table_row(name, windows)
        gemm = windows.pop("gemm truth")
        row["gemm_truth"] = {m: method_stats(gemm, windows[m][1]) for m in (DEFAULT, COUNTER)}
    else:
        off_s = next(cfg.off_s for cfg in FAMILY if cfg.name == name)
        row = table_row(name, analyse_steps(run_dir, rec["zeus"], off_s))
    row.update(held_out_row(run_dir))
    return row


def reanalyse(path: Path, run_root: Path | None) -> tuple[list[dict], dict, str]:
    """The table of an earlier GPU run, from its JSON and its saved run directories (moved
    under ``run_root`` if given)."""
    earlier = json.loads(path.read_text())
    recorded = earlier["recorded"]
    rows = []
    for name, rec in recorded.items():
        if run_root is not None:
            rec = {**rec, "run_dir": str(run_root / Path(rec["run_dir"]).name)}
        rows.append(analyse(name, rec))
    return rows, recorded, earlier["title"] + " (analysed again)"


def steady_name(window_s: float) -> str:
    """The name of the steady configuration of windows ``window_s`` long."""
    return f"steady {window_s * 1e3:.0f} ms cap"


def config_names() -> list[str]:
    """Every configuration the family records, load steps then steady windows."""
    return [cfg.name for cfg in FAMILY] + [steady_name(w) for w in STEADY_WINDOWS]


def record_all(args) -> tuple[list[dict], dict]:
    """The whole family on the GPU: recorded, then analysed."""
    from gpu_load import run_for

    steps, sync = work_steps()
    run_for(steps["cap"], sync, 3.0)  # clocks, temperature and power settle
    zeus = zeus_monitor()
    rng = random.Random(args.seed)
    root = Path(args.run_dir)
    rows, recorded = [], {}
    for cfg in FAMILY:
        if args.only and cfg.name not in args.only:
            continue
        periods = max(8, int(cfg.periods * args.scale))
        rec = record_steps(Config(cfg.on_s, cfg.off_s, cfg.work, periods), steps[cfg.work], sync, zeus, root / cfg.name.replace("/", "-").replace(" ", "_"), rng)
        recorded[cfg.name] = rec
        keep(args, recorded)
        rows.append(analyse(cfg.name, rec))
        print_table(rows[-1:], f"{cfg.name}: done")
    for window_s, count in STEADY_WINDOWS.items():
        name = steady_name(window_s)
        if args.only and name not in args.only:
            continue
        rec = record_steady(window_s, max(6, int(count * args.scale)), steps["cap"], sync, zeus, root / name.replace(" ", "_"), rng)
        recorded[name] = rec
        keep(args, recorded)
        rows.append(analyse(name, rec))
    return rows, recorded


def keep(args, recorded: dict) -> None:
    """What is recorded so far, so that an analysis that fails loses nothing (``--analyse``)."""
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(json_safe({"title": "step family (recorded)", "rows": [], "recorded": recorded}), indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="write the table and raw figures (JSON) here")
    ap.add_argument("--simulate", action="store_true", help="the simulated family (no GPU)")
    ap.add_argument("--seeds", type=int, default=4, help="simulated runs per configuration")
    ap.add_argument("--run-dir", default="step-family-runs", help="where the GPU runs are saved")
    ap.add_argument("--scale", type=float, default=1.0, help="periods and windows, times this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--analyse", type=Path, help="the table again from this earlier --out JSON and its run directories")
    ap.add_argument("--run-root", type=Path, help="with --analyse: the run directories are now under this folder")
    ap.add_argument("--recompute", action="store_true", help="with --analyse: the default channel's windows again, with this checkout's estimator")
    ap.add_argument(
        "--only",
        type=lambda text: [n.strip() for n in text.split(",") if n.strip()],
        default=[],
        help='record only these configurations, by name, comma-separated (e.g. "200/300 ms cap,steady 1000 ms cap")',
    )
    args = ap.parse_args(argv)
    unknown = sorted(set(args.only) - set(config_names()))
    if unknown:
        ap.error(f"no configuration named {', '.join(map(repr, unknown))}; the family: {', '.join(config_names())}")
    global RECOMPUTE
    RECOMPUTE = bool(args.analyse and args.recompute)
    started = time.monotonic()
    if args.analyse:
        rows, recorded, title = reanalyse(args.analyse, args.run_root)
    elif args.simulate:
        rows, recorded, title = simulate(args.seeds), {}, "simulated step family (benchmarks/step_sim.py)"
    else:
        rows, recorded = record_all(args)
        first = load_run(Path(next(iter(recorded.values()))["run_dir"]))
        device, driver = gpu_info(first.meta)
        title = f"step family on {device}, driver {driver}, {time.strftime('%Y-%m-%d')}"
    print_table(rows, title)
    print(f"\n{time.monotonic() - started:.0f} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(json_safe({"title": title, "rows": rows, "recorded": recorded}), indent=1))
    print(f"raw numbers: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
