"""Models none of the named workloads covers: per-layer closure and replay prediction.

For each model (a torchvision ConvNeXt, a timm ViT, a Llama-shaped transformers config, and the
encoder and encoder-decoder families transformers ships: BERT, DistilBERT, RoBERTa, ALBERT,
DeBERTa-v2, T5, BART, built from their configs' defaults):

1. ``per-layer:model=...,validate=true`` with the defaults (blocks found from the module tree,
   ``granularity=auto``): Σ units against the whole model as one CUDA graph, latency and energy;
2. for the first three, ``energyframe trace`` of the model (eager), then ``replay``: every unique
   leaf op in CUDA graphs, the full model eager and as one CUDA graph, and the prediction Σ ops +
   kernels × launch gap against the graph, latency and energy.

Targets (docs/validation.md, as for the named models): closure within 5 %, replay within 10 %.
Prints one line per step as it goes and the table at the end; ``--json`` keeps every figure.

On one GPU (about 5 minutes on an H100 for the first three, 3 more for the encoders)::

    python benchmarks/any_model.py --json any_model.json
    python benchmarks/any_model.py --only 3 --only 4 --json encoders.json   # the issue's two encoders

``--dry-run`` runs the same steps on tiny versions of the three models, timing only, on the CPU
(what tests/test_any_model_benchmark.py runs).
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

#: (model spec, batch) measured on a GPU: fp16, the defaults of every option not given
MODELS = [
    ("torchvision:name=convnext_tiny", 32),
    ("timm:name=vit_small_patch16_224", 64),
    (
        "hf:arch=LlamaForCausalLM,hidden_size=2048,intermediate_size=5632,num_hidden_layers=16,"
        "num_attention_heads=16,num_key_value_heads=4,vocab_size=32000,seq_len=512",
        1,
    ),
    # issue 38's encoders (768 wide: BERT 12 layers, DistilBERT 6), then the other families
    ("hf:arch=BertModel,seq_len=128", 16),
    ("hf:arch=DistilBertModel,seq_len=256", 8),
    ("hf:arch=RobertaModel,seq_len=128", 16),
    ("hf:arch=AlbertModel,seq_len=128", 16),
    ("hf:arch=DebertaV2Model,seq_len=128", 8),
    ("hf:arch=T5Model,seq_len=128", 8),
    ("hf:arch=BartModel,seq_len=128", 8),
]
#: the models also traced and replayed (the encoders are measured for their closure)
REPLAYED = 3
#: the same, tiny, for a dry run on the CPU
TINY = [
    ("torchvision:name=convnext_tiny,image_size=32", 1),
    ("timm:name=vit_tiny_patch16_224,image_size=32", 1),
    (
        "hf:arch=LlamaForCausalLM,hidden_size=64,intermediate_size=128,num_hidden_layers=2,"
        "num_attention_heads=4,num_key_value_heads=2,vocab_size=256,seq_len=8",
        1,
    ),
    (
        "hf:arch=BertModel,hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,"
        "vocab_size=100,seq_len=8",
        2,
    ),
    (
        "hf:arch=BartModel,d_model=32,encoder_layers=1,decoder_layers=1,encoder_attention_heads=2,"
        "decoder_attention_heads=2,encoder_ffn_dim=64,decoder_ffn_dim=64,vocab_size=100,seq_len=8",
        2,
    ),
]
CLOSURE_TARGET_PCT = 5.0
REPLAY_TARGET_PCT = 10.0


def with_batch(spec: str, batch: int) -> str:
    return f"{spec},batch={batch}"


def num(value):
    """A figure the run did not measure (None, as timing-only runs leave energy) as NaN."""
    return math.nan if value is None else value


def closure(spec: str, power, settings, extra: str) -> dict:
    """The per-layer run: Σ units against the whole model."""
    name, _, options = spec.partition(":")
    result = ef.run(
        f"per-layer:model={name},{options},validate=true{extra}", power=power, reporters=[], settings=settings
    )
    s = {k: num(v) for k, v in result.derived_table("summary").rows[0].items()}
    layers = result.derived_table("layers").rows
    return {
        "units": s["unique_units"],
        "calls": s["calls"],
        "granularity": s["granularity_choice"],
        "blocks": s["blocks"],
        "sum_latency_s": s["sum_latency_s"],
        "whole_latency_s": s["whole_latency_s"],
        "closure_latency_pct": s["latency_diff_pct"],
        "sum_energy_j": s["sum_energy_j"],
        "whole_energy_j": s["whole_energy_j"],
        "closure_energy_pct": s["energy_diff_pct"],
        "eager_units": sum(1 for r in layers if r["execution"] != "cuda graph"),
        "residual_cause": s.get("residual_cause"),
    }


def replay(spec: str, power, settings, folder: Path, extra: str) -> dict:
    """Trace, then replay: Σ ops (+ launch gaps) against the full model as one CUDA graph."""
    traced = capture(spec, folder / "trace", steps=3, warmup=3)
    ef.run(
        f"replay:trace={folder / 'trace'}{extra}", power=power, reporters=[], out=folder / "run", settings=settings
    )
    report = json.loads((folder / "run" / "comparison_report.json").read_text())

    def figure(key: str) -> float:
        return float(num(report.get(key)))

    on_graph = math.isfinite(figure("full_model_graph_inference_us"))
    return {
        "unique_leaf_ops": traced["unique_leaf_ops"],
        "graph_execution": report.get("full_model_graph_execution"),
        "coverage_pct": figure("coverage_percent_of_gpu_time"),
        "not_rebuilt": len(report.get("not_rebuilt") or []),
        # against the graph with the launch gaps where there is one (a GPU), else the eager model
        "replay_latency_pct": figure("kernel_gap_error_percent") if on_graph else figure("error_percent"),
        "replay_energy_pct": figure("kernel_gap_energy_error_percent") if on_graph else figure("energy_error_percent"),
        "replay_against": "graph + launch gaps" if on_graph else "eager",
        "replay_dir": str(folder / "run"),
    }


def verdict(value: float, target: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    return "ok" if abs(value) <= target else "MISS"


def table(rows: list[dict]) -> str:
    lines = [
        "| model | batch | units | Σ units vs whole: latency | energy | replay vs graph: latency | energy | coverage | wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | FAILED: {r['error'][:120]} |||||||")
            continue
        lines.append(
            f"| {r['model']} | {r['batch']} | {r.get('units', '-')} {str(r.get('granularity', '')).split(' (')[0]} "
            f"| {r.get('closure_latency_pct', math.nan):+.1f} % {verdict(r.get('closure_latency_pct', math.nan), CLOSURE_TARGET_PCT)} "
            f"| {r.get('closure_energy_pct', math.nan):+.1f} % {verdict(r.get('closure_energy_pct', math.nan), CLOSURE_TARGET_PCT)} "
            f"| {r.get('replay_latency_pct', math.nan):+.1f} % {verdict(r.get('replay_latency_pct', math.nan), REPLAY_TARGET_PCT)} "
            f"| {r.get('replay_energy_pct', math.nan):+.1f} % {verdict(r.get('replay_energy_pct', math.nan), REPLAY_TARGET_PCT)} "
            f"| {r.get('coverage_pct', math.nan):.1f} % | {r['wall_s']:.0f} s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny models, timing only, on the CPU")
    ap.add_argument("--power", default="nvml", help="power spec (default nvml: the GPUs CUDA_VISIBLE_DEVICES shows; none: timing only)")
    ap.add_argument(
        "--only", type=int, action="append", help="index of a model to run (0 .. 9, in MODELS' order); repeatable"
    )
    ap.add_argument("--json", help="write every figure here (after each model)")
    args = ap.parse_args(argv)
    import torch

    models = TINY if args.dry_run else MODELS
    power = "none" if args.dry_run or args.power == "none" else [args.power]
    settings = ef.RunSettings(trials=1, min_window_s=0.01, idle_s=0.0) if args.dry_run else None
    closure_extra = ",unroll=2,whole_unroll=2" if args.dry_run else ""
    replay_extra = ",unroll=2,limit=6" if args.dry_run else ""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    rows: list[dict] = []
    for index, (spec, batch) in enumerate(models):
        if args.only and index not in args.only:
            continue
        model = with_batch(spec, batch)
        row: dict = {"model": spec.split(",")[0], "spec": model, "batch": batch}
        t0 = time.monotonic()
        try:
            row.update(closure(model, power, settings, closure_extra))
            print(
                f"{row['model']:34s} closure: latency {row['closure_latency_pct']:+6.1f} %, energy "
                f"{row['closure_energy_pct']:+6.1f} % ({row['units']} units, {row['granularity']}; "
                f"blocks {row['blocks']}; {row['eager_units']} eager); {row['residual_cause']}",
                flush=True,
            )
            if index < REPLAYED:  # the encoders are measured for their closure
                row.update(replay(model, power, settings, Path(tempfile.mkdtemp(prefix="any-model-")), replay_extra))
                print(
                    f"{row['model']:34s} replay: latency {row['replay_latency_pct']:+6.1f} %, energy "
                    f"{row['replay_energy_pct']:+6.1f} % against the {row['replay_against']} "
                    f"({row['graph_execution']}); coverage {row['coverage_pct']:.1f} %, "
                    f"{row['not_rebuilt']} of {row['unique_leaf_ops']} ops not rebuilt",
                    flush=True,
                )
        except Exception as e:  # one model that fails must not lose the others' figures
            row["error"] = f"{type(e).__name__}: {e}"
            print(f"{row['model']:34s} FAILED: {row['error'][:300]}", flush=True)
        row["wall_s"] = time.monotonic() - t0
        rows.append(row)
        if args.json:
            Path(args.json).write_text(
                json.dumps({"device": device, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1, default=str)
            )
    print(
        f"\nany model on {device}, {time.strftime('%Y-%m-%d')}: per-layer closure (target ±{CLOSURE_TARGET_PCT:g} %) "
        f"and replay prediction (target ±{REPLAY_TARGET_PCT:g} %), {'timing only' if power == 'none' else power[0]}\n"
    )
    print(table(rows))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
