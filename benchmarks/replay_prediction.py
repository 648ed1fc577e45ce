"""Does Σ (isolated op × count) predict the full model? Trace, replay, compare (latency and energy).

For each configuration: ``energyframe trace`` profiles the workload (eager), ``replay`` rebuilds
every unique leaf op, measures it in isolation in CUDA graphs with NVML, and measures the full
model beside it, eager and as one CUDA graph (language models through their static forward,
which a graph captures whole). The graph's replays are profiled once to count its kernels and
their busy time: the launch gap per kernel. Printed per configuration: measured and predicted
latency and energy per inference against the graph, with and without the kernels' launch gaps,
against the eager model, the coverage of traced GPU time and the ops that could not be rebuilt;
at the end, the table for docs/validation.md.

Run on a GPU: ``python benchmarks/replay_prediction.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import energyframe as ef
from energyframe.replay.capture import capture

CONFIGS = [
    "bloom-560m:seq_len=5,forward=static",
    "bloom-560m:seq_len=128,forward=static",
    "opt-1.3b:seq_len=5,forward=static",
    "resnet50:batch=1",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="semicolon-separated workload specs instead of the default four")
    ap.add_argument(
        "--kernel-gap-us", type=float, help="a launch gap per kernel to use instead of each graph's own"
    )
    ap.add_argument(
        "--l2", choices=("rotate", "all", "warm"), default="rotate", help="the replay's l2 option (docs/replay.md)"
    )
    ap.add_argument("--power", default="nvml:gpus=0", help="power spec (none: timing only, for a dry run)")
    ap.add_argument("--json")
    ap.add_argument(
        "--ops", type=int, default=0, help="list the N ops whose replay differs most from the trace"
    )
    args = ap.parse_args()
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    rows: list[dict] = []
    failed: list[dict] = []
    for spec in args.only.split(";") if args.only else CONFIGS:
        folder = Path(tempfile.mkdtemp(prefix="trace-"))
        t0 = time.monotonic()
        try:
            traced = capture(spec, folder / "trace", steps=3, warmup=3)
            gap = f",kernel_gap_us={args.kernel_gap_us}" if args.kernel_gap_us is not None else ""
            ef.run(
                f"replay:trace={folder / 'trace'}{gap},l2={args.l2}",
                power="none" if args.power == "none" else [args.power],
                reporters=[],
                out=folder / "run",
            )
        except Exception as e:  # one failing configuration must not lose the others
            print(f"{spec:28s} FAILED: {type(e).__name__}: {e}", flush=True)
            failed.append({"spec": spec, "error": f"{type(e).__name__}: {e}"})
            continue
        report = unknown_as_nan(json.loads((folder / "run" / "comparison_report.json").read_text()))
        gap = report["gap_analysis"]
        rows.append(
            {
                "spec": spec,
                "wall_s": time.monotonic() - t0,
                "unique_kernels": traced["unique_kernels"],
                "unique_leaf_ops": traced["unique_leaf_ops"],
                **{k: v for k, v in report.items() if not isinstance(v, (dict, list))},
                "gap": gap,
                "kernel_gap_model": report["kernel_gap_model"],
                "tiers": report["tier_breakdown"],
                "not_rebuilt": report["not_rebuilt"],
                "run_dir": str(folder / "run"),
            }
        )
        r = rows[-1]
        k = r["kernel_gap_model"]
        print(
            f"{spec:40s} graph {r['full_model_graph_inference_us'] / 1e3:7.3f} ms {r['full_model_graph_energy_j']:7.4f} J "
            f"[{r['full_model_graph_execution']}]; Σ replay {r['predicted_from_kernels_us'] / 1e3:7.3f} ms "
            f"({r['graph_error_percent']:+6.1f} %) {r['predicted_energy_j']:7.4f} J ({r['graph_energy_error_percent']:+6.1f} %); "
            f"+ {k['kernels_per_inference']:.0f} kernels x {k['gap_per_kernel_us']:.2f} us -> "
            f"{r['predicted_with_kernel_gaps_us'] / 1e3:7.3f} ms ({r['kernel_gap_error_percent']:+6.1f} %), "
            f"{r['predicted_with_kernel_gaps_energy_j']:7.4f} J ({r['kernel_gap_energy_error_percent']:+6.1f} %); "
            f"Σ vs graph kernels {k['sum_vs_graph_kernels_percent']:+6.1f} %; "
            f"eager {r['full_model_inference_us'] / 1e3:7.3f} ms ({r['error_percent']:+6.1f} %); "
            f"coverage {r['coverage_percent_of_gpu_time']:5.1f} %; not rebuilt {len(r['not_rebuilt'])} "
            f"({r['not_rebuilt_share_percent_of_gpu_time']:.2f} % of GPU time) of {r['unique_leaf_ops']} ops; "
            f"{r['wall_s']:.0f} s",
            flush=True,
        )
        for miss in r["not_rebuilt"][:5]:
            print(f"    not rebuilt: {miss['op']} {miss['inputs']}: {miss['reason'][:150]}")
        if args.ops:
            rows[-1]["ops"] = worst_ops(folder / "run", args.ops)
        save(args.json, device, rows + failed)
    print(
        f"\nreplay prediction on {device}, {time.strftime('%Y-%m-%d')}, "
        "ops in CUDA graphs of 20 calls, full model as one CUDA graph, NVML; per inference\n"
    )
    print(table(rows))
    return 1 if failed else 0


def table(rows: list[dict]) -> str:
    """The markdown table docs/validation.md records: Σ replay against the graph, latency and
    energy, without and with the graph's kernel launch gaps."""
    lines = [
        "| workload | full model, one CUDA graph | Σ replayed ops | error | kernels × gap | Σ + gaps | error | Σ vs graph kernels |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        k = r["kernel_gap_model"]
        lines.append(
            f"| {r['spec']} | {r['full_model_graph_inference_us'] / 1e3:.3f} ms, {r['full_model_graph_energy_j']:.4f} J "
            f"| {r['predicted_from_kernels_us'] / 1e3:.3f} ms, {r['predicted_energy_j']:.4f} J "
            f"| {r['graph_error_percent']:+.1f} %, {r['graph_energy_error_percent']:+.1f} % "
            f"| {k['kernels_per_inference']:.0f} × {k['gap_per_kernel_us']:.2f} µs "
            f"| {r['predicted_with_kernel_gaps_us'] / 1e3:.3f} ms, {r['predicted_with_kernel_gaps_energy_j']:.4f} J "
            f"| {r['kernel_gap_error_percent']:+.1f} %, {r['kernel_gap_energy_error_percent']:+.1f} % "
            f"| {k['sum_vs_graph_kernels_percent']:+.1f} % |"
        )
    return "\n".join(lines)


def unknown_as_nan(value):
    """The report's nulls (figures not measured) as NaN, which formats as a number does."""
    if value is None:
        return math.nan
    if isinstance(value, dict):
        return {k: unknown_as_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unknown_as_nan(v) for v in value]
    return value


def worst_ops(run_dir: Path, n: int) -> list[dict]:
    """The ops whose replayed time per call differs most (in total per iteration) from the time
    their kernels took in the trace: where a prediction miss comes from."""
    from energyframe.results.result import RunResult

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
