"""Whether a counter window's bound holds the truth when the sampler polls less often: the tests'
fake NVML (a constant power, ticks every 100 ms, a field query of ``--cost-ms`` that reads as it
begins), sampled by the nvml source with each ``--intervals`` pause between polls, windows of
0.25-0.35 s; per pause: the brackets around the ticks (how far apart the two polls around each
read), the stamp half-width the run took (``Channel.stamp_s``), the windows' |error| against the
truth (power times duration) and the share inside their random bound (the 95 % bound's part that
the stamps are in; the sensor's stated accuracy is no error of the fake).

    python benchmarks/stamp_bound.py --intervals 1,4,8 --windows 60     # about 1.5 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POWER_W = 300.0


def use_fake(cost_ms: float) -> None:
    """``import pynvml`` here and in the sampler process is the tests' fake, ticking from now."""
    scenario = {
        "t0_wall": time.time(),
        "gpus": [{"uuid": "GPU-52dfc441-e9da-23f3-17f9-2b876aae0d10", "name": "NVIDIA H200", "power_w": POWER_W, "field_cost_s": cost_ms / 1e3}],
    }
    path = Path(tempfile.mkdtemp(prefix="stamp-bound-")) / "scenario.json"
    path.write_text(json.dumps(scenario))
    fake = str(ROOT / "tests" / "fake_nvml")
    os.environ["FAKE_NVML_SCENARIO"] = str(path)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [fake, os.environ.get("PYTHONPATH", "")] if p)
    sys.path.insert(0, fake)


def one(interval_ms: int, windows: int, seed: int) -> dict:
    import energyframe as ef
    from energyframe.power.nvml import NVMLPowerSource

    rng = random.Random(seed)
    source = NVMLPowerSource(name="nvml", gpus="0", interval_ms=interval_ms)
    with ef.measure(power=[source], sync=None) as m:
        for _ in range(windows):
            with m.window("w"):
                time.sleep(0.25 + 0.1 * rng.random())
            time.sleep(0.05 * rng.random())
    w = m.result.windows
    w = w[w["channel"] == "gpu0"]
    error = (w["energy_j"] - POWER_W * w["duration_s"]).abs()
    (meta,) = m.result.meta["sources"]
    (counter,) = [c for c in meta["channels"] if c["name"] == "gpu0"]
    brackets = meta["info"]["acquisition"]["tick_brackets_s"]["gpu0"]
    return {
        "interval_ms": interval_ms,
        "windows": int(len(w)),
        "bracket_median_ms": 1e3 * brackets["median"],
        "stamp_s_ms": 1e3 * counter.get("stamp_s", 0.0),
        "error_median_j": float(error.median()),
        "error_max_j": float(error.max()),
        "bound_median_j": float(w["energy_random_j"].median()),
        "inside_pct": 100.0 * float((error <= w["energy_random_j"]).mean()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--intervals", default="1,4,8", help="pauses between polls, ms, comma-separated")
    ap.add_argument("--windows", type=int, default=60)
    ap.add_argument("--cost-ms", type=float, default=3.0, help="how long the fake's field query takes")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    use_fake(args.cost_ms)
    rows = [one(int(i), args.windows, seed=k) for k, i in enumerate(args.intervals.split(","))]
    print(f"stamps and bounds on the fake NVML ({args.cost_ms:g}-ms query, {POWER_W:g} W), {time.strftime('%Y-%m-%d')}")
    print("| pause between polls | windows | bracket median | stamp half-width taken | |error| median / max | random bound median | inside |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['interval_ms']} ms | {r['windows']} | {r['bracket_median_ms']:.2f} ms | {r['stamp_s_ms']:.2f} ms (at least 2) | "
              f"{r['error_median_j']:.3f} / {r['error_max_j']:.3f} J | {r['bound_median_j']:.3f} J | {r['inside_pct']:.0f} % |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
