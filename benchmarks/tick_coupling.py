"""Do NVML's cheap power readings change when the energy counter (field 83) ticks?

A read of the counter costs ~3 ms of CPU on an H200, a read of instant power (field 186) or of
the 1-s average (field 185) ~0.03 ms (``benchmarks/nvml_call_cost.py``). If one of them changed
with each tick, a sampler could find the tick with cheap reads of it (a *cue*) and read the
counter once after it, instead of bracketing the tick with two or three counter reads (issue 41).
This benchmark measures whether they do.

For each tick, in a child process: sleep until ~10 ms before the tick is expected; read both cues
(one call) every ``--pause-ms`` until each has changed or 40 ms past the expected tick; once, at a
random instant from 6 ms before to 10 ms after the expected tick, read the counter in between (the
*probe*); after the first cue changed, read the counter at once (the *check*), and again until it
shows its new value. Each read is timed at its start (where the query reads,
``benchmarks/tick_stamps.py``). Per tick and cue (and ``either``: whichever changed first):

- ``lead``: the probe saw the counter's new value while the cue still showed its old one
  afterwards: the counter ticked *before* the cue changed, by at least the time from the probe
  to the cue's last old reading;
- ``lag``: a check made after the cue changed still saw the counter's old value: the counter
  ticks *after* the cue;
- ``silent``: the cue did not change within 40 ms of the expected tick (it read the same
  milliwatts twice, or changes on another grid).

Where the probe fell x ms before the cue's change, the share of leads is the chance that the cue
lags the counter by more than x: the table of those shares is the lag's distribution. Loads:
idle, a 100/200-ms square wave of bf16 GEMMs, a steady GEMM load.

Run on a GPU (about 50 s): ``python benchmarks/tick_coupling.py --out $OUT/coupling``; prints the
tables; ``--analyse DIR`` prints them again.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

from energyframe.power.nvml.device import field_value

sys.path.insert(0, str(Path(__file__).resolve().parent))

ENERGY = 83
#: the cheap readings watched as cues of a tick: instant power, 1-s average power
CUES = {186: "instant", 185: "average"}
PERIOD_S = 0.1
EARLY_S = 0.010  # cheap polling starts this long before the expected tick
PROBE_FROM_S, PROBE_TO_S = -0.006, 0.010  # the probe's instant, about the expected tick
SILENT_AFTER_S = 0.040


def handle(nvml):
    """The GPU CUDA numbers 0 (by UUID when CUDA_VISIBLE_DEVICES names one)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith("GPU-"):
        return nvml.nvmlDeviceGetHandleByUUID(visible)
    return nvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)


def reader(nvml, h, fields: list[int]):
    def read() -> tuple[float, ...]:
        t = time.monotonic()
        return (t, *(field_value(nvml, v) for v in nvml.nvmlDeviceGetFieldValues(h, fields)))

    return read


def first_tick(energy) -> tuple[float, float]:
    """Poll the counter densely until it changes: (its stamp, the new value)."""
    t0, v0 = energy()
    while True:
        time.sleep(0.0005)
        t1, v1 = energy()
        if v1 != v0:
            return (t0 + t1) / 2, v1
        t0, v0 = t1, v1


def one_tick(energy, cues, expected_s: float, counter_j: float, pause_s: float, rng) -> dict:
    """Watch one tick: see the module's docstring. Returns what was read: per cue field, the
    reads either side of its first change (``None``: silent)."""
    probe_at = expected_s + rng.uniform(PROBE_FROM_S, PROBE_TO_S)
    time.sleep(max(0.0, expected_s - EARLY_S - time.monotonic()))
    t, *first = cues()
    last_old = [t] * len(first)
    changes: list[tuple[float, float] | None] = [None] * len(first)
    probe = None
    while True:
        if probe is None and time.monotonic() >= probe_at:
            probe = energy()
        t, *values = cues()
        for i, v in enumerate(values):
            if changes[i] is None:
                if v != first[i]:
                    changes[i] = (last_old[i], t)
                else:
                    last_old[i] = t
        if all(c is not None for c in changes) or t > expected_s + SILENT_AFTER_S:
            break
        time.sleep(pause_s)
    seen = [c for c in changes if c is not None]
    checks = []
    if seen:  # the counter read just after the first cue changed: did it tick already?
        checks = [energy()]
        while checks[-1][1] == counter_j and checks[-1][0] < min(c[1] for c in seen) + SILENT_AFTER_S:
            time.sleep(0.0005)
            checks.append(energy())
    return {"probe": probe, "changes": changes, "checks": checks, "counter": counter_j}


def watch(seconds: float, pause_s: float, path: str, stop) -> None:
    """The child: watch ticks until ``stop`` is set (or ``seconds`` pass); save them as JSON."""
    import pynvml as nvml

    nvml.nvmlInit()
    h = handle(nvml)
    energy, cues = reader(nvml, h, [ENERGY]), reader(nvml, h, list(CUES))
    rng = random.Random(7)
    tick_s, counter = first_tick(energy)
    out = []
    end = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < end:
        expected = tick_s + PERIOD_S
        seen = one_tick(energy, cues, expected, counter, pause_s, rng)
        out.append(seen)
        news = [c for c in seen["checks"] if c[1] != counter]
        if news and abs(news[0][0] - expected) < 0.03:
            counter, tick_s = news[0][1], expected  # follow the expected grid
        else:  # a silent tick, or far off the grid: find the counter's tick again
            tick_s, counter = first_tick(energy)
    nvml.nvmlShutdown()
    Path(path).write_text(json.dumps(out))


def record(out: Path, seconds: float, pause_s: float) -> None:
    from gpu_load import gemm_step, run_for
    from tick_stamps import square_wave

    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    step, sync = gemm_step()
    loads = {
        "idle": lambda: time.sleep(seconds),
        "square 100/200 ms": lambda: square_wave(seconds, 0.1, 0.2),
        "steady": lambda: run_for(step, sync, seconds),
    }
    for i, (name, load) in enumerate(loads.items()):
        stop = ctx.Event()
        path = out / f"load{i}.json"
        child = ctx.Process(target=watch, args=(seconds + 30, pause_s, str(path), stop))
        child.start()
        time.sleep(1.5)
        load()
        stop.set()
        child.join()
        print(f"recorded {name}", flush=True)
    (out / "loads.json").write_text(json.dumps(list(loads)))


def classify(t: dict, cue: int | None) -> tuple[str, float]:
    """A watched tick's verdict for cue ``cue`` (an index into CUES; ``None``: whichever cue
    changed first) and its size (ms): see the module's docstring."""
    seen = [c for c in t["changes"] if c is not None]
    change = t["changes"][cue] if cue is not None else (min(seen, key=lambda c: c[1]) if seen else None)
    if change is None:
        return "silent", float("nan")
    counter = t["counter"]
    old_t, new_t = change
    probe = t["probe"]
    if probe is not None and probe[1] != counter and probe[0] < old_t:
        return "lead", 1e3 * (old_t - probe[0])  # counter new at the probe, the cue old after it
    later = [c for c in t["checks"] if c[0] >= new_t]
    if later and later[0][1] == counter:
        news = [c for c in later if c[1] != counter]
        return "lag", 1e3 * ((news[0][0] if news else later[-1][0]) - new_t)
    return "together", 1e3 * (new_t - old_t)


def lag_survival(ticks: list[dict], cue: int | None) -> str:
    """P(the cue changes more than x after the counter ticked), from where the probe fell: a
    probe x ms before the cue's change that saw the counter's new value means a lag above x."""
    xs, lead = [], []
    for t in ticks:
        seen = [c for c in t["changes"] if c is not None]
        change = t["changes"][cue] if cue is not None else (min(seen, key=lambda c: c[1]) if seen else None)
        if change is None or t["probe"] is None or t["probe"][0] >= change[0]:
            continue
        xs.append(1e3 * (change[0] - t["probe"][0]))
        lead.append(t["probe"][1] != t["counter"])
    x, hit = np.array(xs), np.array(lead, dtype=bool)
    cells = []
    for lo in range(6, 20, 2):
        m = (x >= lo) & (x < lo + 2)
        cells.append(f"{lo}-{lo + 2}: {hit[m].mean():.2f} ({m.sum()})" if m.any() else f"{lo}-{lo + 2}: -")
    return ", ".join(cells)


def analyse(out: Path) -> None:
    names = json.loads((out / "loads.json").read_text())
    cues = [*list(CUES.values()), "either"]
    print("| load | cue | ticks | together | lead (counter first) | lag (cue first) | silent | cue bracket ms p50 / p95 | lead ms max | lag ms max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    survival = []
    for i, name in enumerate(names):
        ticks = json.loads((out / f"load{i}.json").read_text())
        for k, cue in enumerate(cues):
            index = k if k < len(CUES) else None
            verdicts = [classify(t, index) for t in ticks]
            count = {v: sum(x == v for x, _ in verdicts) for v in ("together", "lead", "lag", "silent")}
            size = {v: [s for x, s in verdicts if x == v] for v in ("together", "lead", "lag")}
            br = np.array(size["together"]) if size["together"] else np.array([np.nan])
            mx = {v: f"{max(size[v]):.2f}" if size[v] else "-" for v in ("lead", "lag")}
            print(
                f"| {name} | {cue} | {len(ticks)} | {count['together']} | {count['lead']} | {count['lag']} | {count['silent']} |"
                f" {np.median(br):.2f} / {np.quantile(br, 0.95):.2f} | {mx['lead']} | {mx['lag']} |"
            )
            survival.append(f"| {name} | {cue} | {lag_survival(ticks, index)} |")
    print("\nP(cue lags the counter by more than x ms), by x (probes in that bin):")
    print("| load | cue | x ms: share (probes) |\n|---|---|---|")
    print("\n".join(survival))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=12.0, help="seconds of each load")
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
