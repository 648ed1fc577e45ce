"""Transformers and LLMs measured right, on one GPU: what issue 38 asks that one GPU can show.

Sections (``--only`` picks some; each writes its figures under OUT as it goes):

- ``encoders``: per-layer closure (Σ units against the whole model as one CUDA graph, latency and
  energy, the defaults: ``per-layer:model=hf,arch=...,validate=true``) of the encoder and
  encoder-decoder families transformers ships: the issue's BertModel (768, 12 layers, seq 128,
  batch 16) and DistilBertModel (768, 6 layers, seq 256, batch 8), and RoBERTa, ALBERT,
  DeBERTa-v2, T5, BART at their configs' defaults. Each residual with its cause; the whole model's
  graph is profiled after its windows, so a residual over 5 % is split into launch gaps and kernel
  time as measured;
- ``kernels``: for BertModel and DistilBertModel, the kernels the whole model's graph runs against
  the kernels of its units' graphs (Σ calls x each unit's), by name, count and time per forward:
  what differs if anything does (``kernels_<model>.json``);
- ``vision``: the same closure for torchvision's regnet_y_1_6gf (batch 16) and timm's
  swin_tiny_patch4_window7_224 (batch 8), which closed before: they still must;
- ``vicuna``: ``vicuna-7b`` (random weights, fp16) at tp=1: a 512-token prefill and a 16-token
  decode, each one CUDA graph replay, latency and energy per token, the decode's weight-read
  floor beside it (13.5 GB over the GPU's data-sheet bandwidth);
- ``replay``: ``benchmarks/vicuna_tp.py`` at tp=1: each phase traced (eagerly), every unique op
  replayed in isolation (CUDA graphs), Σ ops + the graph's launch gaps against the model's graph,
  latency and energy, prefill and decode;
- ``speed``: ``energyframe run --power nvml --workload resnet50 --per-layer`` as a user types it,
  process start to saved run, with run.json's breakdown of where the time went, the import of
  torch and torchvision alone, and the same command once more under cProfile (OUT/speed.prof).

On one H200 (about 4 + 5 minutes; each command under the 10-minute limit)::

    python benchmarks/transformers_validation.py "$OUT/tv" --only encoders,kernels,vision
    python benchmarks/transformers_validation.py "$OUT/tv" --only vicuna,replay,speed

Prints a table per section and the summary at the end; OUT/summary.json has every figure and
OUT/summary.md the tables. ``--dry-run`` runs every section on tiny models on the CPU, timing
only (a check of the script, tests/benchmarks/test_transformers_validation.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import energyframe as ef

SECTIONS = ("encoders", "kernels", "vision", "vicuna", "replay", "speed")
#: (label, spec) of the encoder closure: the issue's two rows first
ENCODERS = [
    ("BertModel (issue)", "hf:arch=BertModel,seq_len=128,batch=16"),
    ("DistilBertModel (issue)", "hf:arch=DistilBertModel,seq_len=256,batch=8"),
    ("RobertaModel", "hf:arch=RobertaModel,seq_len=128,batch=16"),
    ("AlbertModel", "hf:arch=AlbertModel,seq_len=128,batch=16"),
    ("DebertaV2Model", "hf:arch=DebertaV2Model,seq_len=128,batch=8"),
    ("T5Model", "hf:arch=T5Model,seq_len=128,batch=8"),
    ("BartModel", "hf:arch=BartModel,seq_len=128,batch=8"),
]
VISION = [
    ("regnet_y_1_6gf", "torchvision:name=regnet_y_1_6gf,batch=16"),
    ("swin_tiny", "timm:name=swin_tiny_patch4_window7_224,batch=8"),
]
KERNEL_MODELS = ["hf:arch=BertModel,seq_len=128,batch=16", "hf:arch=DistilBertModel,seq_len=256,batch=8"]
VICUNA = "vicuna-7b:mode=both,seq_len=512,new_tokens=16"
CLOSURE_TARGET_PCT = 5.0
REPLAY_TARGET_PCT = 10.0

#: the same, tiny, for a dry run on the CPU
TINY_BERT = "hf:arch=BertModel,hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,vocab_size=100,seq_len=8,batch=2"
TINY = {
    "encoders": [
        ("BertModel", TINY_BERT),
        (
            "BartModel",
            "hf:arch=BartModel,d_model=32,encoder_layers=1,decoder_layers=1,encoder_attention_heads=2,"
            "decoder_attention_heads=2,encoder_ffn_dim=64,decoder_ffn_dim=64,vocab_size=100,seq_len=8,batch=2",
        ),
    ],
    "vision": [("resnet18", "torchvision:name=resnet18,image_size=32,batch=1")],
    "kernels": [TINY_BERT],
    "vicuna": "vicuna-7b:mode=both,hidden=64,layers=2,heads=4,vocab=128,seq_len=8,new_tokens=4",
}


def fresh(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3`` ... when a run of an earlier call is there already."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def num(value) -> float:
    return math.nan if value is None else float(value)


def verdict(value: float, target: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    return "ok" if abs(value) <= target else "MISS"


# -- closure -------------------------------------------------------------------------------------
def closure(label: str, spec: str, power, settings, out: Path, extra: str) -> dict:
    """``per-layer:...,validate=true`` with the defaults: Σ units against the whole model."""
    name, _, options = spec.partition(":")
    run_dir = fresh(out / label.split(" ")[0])
    t0 = time.monotonic()
    result = ef.run(
        f"per-layer:model={name},{options},validate=true{extra}",
        power=power,
        reporters=[],
        settings=settings,
        out=run_dir,
    )
    s = result.derived_table("summary").rows[0]
    layers = result.derived_table("layers").rows
    rows = {r["term"]: r for r in result.derived_table("closure").rows}
    info = result.meta["workload"]["info"]
    return {
        "model": label,
        "spec": spec,
        "units": s["unique_units"],
        "granularity": str(s["granularity_choice"]).split(" (")[0],
        "whole_latency_s": num(s["whole_latency_s"]),
        "whole_energy_j": num(s["whole_energy_j"]),
        "latency_pct": num(s["latency_diff_pct"]),
        "energy_pct": num(s["energy_diff_pct"]),
        "whole_as": rows["whole model"]["cause"].removeprefix("the reference: "),
        "eager_units": sum(1 for r in layers if r["execution"] != "cuda graph"),
        "residual_cause": rows["residual"]["cause"],
        "profile": info.get("prepare_timings_s", {}).get("profile"),
        "wall_s": time.monotonic() - t0,
        "run_dir": str(run_dir),
    }


def closure_table(rows: list[dict], title: str) -> str:
    lines = [
        f"### {title}",
        "",
        "| model | units | Σ units vs whole: latency | energy | whole model (per forward) | residual's cause |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | FAILED: {r['error'][:200]} | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['units']} {r['granularity']} "
            f"| {r['latency_pct']:+.2f} % {verdict(r['latency_pct'], CLOSURE_TARGET_PCT)} "
            f"| {r['energy_pct']:+.2f} % {verdict(r['energy_pct'], CLOSURE_TARGET_PCT)} "
            f"| {r['whole_latency_s'] * 1e3:.4g} ms, {r['whole_energy_j'] * 1e3:.4g} mJ, {r['whole_as']} "
            f"| {r['residual_cause'][:400]} |"
        )
    return "\n".join(lines)


# -- kernels of the whole model against its units -------------------------------------------------
def _profile(captured, replays: int = 5) -> dict[str, list[float]]:
    """Kernel name -> [count, time in µs] per replay of a built graph (or eager calls)."""
    from torch.profiler import ProfilerActivity, profile

    from energyframe.replay import kineto

    for _ in range(10):
        captured.step()
    captured.sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            captured.step()
        captured.sync()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = kineto.parse(path)
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for k in trace.kernels:
        out[k.name][0] += 1 / replays
        out[k.name][1] += k.duration_us / replays
    return dict(out)


def kernel_diff(spec: str, out: Path) -> dict:
    """The kernels of the whole model's graph (one forward) against Σ its units' (block
    units, recorded as the graphs run the model), by name: count and time per forward."""
    import torch

    from energyframe.kit import registry
    from energyframe.options import parse_spec
    from energyframe.workloads.graph import Captured
    from energyframe.workloads.layers import decompose

    model = registry.create_workload(parse_spec(spec))
    model.build_model()
    on_gpu = model.device.type == "cuda"
    found = decompose(model.model, model.args, model.kwargs, "block", model.block_names(), as_captured=on_gpu)
    whole = Captured(lambda device: None, model._forward, 1, model.device, check_sync=False)
    whole.build()
    theirs = _profile(whole) if on_gpu else {}
    whole.release()
    ours: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for unit in found.units:
        make, call = unit.call_factory(model.device)
        captured = Captured(make, call, 1, model.device)
        captured.build()
        for name, (count, us) in (_profile(captured) if on_gpu else {}).items():
            ours[name][0] += count * unit.count
            ours[name][1] += us * unit.count
        captured.release()
    names = set(theirs) | set(ours)
    rows = [
        {
            "kernel": name,
            "whole_count": theirs.get(name, [0, 0])[0],
            "units_count": ours.get(name, [0, 0])[0],
            "whole_us": theirs.get(name, [0, 0])[1],
            "units_us": ours.get(name, [0, 0])[1],
        }
        for name in names
    ]
    rows.sort(key=lambda r: -abs(r["whole_us"] - r["units_us"]))
    result = {
        "spec": spec,
        "units": len(found.units),
        "whole_execution": whole.fallback or ("cuda graph" if on_gpu else "cpu"),
        "whole_kernels": sum(r["whole_count"] for r in rows),
        "units_kernels": sum(r["units_count"] for r in rows),
        "whole_busy_us": sum(r["whole_us"] for r in rows),
        "units_busy_us": sum(r["units_us"] for r in rows),
        "kernels": rows,
    }
    name = spec.split(",")[0].split("=")[-1]
    (out / f"kernels_{name}.json").write_text(json.dumps(result, indent=1))
    del model
    if on_gpu:
        torch.cuda.empty_cache()
    return result


def kernel_table(r: dict) -> str:
    lines = [
        f"### kernels of {r['spec']}: whole model ({r['whole_execution']}) against Σ its {r['units']} units",
        "",
        f"kernels per forward {r['whole_kernels']:.1f} / {r['units_kernels']:.1f}; busy "
        f"{r['whole_busy_us']:.1f} / {r['units_busy_us']:.1f} us (whole / units)",
        "",
        "| kernel (largest differences first) | whole: count | us | units: count | us |",
        "|---|---|---|---|---|",
    ]
    for k in r["kernels"][:12]:
        lines.append(
            f"| {k['kernel'][:90]} | {k['whole_count']:.1f} | {k['whole_us']:.1f} | {k['units_count']:.1f} | {k['units_us']:.1f} |"
        )
    return "\n".join(lines)


# -- vicuna-7b --------------------------------------------------------------------------------
def vicuna(spec: str, power, settings, out: Path) -> dict:
    t0 = time.monotonic()
    result = ef.run(spec, power=power, reporters=[], settings=settings, out=fresh(out / "vicuna"))
    info = result.meta["workload"]["info"]
    rows = {r["phase"]: r for r in result.derived_table("tokens").rows}
    return {
        "spec": spec,
        "gpu": info.get("gpu", "cpu"),
        "parameters": info.get("parameters_on_this_rank"),
        "prefill_execution": info.get("prefill_execution"),
        "decode_execution": info.get("decode_execution"),
        "logits_check_difference": info.get("logits_check_difference"),
        "rows": rows,
        "wall_s": time.monotonic() - t0,
    }


def vicuna_table(v: dict) -> str:
    lines = [
        f"### {v['spec']} on {v['gpu']} ({v['parameters']} parameters; prefill {v['prefill_execution']}, "
        f"decode {v['decode_execution']})",
        "",
        "| phase | latency/token | floor (weights / bandwidth) | latency / floor | energy/token | all GPUs |",
        "|---|---|---|---|---|---|",
    ]
    for phase, r in v["rows"].items():
        floor = num(r.get("floor_latency_per_token_s"))
        lines.append(
            f"| {phase} | {r['latency_per_token_s'] * 1e3:.4g} ms | "
            + (f"{floor * 1e3:.3g} ms | {r['latency_per_token_s'] / floor:.2f} x" if math.isfinite(floor) else "- | -")
            + f" | {num(r['energy_per_token_j']):.4g} J | {num(r['energy_per_token_j_all_gpus']):.4g} J |"
        )
    return "\n".join(lines)


def _vicuna_tp_module():
    path = Path(__file__).parent / "vicuna_tp.py"
    spec = importlib.util.spec_from_file_location("vicuna_tp_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def replay(out: Path, dry: bool) -> list[dict]:
    """vicuna_tp.py at tp=1: Σ replayed ops + launch gaps against the model's graph, per phase."""
    # 0.3-s windows: ~1 % per window on the counter's 100-ms ticks, against a 10 % target
    args = ["--out", str(fresh(out / "replay")), "--json", str(out / "replay.json"), "--trials", "3", "--window-s", "0.3"]
    if dry:
        args += ["--cpu", "--shrink", "hidden=64,layers=2,heads=4,vocab=128", "--seq-len", "8",
                 "--new-tokens", "4", "--window-s", "0.02", "--trials", "1"]
    _vicuna_tp_module().main(args)
    return json.loads((out / "replay.json").read_text())["rows"]


def replay_table(rows: list[dict]) -> str:
    lines = [
        "### vicuna-7b tp=1: replay's prediction (Σ isolated ops + the graph's launch gaps) against the model",
        "",
        "| phase | measured as | latency/token | predicted | error | energy/token | predicted | error | without gaps | coverage |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['phase']} | {r['measured_as']} | {r['latency_per_token_s'] * 1e3:.4g} ms "
            f"| {r['predicted_latency_per_token_s'] * 1e3:.4g} ms "
            f"| {r['error_percent']:+.1f} % {verdict(r['error_percent'], REPLAY_TARGET_PCT)} "
            f"| {num(r['energy_per_token_j']):.4g} J | {num(r['predicted_energy_per_token_j']):.4g} J "
            f"| {num(r['energy_error_percent']):+.1f} % {verdict(num(r['energy_error_percent']), REPLAY_TARGET_PCT)} "
            f"| {num(r['without_gaps_error_percent']):+.1f} % | {r['coverage_percent_of_gpu_time']:.1f} % |"
        )
    return "\n".join(lines)


# -- per-layer wall time ------------------------------------------------------------------------
def speed(out: Path, dry: bool) -> dict:
    """The README's per-layer command in a process of its own, and torch's import alone."""
    env = dict(os.environ)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, torchvision"], check=True, env=env)
    imports_s = time.monotonic() - t0
    run_dir = fresh(out / "speed")
    workload = TINY_BERT if dry else "resnet50"
    command = [sys.executable, "-m", "energyframe", "run", "--power", "none" if dry else "nvml",
               "--workload", workload, "--per-layer", "--out", str(run_dir)]
    if dry:
        command += ["--min-window", "0.01", "--trials", "1", "--idle", "0"]
    t0 = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall_s = time.monotonic() - t0
    (out / "speed.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-500:]}")
    profile = _profiled_run(command, run_dir, out, env)
    run = json.loads((run_dir / "run.json").read_text())
    info = run["workload"]["info"]
    layers = [
        r for r in _csv_rows(run_dir / "layers.csv") if r.get("energy_cv_pct") not in (None, "", "nan")
    ]
    cvs = sorted(float(r["energy_cv_pct"]) for r in layers)
    return {
        "command": " ".join(command[2:]),
        "wall_s": wall_s,
        "timings_s": run.get("timings_s", {}),
        "prepare_timings_s": info.get("prepare_timings_s", {}),
        "units": info.get("units"),
        "granularity": info.get("granularity"),
        "median_energy_cv_pct": cvs[len(cvs) // 2] if cvs else math.nan,
        "max_energy_cv_pct": cvs[-1] if cvs else math.nan,
        "import_torch_torchvision_s": imports_s,
        "profile_top": profile,
    }


def _profiled_run(command: list[str], run_dir: Path, out: Path, env: dict) -> list[str]:
    """The same command once more under cProfile (which slows Python-heavy code several-fold):
    where the host's time goes outside the windows, cumulative, for reading afterwards
    (OUT/speed.prof, OUT/speed_profile.txt). Returns the top lines."""
    import io
    import pstats

    profiled = [command[0], "-m", "cProfile", "-o", str(out / "speed.prof"), *command[1:]]
    profiled[profiled.index(str(run_dir))] = str(fresh(run_dir.with_name(run_dir.name + "-profiled")))
    done = subprocess.run(profiled, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return [f"the profiled run exited {done.returncode}: {done.stderr[-300:]}"]
    text = io.StringIO()
    pstats.Stats(str(out / "speed.prof"), stream=text).sort_stats("cumulative").print_stats(60)
    (out / "speed_profile.txt").write_text(text.getvalue())
    lines = [line for line in text.getvalue().splitlines() if "energyframe/" in line or "import" in line]
    return lines[:25]


def _csv_rows(path: Path) -> list[dict]:
    import csv

    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def speed_table(s: dict) -> str:
    t = s["timings_s"]
    keys = [k for k in ("before_run", "sources_start", "setup", "idle_baseline", "phase_setup", "warmup",
                        "calibration", "windows", "between_windows", "guard", "teardown", "stop_sources",
                        "integrate", "save", "other") if k in t]
    lines = [
        f"### `{s['command']}`: {s['wall_s']:.1f} s wall, {num(t.get('process')):.1f} s process start to saved run "
        f"(target 20 s); {s['units']} units ({s['granularity']}), energy CV median {s['median_energy_cv_pct']:.2f} % "
        f"max {s['max_energy_cv_pct']:.2f} %",
        "",
        "| " + " | ".join(keys) + " |",
        "|" + "---|" * len(keys),
        "| " + " | ".join(f"{t[k]:.2f}" for k in keys) + " |",
        "",
        "per-layer preparation (inside setup and phase_setup): "
        + ", ".join(f"{k} {v:.2f} s" for k, v in s["prepare_timings_s"].items())
        + f"; `import torch, torchvision` alone: {s['import_torch_torchvision_s']:.2f} s",
        "",
        "the same run under cProfile, cumulative (OUT/speed_profile.txt has more):",
        "",
        "```",
        *s.get("profile_top", []),
        "```",
    ]
    return "\n".join(lines)


# -- the whole ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:  # noqa: C901, PLR0915 (one branch per section, read top to bottom)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="directory for every figure and run")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"sections, comma-separated: {', '.join(SECTIONS)}")
    ap.add_argument("--power", default="nvml", help="power spec (none: timing only)")
    ap.add_argument("--dry-run", action="store_true", help="tiny models on the CPU, timing only")
    args = ap.parse_args(argv)
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown section {unknown[0]!r}; sections: {', '.join(SECTIONS)}")
    dry = args.dry_run
    power = "none" if dry or args.power == "none" else [args.power]
    settings = ef.RunSettings(trials=1, min_window_s=0.01, idle_s=0.0) if dry else None
    extra = ",unroll=2,whole_unroll=2" if dry else ""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary.update(device=device, date=time.strftime("%Y-%m-%d"), torch=torch.__version__)
    try:
        import transformers

        summary["transformers"] = transformers.__version__
    except ImportError:
        pass
    tables: dict[str, str] = dict(summary.get("tables", {}))
    failed = False

    def save() -> None:
        summary["tables"] = tables
        summary_path.write_text(json.dumps(summary, indent=1, default=str))
        (out / "summary.md").write_text(
            f"device {device}, {summary['date']}, torch {summary['torch']}, transformers "
            f"{summary.get('transformers')}\n\n" + "\n\n".join(tables[k] for k in SECTIONS if k in tables) + "\n"
        )

    for section, models in (("encoders", TINY["encoders"] if dry else ENCODERS), ("vision", TINY["vision"] if dry else VISION)):
        if section not in sections:
            continue
        rows = []
        for label, spec in models:
            try:
                rows.append(closure(label, spec, power, settings, out / section, extra))
                r = rows[-1]
                print(f"{label:28s} closure {r['latency_pct']:+6.2f} % / {r['energy_pct']:+6.2f} % "
                      f"({r['units']} units, {r['granularity']}; whole {r['whole_as']}); {r['residual_cause'][:300]}",
                      flush=True)
            except Exception as e:  # one model that fails must not lose the others' figures
                rows.append({"model": label, "spec": spec, "error": f"{type(e).__name__}: {e}"})
                print(f"{label:28s} FAILED: {rows[-1]['error'][:300]}", flush=True)
                failed = True
        summary[section] = rows
        tables[section] = closure_table(rows, f"per-layer closure, {section}, on {device} (target ±{CLOSURE_TARGET_PCT:g} %)")
        save()
    if "kernels" in sections:
        results = []
        for spec in TINY["kernels"] if dry else KERNEL_MODELS:
            try:
                results.append(kernel_diff(spec, out))
                print(kernel_table(results[-1]), flush=True)
            except Exception as e:
                results.append({"spec": spec, "error": f"{type(e).__name__}: {e}"})
                print(f"kernels of {spec}: FAILED {results[-1]['error'][:300]}", flush=True)
                failed = True
        summary["kernels"] = [{k: v for k, v in r.items() if k != "kernels"} for r in results]
        tables["kernels"] = "\n\n".join(kernel_table(r) for r in results if "error" not in r)
        save()
    if "vicuna" in sections:
        try:
            v = vicuna(TINY["vicuna"] if dry else VICUNA, power, settings, out)
            summary["vicuna"] = v
            tables["vicuna"] = vicuna_table(v)
            print(tables["vicuna"], flush=True)
        except Exception as e:
            summary["vicuna"] = {"error": f"{type(e).__name__}: {e}"}
            print(f"vicuna-7b: FAILED {summary['vicuna']['error'][:300]}", flush=True)
            failed = True
        save()
    if "replay" in sections:
        try:
            rows = replay(out, dry)
            summary["replay"] = rows
            tables["replay"] = replay_table(rows)
            print(tables["replay"], flush=True)
        except Exception as e:
            summary["replay"] = {"error": f"{type(e).__name__}: {e}"}
            print(f"replay: FAILED {summary['replay']['error'][:300]}", flush=True)
            failed = True
        save()
    if "speed" in sections:
        try:
            s = speed(out, dry)
            summary["speed"] = s
            tables["speed"] = speed_table(s)
            print(tables["speed"], flush=True)
        except Exception as e:
            summary["speed"] = {"error": f"{type(e).__name__}: {e}"}
            print(f"speed: FAILED {summary['speed']['error'][:300]}", flush=True)
            failed = True
        save()
    print(f"\n{(out / 'summary.md').read_text()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
