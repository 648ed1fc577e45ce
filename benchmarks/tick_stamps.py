"""How well the energy counter's ticks are stamped: every poll of the counter recorded (its call's
start and end, the value, NVML's own timestamp), under a square wave of bf16 GEMMs and then a
steady load, to find which stamp of a tick lies closest to the counter's own regular update grid.

Run on a GPU machine: ``python benchmarks/tick_stamps.py [--gpu 0] [--seconds 20] [--out DIR]``.
The poller runs in a child process, as the nvml source's sampler does by default, with the
same fields in one ``nvmlDeviceGetFieldValues`` call and the same 1-ms pause. ``--analyse DIR``
prints the table of a recorded run again. Prints, per load and per candidate stamp of a tick:

- ``middles``: halfway between the middles of the last poll that saw the old value and the first
  that saw the new one (how the sampler stamped ticks until 2026-11-27);
- ``starts``: halfway between their starts (how it stamps them now: the query reads as it
  begins, ``Poller.reads_at``);
- ``ends``: halfway between their ends;
- ``nvml``: the timestamp NVML returns with the value.

For each: how far the ticks lie from a regular grid fitted through their neighbours (the
counter's update cadence, ~100 ms), as quantiles in ms, and the same against the duration of the
poll that saw the change (a long call is a wide bracket).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np

from energyframe.core.tickgrid import grid_residual_s

FIELDS = (83, 186, 185)  # total energy, instant power, 1-s average power: one call, as the sampler


def poll(gpu: int, pause_s: float, stop, path: str) -> None:
    """The child: poll the counter until ``stop`` is set; save every call."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
    rows = []
    while not stop.is_set():
        m0 = time.monotonic()
        values = pynvml.nvmlDeviceGetFieldValues(handle, list(FIELDS))
        m1 = time.monotonic()
        v = values[0]
        rows.append((m0, m1, float(v.value.ullVal), v.timestamp * 1e-6, time.time() - time.monotonic()))
        time.sleep(pause_s)
    pynvml.nvmlShutdown()
    np.save(path, np.array(rows, dtype=float))


def square_wave(seconds: float, on_s: float, off_s: float) -> list[tuple[float, float]]:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    n = max(1, round(on_s / ((time.perf_counter() - t0) / 20)))
    bursts = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.monotonic()
        for _ in range(n):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        bursts.append((start, time.monotonic()))
        time.sleep(off_s)
    return bursts


def steady(seconds: float) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(8):
            a @ b
        torch.cuda.synchronize()


def record(gpu: int, seconds: float, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    phases = {}
    for name, load in (
        ("idle", lambda: time.sleep(seconds / 4)),
        ("square 100/200 ms", lambda: square_wave(seconds, 0.1, 0.2)),
        ("square 50/100 ms", lambda: square_wave(seconds / 2, 0.05, 0.1)),
        ("steady", lambda: steady(seconds / 2)),
    ):
        stop = ctx.Event()
        path = out / f"{name.split()[0]}-{len(phases)}.npy"
        child = ctx.Process(target=poll, args=(gpu, 0.001, stop, str(path)))
        child.start()
        time.sleep(2.0)  # the child's NVML is up and polling
        t0 = time.monotonic()
        bursts = load() or []
        t1 = time.monotonic()
        time.sleep(0.5)
        stop.set()
        child.join()
        phases[name] = {"polls": path.name, "start_s": t0, "end_s": t1, "bursts": bursts}
        print(f"recorded {name}: {t1 - t0:.1f} s", flush=True)
    (out / "phases.json").write_text(json.dumps(phases))


# -- analysis ---------------------------------------------------------------------------------


def grid_residual(t: np.ndarray, half: int = 10) -> np.ndarray:
    """Each tick's distance from a regular grid fitted through its ``half`` neighbours either
    side (robust: median period and phase; the product's check, ``core/tickgrid.py``, with a
    wider neighbourhood). Units: s."""
    return grid_residual_s(t, half)


def ticks(rows: np.ndarray, start_s: float, end_s: float) -> dict[str, np.ndarray]:
    """Candidate stamps of every counter change inside [start, end], and the call duration."""
    m0, m1, value, nvml_wall, offset = rows.T
    changed = np.flatnonzero(np.diff(value) != 0) + 1  # the first poll that saw the new value
    changed = changed[(m0[changed] >= start_s) & (m1[changed] <= end_s)]
    prev = changed - 1
    mid = (m0 + m1) / 2
    return {
        "middles": (mid[prev] + mid[changed]) / 2,
        "starts": (m0[prev] + m0[changed]) / 2,
        "ends": (m1[prev] + m1[changed]) / 2,
        "nvml": nvml_wall[changed] - offset[changed],
        "call_ms": 1e3 * (m1[changed] - m0[changed]),
        "bracket_ms": 1e3 * (m1[changed] - m0[prev]),
    }


def q(x: np.ndarray) -> str:
    p = np.quantile(x, [0.01, 0.05, 0.5, 0.95, 0.99])
    return " ".join(f"{v:+6.2f}" for v in p)


def analyse(out: Path) -> None:
    phases = json.loads((out / "phases.json").read_text())
    print("| load | stamp | ticks | grid residual ms: p1 p5 p50 p95 p99 | spread p5-p95 ms |")
    print("|---|---|---|---|---|")
    for name, ph in phases.items():
        rows = np.load(out / ph["polls"])
        calls = 1e3 * (rows[:, 1] - rows[:, 0])
        t = ticks(rows, ph["start_s"], ph["end_s"])
        for stamp in ("middles", "starts", "ends", "nvml"):
            r = 1e3 * grid_residual(t[stamp])
            print(f"| {name} | {stamp} | {r.size} | {q(r)} | {np.quantile(r, 0.95) - np.quantile(r, 0.05):.2f} |")
        r = 1e3 * grid_residual(t["middles"])
        late = r > 3.0
        print(
            f"|   | calls: median {np.median(calls):.2f} ms, p99 {np.quantile(calls, 0.99):.2f}, max {calls.max():.1f};"
            f" ticks late > 3 ms: {late.sum()}, their call median {np.median(t['call_ms'][late]) if late.any() else float('nan'):.2f} ms"
            f" (others {np.median(t['call_ms'][~late]):.2f}), bracket {np.median(t['bracket_ms'][late]) if late.any() else float('nan'):.2f}"
            f" ms (others {np.median(t['bracket_ms'][~late]):.2f}) | | | |"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the square-wave phase")
    ap.add_argument("--out", type=Path, default=Path("tick-stamps"))
    ap.add_argument("--analyse", type=Path, help="print the table of a recorded run")
    args = ap.parse_args(argv)
    if args.analyse:
        analyse(args.analyse)
        return 0
    record(args.gpu, args.seconds, args.out)
    analyse(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
