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
        save(args.json, torch.cuda.get_device_name(0), rows + failed)
    print(
        f"\nreplay prediction on {torch.cuda.get_device_name(0)}, {time.strftime('%Y-%m-%d')}, eager full model, "
        "ops in CUDA graphs, NVML"
    )
    return 1 if failed else 0


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
