"""Does Σ (isolated op × count) predict the full model? Trace, replay, compare (latency and energy).

For each configuration: ``energyframe trace`` profiles the workload (eager), ``replay`` rebuilds
every unique leaf op, measures it in isolation in CUDA graphs with NVML, and measures the full
model beside it; the table gives measured and predicted latency and energy per inference, their
errors, the coverage of traced GPU time, the ops that could not be rebuilt, and the idle time the
trace shows between kernels (what the replayed sum leaves out).

Run on a GPU: ``python benchmarks/replay_prediction.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import energyframe as ef
from energyframe.replay.capture import capture

CONFIGS = [
    "bloom-560m:seq_len=5",
    "bloom-560m:seq_len=128",
    "resnet50:batch=1",
    "resnet50:batch=32",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="semicolon-separated workload specs instead of the default four")
    ap.add_argument("--json")
    ap.add_argument(
        "--ops", type=int, default=0, help="list the N ops whose replay differs most from the trace"
    )
    args = ap.parse_args()
    import torch

    rows: list[dict] = []
    failed: list[dict] = []
    for spec in args.only.split(";") if args.only else CONFIGS:
        folder = Path(tempfile.mkdtemp(prefix="trace-"))
        t0 = time.monotonic()
        try:
            traced = capture(spec, folder / "trace", steps=3, warmup=3)
            ef.run(
                f"replay:trace={folder / 'trace'}", power=["nvml:gpus=0"], reporters=[], out=folder / "run"
            )
        except Exception as e:  # one failing configuration must not lose the others
            print(f"{spec:28s} FAILED: {type(e).__name__}: {e}", flush=True)
            failed.append({"spec": spec, "error": f"{type(e).__name__}: {e}"})
            continue
        report = json.loads((folder / "run" / "comparison_report.json").read_text())
        gap = report["gap_analysis"]
        rows.append(
            {
                "spec": spec,
                "wall_s": time.monotonic() - t0,
                "unique_kernels": traced["unique_kernels"],
                "unique_leaf_ops": traced["unique_leaf_ops"],
                **{k: v for k, v in report.items() if not isinstance(v, (dict, list))},
                "gap": gap,
                "tiers": report["tier_breakdown"],
                "not_rebuilt": report["not_rebuilt"],
                "run_dir": str(folder / "run"),
            }
        )
        r = rows[-1]
        print(
            f"{spec:28s} latency {r['full_model_inference_us'] / 1e3:8.3f} ms measured, "
            f"{r['predicted_from_kernels_us'] / 1e3:8.3f} predicted ({r['error_percent']:+6.1f} %), "
            f"+ idle gaps {gap['traced_gpu_idle_us'] / 1e3:6.3f} ms -> {gap['predicted_plus_idle_error_percent']:+6.1f} %; "
            f"energy {r['full_model_energy_j']:7.3f} J vs {r['predicted_energy_j']:7.3f} J "
            f"({r['energy_error_percent']:+6.1f} %, with idle {gap['predicted_plus_idle_energy_error_percent']:+6.1f} %); "
            f"as one CUDA graph {r['full_model_graph_inference_us'] / 1e3:8.3f} ms ({r['graph_error_percent']:+6.1f} %), "
            f"{r['full_model_graph_energy_j']:7.3f} J ({r['graph_energy_error_percent']:+6.1f} %) "
            f"[{r['full_model_graph_execution']}]; "
            f"coverage {r['coverage_percent_of_gpu_time']:5.1f} %; not rebuilt {len(r['not_rebuilt'])} "
            f"({r['not_rebuilt_share_percent_of_gpu_time']:.2f} % of GPU time) of {r['unique_leaf_ops']} ops; "
            f"{r['wall_s']:.0f} s",
            flush=True,
        )
        for miss in r["not_rebuilt"][:5]:
            print(f"    not rebuilt: {miss['op']} {miss['inputs']}: {miss['reason'][:150]}")
        if args.ops:
            rows[-1]["ops"] = worst_ops(folder / "run", args.ops)
        save(args.json, torch.cuda.get_device_name(0), rows + failed)
    print(
        f"\nreplay prediction on {torch.cuda.get_device_name(0)}, {time.strftime('%Y-%m-%d')}, eager full model, "
        "ops in CUDA graphs, NVML"
    )
    return 1 if failed else 0


def worst_ops(run_dir: Path, n: int) -> list[dict]:
    """The ops whose replayed time per call differs most (in total per iteration) from the time
    their kernels took in the trace: where a prediction miss comes from."""
    from energyframe.results import RunResult

    ops = RunResult.load(run_dir).derived_table("replayed_ops").rows
    for op in ops:
        op["replayed_us"] = op["latency_s"] * 1e6
        op["gap_us_per_iteration"] = op["count"] * (op["traced_us_per_call"] - op["replayed_us"])
    worst = sorted(ops, key=lambda o: -abs(o["gap_us_per_iteration"]))[:n]
    for op in worst:
        print(
            f"    {op['op'][:70]:70s} x{op['count']:5.1f}: traced {op['traced_us_per_call']:8.2f} us, "
            f"replayed {op['replayed_us']:8.2f} us per call ({op['gap_us_per_iteration']:+8.1f} us per iteration)"
        )
    return [
        {k: op[k] for k in ("op", "count", "traced_us_per_call", "replayed_us", "kernels")} for op in worst
    ]


def save(path: str | None, device: str, rows: list[dict]) -> None:
    """Write what is measured so far (after every configuration: a cut-off run keeps its rows)."""
    if path:
        Path(path).write_text(
            json.dumps(
                {"device": device, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1, default=str
            )
        )


if __name__ == "__main__":
    sys.exit(main())
