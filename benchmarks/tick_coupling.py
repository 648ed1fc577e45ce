"""Do NVML's cheap power readings change when the energy counter (field 83) ticks?

A read of the counter costs ~3 ms of CPU on an H200, a read of instant power (field 186) or of
the 1-s average (field 185) ~0.03 ms (``benchmarks/nvml_call_cost.py``). If one of them changed a
fixed time after each tick, a sampler could find the tick with cheap reads of it (a *cue*) and
read the counter once, instead of bracketing the tick with two or three counter reads (issue 41).

Two child processes, each with its own NVML handle, timed on the one monotonic clock, every
read recorded at its start (where the query reads, ``benchmarks/tick_stamps.py``):

- the *counter* process reads field 83 alone every 1 ms (the dense sampler's bracket, ~4 ms);
- the *cue* process reads fields 186 and 185 in one call every ``--pause-ms`` (0.2 ms).

Each load runs twice: the cue process alone (the cues' own update grid, and how often a cue
repeats its value at an update, unseen), then both together (each tick's lag to the cues'
change after it; and whether counter reads change what the cue reads see). Per load and cue it
prints: the cue's update period and how far its changes lie from their own grid, the share of
updates it repeated its value (a gap of two periods or more); the lag from each counter tick to
the cue's first change after it (p5 / p50 / p95, ms, with the counter's own bracket of ~4 ms in
it: the lag's own spread is its spread less a uniform bracket's), and the share of ticks
with no cue change within 40 ms. Loads: idle, a 100/200-ms square wave of bf16 GEMMs, a steady
GEMM load.

2026-11-29, H200 (docs/validation.md, "Cues of a tick"): alone, the cues change on a 100-ms grid
of their own within 0.3 ms; beside the counter's reads that grid drifts, by most of a period
within seconds under load, while the counter's ticks keep their phase: no fixed lag ties a cue to
the tick. (An earlier form probed the counter from the cues' process, which made its lags
disagree between runs.)

Run on a GPU (about 75 s): ``python benchmarks/tick_coupling.py --out $OUT/coupling``; prints the
table; ``--analyse DIR`` prints it again.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

from energyframe.core.tickgrid import grid_residual_s
from energyframe.power.nvml.device import field_value

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvml_call_cost import handle  # noqa: E402  (the GPU CUDA numbers 0)

ENERGY = 83
#: the cheap readings watched as cues of a tick
CUES = {186: "instant", 185: "average"}
COUNTER_PAUSE_S = 0.001
#: a tick without a cue change within this long after it has none. Units: s.
NO_CUE_AFTER_S = 0.040
#: a cue change this long before a tick's stamp still follows it: the stamps' brackets. Units: s.
NO_CUE_BEFORE_S = 0.005


def poll(fields: list[int], pause_s: float, path: str, ready, stop) -> None:
    """A child: read ``fields`` in one call every ``pause_s`` until ``stop``; save (start, end,
    values...) per read."""
    import pynvml as nvml

    nvml.nvmlInit()
    h = handle(nvml)
    rows = []
    ready.set()
    while not stop.is_set():
        t0 = time.monotonic()
        values = [field_value(nvml, v) for v in nvml.nvmlDeviceGetFieldValues(h, fields)]
        rows.append((t0, time.monotonic(), *values))
        time.sleep(pause_s)
    nvml.nvmlShutdown()
    np.save(path, np.array(rows, dtype=float))


def record(out: Path, seconds: float, pause_s: float, loads: dict | None = None) -> None:
    """Each load twice (cues alone, then cues and counter); the raw reads in ``out``."""
    if loads is None:
        from gpu_load import gemm_step, run_for
        from tick_stamps import square_wave

        step, sync = gemm_step()
        loads = {
            "idle": lambda: time.sleep(seconds),
            "square 100/200 ms": lambda: square_wave(seconds, 0.1, 0.2),
            "steady": lambda: run_for(step, sync, seconds),
        }
    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    runs = []
    for name, load in loads.items():
        for together in (False, True):
            stop = ctx.Event()
            tag = f"run{len(runs)}"
            kids = [(list(CUES), pause_s, str(out / f"{tag}-cues.npy"))]
            if together:
                kids.append(([ENERGY], COUNTER_PAUSE_S, str(out / f"{tag}-counter.npy")))
            readies = [ctx.Event() for _ in kids]
            procs = [ctx.Process(target=poll, args=(*k, r, stop)) for k, r in zip(kids, readies)]
            for p in procs:
                p.start()
            for r in readies:
                r.wait(60)
            time.sleep(0.3)
            t0 = time.monotonic()
            load()
            t1 = time.monotonic()
            stop.set()
            for p in procs:
                p.join()
            runs.append({"tag": tag, "load": name, "counter": together, "start_s": t0, "end_s": t1})
            print(f"recorded {name}, {'cues and counter' if together else 'cues alone'}", flush=True)
    (out / "runs.json").write_text(json.dumps(runs))


# -- analysis ---------------------------------------------------------------------------------


def changes(rows: np.ndarray, column: int, start_s: float, end_s: float) -> np.ndarray:
    """Where ``column`` changed, each stamped midway between the starts of the read that last
    saw the old value and the first that saw the new one, inside [start, end]. Units: s."""
    value = rows[:, column]
    new = np.flatnonzero(np.diff(value) != 0) + 1
    stamps = (rows[new - 1, 0] + rows[new, 0]) / 2
    return stamps[(stamps >= start_s) & (stamps <= end_s)]


def repeated_share(stamps: np.ndarray) -> tuple[float, float]:
    """The update period (median gap) and the share of updates that showed no change: each gap
    of n periods hides n - 1 updates."""
    if stamps.size < 3:
        return float("nan"), float("nan")
    gaps = np.diff(stamps)
    period = float(np.median(gaps))
    periods = np.maximum(np.round(gaps / period), 1)
    return period, float((periods - 1).sum() / periods.sum())


def lags(ticks: np.ndarray, cue: np.ndarray) -> np.ndarray:
    """From each tick to the cue's first change after it (NaN: none within NO_CUE_AFTER_S); a
    change up to NO_CUE_BEFORE_S before the tick's stamp counts as after it, at a negative lag
    (the two stamps each lie within their brackets). Units: s."""
    i = np.searchsorted(cue, ticks - NO_CUE_BEFORE_S, side="right")
    out = np.full(ticks.size, np.nan)
    ok = i < cue.size
    out[ok] = cue[i[ok]] - ticks[ok]
    out[out > NO_CUE_AFTER_S] = np.nan
    return out


def spread_ms(lag_s: np.ndarray, bracket_s: float) -> float:
    """The lag's own spread (sd): its variance less a uniform bracket's. Units: ms."""
    x = lag_s[np.isfinite(lag_s)]
    if x.size < 3:
        return float("nan")
    return 1e3 * float(np.sqrt(max(0.0, np.var(x, ddof=1) - bracket_s**2 / 12)))


def analyse(out: Path) -> list[dict]:
    runs = json.loads((out / "runs.json").read_text())
    rows_out = []
    for run in runs:
        cues = np.load(out / f"{run['tag']}-cues.npy")
        counter = np.load(out / f"{run['tag']}-counter.npy") if run["counter"] else None
        ticks = changes(counter, 2, run["start_s"], run["end_s"]) if counter is not None else None
        if counter is not None:
            new = np.flatnonzero(np.diff(counter[:, 2]) != 0) + 1
            bracket = float(np.median(counter[new, 0] - counter[new - 1, 0])) if new.size else float("nan")
        for k, name in enumerate(CUES.values()):
            stamps = changes(cues, 2 + k, run["start_s"], run["end_s"])
            period, repeated = repeated_share(stamps)
            resid = 1e3 * grid_residual_s(stamps) if stamps.size >= 3 else np.array([np.nan])
            row = {
                "load": run["load"],
                "counter read": "yes" if counter is not None else "no",
                "cue": name,
                "cue changes": int(stamps.size),
                "period ms": 1e3 * period,
                "repeated share": repeated,
                "off own grid ms p50/p95": f"{np.median(np.abs(resid)):.2f} / {np.quantile(np.abs(resid), 0.95):.2f}",
                "cue read gap ms p50/max": f"{1e3 * np.median(np.diff(cues[:, 0])):.2f} / {1e3 * np.max(np.diff(cues[:, 0])):.1f}",
            }
            if ticks is not None:
                lag = lags(ticks, stamps)
                ok = lag[np.isfinite(lag)]
                q = np.quantile(1e3 * ok, [0.05, 0.5, 0.95]) if ok.size else [np.nan] * 3
                row.update(
                    {
                        "ticks": int(ticks.size),
                        "counter bracket ms": 1e3 * bracket,
                        "lag ms p5/p50/p95": " / ".join(f"{v:.2f}" for v in q),
                        "lag spread ms": spread_ms(lag, bracket),
                        "ticks without cue": float(np.mean(~np.isfinite(lag))) if lag.size else float("nan"),
                    }
                )
            rows_out.append(row)
    columns = list(dict.fromkeys(k for r in rows_out for k in r))
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows_out:
        print("| " + " | ".join(_cell(r.get(c, "-")) for c in columns) + " |")
    return rows_out


def _cell(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of each load, each run")
    ap.add_argument("--pause-ms", type=float, default=0.2, help="pause between two reads of the cues")
    ap.add_argument("--out", type=Path, default=Path("tick-coupling"))
    ap.add_argument("--analyse", type=Path, help="print the table of a recorded run")
    args = ap.parse_args(argv)
    if args.analyse:
        analyse(args.analyse)
        return 0
    record(args.out, args.seconds, args.pause_ms / 1e3)
    analyse(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
