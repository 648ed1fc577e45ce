"""Does the per-layer sum equal the whole model? Latency and energy, per model and setting.

For each configuration, a per-layer run (``per-layer:model=...,validate=true``) measures every unique unit (CUDA
graphs, weights rotated or warm) and the whole model (a CUDA graph of its forward), and prints
Σ count x per-call figures against the whole model, with the wall time of the run.

Run on a GPU: ``python benchmarks/closure.py [--set core|all] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import energyframe as ef
from energyframe.workloads.perlayer import per_layer_spec

CORE = [
    "resnet50:batch=1,granularity=leaf,l2=rotate",
    "resnet50:batch=1,granularity=leaf,l2=warm",
    "resnet50:batch=1,granularity=block,l2=rotate",
    "resnet50:batch=1,granularity=block,l2=warm",
    "resnet50:batch=64,granularity=leaf,l2=rotate",
    "resnet50:batch=64,granularity=block,l2=rotate",
]
OTHERS = [
    "resnet18:batch=1,granularity=block",
    "resnet18:batch=64,granularity=block",
    "mobilenet_v3_small:batch=1,granularity=block",
    "efficientnet_b0:batch=1,granularity=block",
    "vit_b_16:batch=1,granularity=block",
    "replknet31b:batch=1,granularity=block",
    "opt-66b-prefill:batch=1,prompt_len=512",
    "opt-66b-decode:batch=1,kv_len=512",
]


def _pct(value) -> str:
    return "-" if value is None else f"{value:.2f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("core", "others", "all"), default="all")
    ap.add_argument("--only", help="comma-separated specs instead of a set")
    ap.add_argument("--power", default="nvml:gpus=0", help="power spec (none: timing only, for a dry run)")
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    specs = (
        args.only.split(";")
        if args.only
        else {"core": CORE, "others": OTHERS, "all": CORE + OTHERS}[args.set]
    )
    rows = []
    for spec in specs:
        t0 = time.monotonic()
        try:
            power = None if args.power == "none" else [args.power]
            result = ef.run(per_layer_spec(spec, validate=True), power=power, reporters=[])
        except Exception as e:  # one model that does not fit must not stop the table
            rows.append({"spec": spec, "error": f"{type(e).__name__}: {e}"[:200]})
            print(f"{spec}: {rows[-1]['error']}", flush=True)
            continue
        wall = time.monotonic() - t0
        s = result.derived_table("summary").rows[0]
        layers = result.derived_table("layers").rows
        cvs = [r["energy_cv_pct"] for r in layers if r["energy_cv_pct"] == r["energy_cv_pct"]]
        rows.append(
            {
                "spec": spec,
                "units": s["unique_units"],
                "calls": s["calls"],
                "deduplicated": s["deduplicated_calls"],
                "sum_latency_s": s["sum_latency_s"],
                "whole_latency_s": s["whole_latency_s"],
                "latency_diff_pct": s["latency_diff_pct"],
                "sum_energy_j": s["sum_energy_j"],
                "whole_energy_j": s["whole_energy_j"],
                "energy_diff_pct": s["energy_diff_pct"],
                "median_energy_cv_pct": sorted(cvs)[len(cvs) // 2] if cvs else None,
                "max_energy_cv_pct": max(cvs) if cvs else None,
                "wall_s": wall,
                "eager_units": sum(1 for r in layers if r["execution"] != "cuda graph"),
            }
        )
        r = rows[-1]
        print(
            f"{spec:52s} units {r['units']:3d}/{r['calls']:4d}  latency {r['sum_latency_s'] * 1e3:8.3f} vs "
            f"{r['whole_latency_s'] * 1e3:8.3f} ms ({r['latency_diff_pct']:+6.1f}%)  energy "
            f"{r['sum_energy_j'] * 1e3:9.2f} vs {r['whole_energy_j'] * 1e3:9.2f} mJ ({r['energy_diff_pct']:+6.1f}%)  "
            f"CV med {_pct(r['median_energy_cv_pct'])} max {_pct(r['max_energy_cv_pct'])}  {wall:5.0f} s",
            flush=True,
        )
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    print(f"\nper-layer closure on {device}, {time.strftime('%Y-%m-%d')}, fp16, CUDA graphs, nvml")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": device, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
