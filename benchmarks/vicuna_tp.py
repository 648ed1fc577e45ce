"""Vicuna-7B split over tp GPUs: prefill and decode latency and energy per token per GPU as a
serving stack runs them (each one CUDA graph replay, the all-reduces inside), beside the decode's
weight-read floor; the per-rank replay prediction against that graph, and the communication share.

Per phase (prefill of ``--seq-len`` tokens; decode of ``--new-tokens`` tokens on that prompt's KV
cache), every rank: ``energyframe trace`` profiles its own process running the same calls eagerly
(``execution=eager``; ``OUT/<phase>/trace/rank<R>``), then ``replay`` measures the model over all
ranks, eagerly and as its CUDA graph, beside each of its rank's unique ops and collectives in
isolation, each in CUDA graphs, on its own GPU (NVML, by UUID); rank 0 saves the run once
(``OUT/<phase>/run``, each rank's report in ``rank<R>/``), gathers every rank's figures and
prints one row per phase and rank, and the totals over the GPUs. The prediction is Σ isolated ops
+ collectives + the graph's launch gaps against the graph (replay's ``kernel_gap_error_percent``).

    torchrun --standalone --nproc-per-node 2 benchmarks/vicuna_tp.py [--json vicuna_tp2.json]
    python benchmarks/vicuna_tp.py --json vicuna_tp1.json          # tp=1 on one GPU

``--cpu --shrink hidden=64,layers=2,heads=4,vocab=128`` runs the same steps on the CPU over gloo,
timing only (a check of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import energyframe as ef
from energyframe.replay.capture import capture
from energyframe.workloads import distributed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-len", type=int, default=512, help="prompt tokens (prefill)")
    ap.add_argument("--new-tokens", type=int, default=16, help="tokens per decode step")
    ap.add_argument("--phases", default="prefill,decode")
    ap.add_argument("--trials", type=int, default=5, help="windows per measured phase")
    ap.add_argument("--limit", type=int, default=None, help="replay only the N ops with the most GPU time")
    ap.add_argument("--out", default="runs/vicuna_tp", help="trace and run directories")
    ap.add_argument("--json", help="write every rank's figures here (rank 0)")
    ap.add_argument("--shrink", default="", help="vicuna-7b options that shrink it (hidden=64,layers=2,...)")
    ap.add_argument("--cpu", action="store_true", help="on the CPU, timing only (checks the script)")
    ap.add_argument("--window-s", type=float, default=1.0, help="shortest window (as --min-window)")
    args = ap.parse_args(argv)
    import torch

    w = distributed.world()
    tp = w.world_size
    if args.cpu:
        device = torch.device("cpu")
    else:
        device = distributed.rank_device("cuda", w) if tp > 1 else torch.device("cuda", 0)
    if tp > 1:
        distributed.join(device)  # for gathering the ranks' figures at the end
    if args.cpu:
        power, gpu = "none", "cpu"
    else:  # each rank measures its own GPU
        power = [f"nvml:gpus=GPU-{torch.cuda.get_device_properties(device).uuid}"]
        gpu = torch.cuda.get_device_name(device)
    device_option = ",device=cpu" if args.cpu else ""
    extra = f",window_s={args.window_s}{device_option}" + (f",{args.shrink}" if args.shrink else "")
    out = Path(args.out) / f"tp{tp}"
    rows = []
    for phase in args.phases.split(","):
        # the trace profiles the eager calls; replay measures the graph beside them (a twin with
        # execution=graph)
        spec = (
            f"vicuna-7b:tp={tp},mode={phase},seq_len={args.seq_len},new_tokens={args.new_tokens},"
            f"execution=eager{extra}"
        )
        t0 = time.monotonic()
        traced = capture(spec, out / phase / "trace", steps=3, warmup=3)
        if tp > 1:
            distributed.wait_for_ranks()  # every rank's trace is written before any replays
        replay = f"replay:trace={out / phase / 'trace'},window_s={args.window_s}{device_option}"
        replay += f",limit={args.limit}" if args.limit else ""
        run_dir = out / phase / "run"  # rank 0 saves the one run; each rank's report in rank<R>/
        ef.run(
            replay,
            power=power,
            reporters=[],
            out=run_dir,
            settings=ef.RunSettings(trials=args.trials),
        )
        mine = run_dir / distributed.rank_dir_name(w.rank) if tp > 1 else run_dir
        report = json.loads((mine / "comparison_report.json").read_text(), object_hook=_nan)
        tokens = args.seq_len if phase == "prefill" else args.new_tokens
        rows.append(row_of(report, traced, phase, w.rank, tp, gpu, tokens, time.monotonic() - t0, run_dir))
    everyone = [r for ranks in distributed.gather(rows) for r in ranks] if tp > 1 else rows
    if w.rank == 0:
        print_table(everyone, tp)
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {"date": time.strftime("%Y-%m-%d"), "tp": tp, "rows": everyone}, indent=1, default=str
                )
            )
    if tp > 1:
        distributed.leave()
    return 0


def row_of(report: dict, traced: dict, phase: str, rank: int, tp: int, gpu: str, tokens: int, wall_s: float, run_dir) -> dict:
    """One phase on one rank: the model as its CUDA graph (where it ran as one; else eagerly)
    against Σ replayed ops + collectives + the graph's launch gaps, per token."""
    graph = math.isfinite(report["full_model_graph_inference_us"])
    comm = report["communication"]
    measured_us = report["full_model_graph_inference_us"] if graph else report["full_model_inference_us"]
    measured_j = report["full_model_graph_energy_j"] if graph else report["full_model_energy_j"]
    predicted_us = report["predicted_with_kernel_gaps_us"] if graph else report["predicted_from_kernels_us"]
    predicted_j = report["predicted_with_kernel_gaps_energy_j"] if graph else report["predicted_energy_j"]
    return {
        "phase": phase,
        "rank": rank,
        "tp": tp,
        "gpu": gpu,
        "measured_as": report.get("full_model_graph_execution") if graph else "eager",
        "tokens_per_iteration": tokens,
        "latency_per_token_s": measured_us * 1e-6 / tokens,
        "energy_per_token_j": measured_j / tokens,
        "eager_latency_per_token_s": report["full_model_inference_us"] * 1e-6 / tokens,
        "predicted_latency_per_token_s": predicted_us * 1e-6 / tokens,
        "predicted_energy_per_token_j": predicted_j / tokens,
        "error_percent": report["kernel_gap_error_percent"] if graph else report["error_percent"],
        "energy_error_percent": (
            report["kernel_gap_energy_error_percent"] if graph else report["energy_error_percent"]
        ),
        "without_gaps_error_percent": report["graph_error_percent"] if graph else math.nan,
        "gap_per_kernel_us": report["kernel_gap_model"]["gap_per_kernel_us"],
        "communication_share_percent": comm["share_of_predicted_percent"],
        "communication_energy_share_percent": comm["energy_share_of_predicted_percent"],
        "traced_communication_share_percent": comm["traced_share_percent_of_gpu_time"],
        "collective_calls_per_iteration": comm["calls_per_iteration"],
        "coverage_percent_of_gpu_time": report["coverage_percent_of_gpu_time"],
        "not_rebuilt": len(report["not_rebuilt"]),
        "unique_kernels": traced["unique_kernels"],
        "wall_s": wall_s,
        "run_dir": str(run_dir),
    }


def _nan(d: dict) -> dict:
    """The report saves NaN (a figure a timing-only run lacks) as null: read it back as NaN."""
    return {k: math.nan if v is None else v for k, v in d.items()}


def print_table(rows: list[dict], tp: int) -> None:
    from rich.console import Console
    from rich.table import Table

    where = rows[0]["gpu"]
    measured = "timing only" if where == "cpu" else "each rank's own GPU, NVML"
    table = Table(title=f"vicuna-7b, tp={tp}, {where}: per token ({measured})")
    for column in (
        "phase",
        "rank",
        "measured as",
        "latency/token",
        "energy/token",
        "predicted",
        "error",
        "energy predicted",
        "energy error",
        "comm share",
        "comm (traced)",
        "coverage",
    ):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            r["phase"],
            str(r["rank"]),
            str(r["measured_as"]),
            f"{r['latency_per_token_s'] * 1e3:.3f} ms",
            f"{r['energy_per_token_j']:.4f} J",
            f"{r['predicted_latency_per_token_s'] * 1e3:.3f} ms",
            f"{r['error_percent']:+.1f} %",
            f"{r['predicted_energy_per_token_j']:.4f} J",
            f"{r['energy_error_percent']:+.1f} %",
            f"{r['communication_share_percent']:.1f} %",
            f"{r['traced_communication_share_percent']:.1f} %",
            f"{r['coverage_percent_of_gpu_time']:.1f} %",
        )
    for phase in dict.fromkeys(r["phase"] for r in rows):
        mine = [r for r in rows if r["phase"] == phase]
        table.add_row(
            phase,
            "all GPUs",
            "",
            f"{max(r['latency_per_token_s'] for r in mine) * 1e3:.3f} ms",
            f"{sum(r['energy_per_token_j'] for r in mine):.4f} J",
            f"{max(r['predicted_latency_per_token_s'] for r in mine) * 1e3:.3f} ms",
            "",
            f"{sum(r['predicted_energy_per_token_j'] for r in mine):.4f} J",
            "",
            "",
            "",
            "",
        )
    Console(width=180).print(table)
    print(
        "latency: the whole model over all ranks as its CUDA graph (each rank's window, opened and closed "
        "together); predicted: Σ isolated op x count on that rank, collectives included, each in CUDA "
        "graphs, + the graph's launch gaps; comm share: the collectives' part of the prediction (traced: "
        "of the trace's GPU time)"
    )


if __name__ == "__main__":
    sys.exit(main())
