"""serve-bench against a real continuously batched LLM server on one GPU (issue 39's validation).

Builds a Llama-shaped model of ~0.96 B parameters with random weights and a BPE tokenizer trained
on the spot (nothing from a hub), starts ``transformers serve --continuous-batching`` on
127.0.0.1, and measures with NVML:

- rates: 200 requests at 8 per second, 60 at 2 per second (conservation, the summary);
- (a) 8 identical requests sent together, twice: their energies' spread (target <= 5 %);
- (b) marginal truth: W (12 requests, Poisson) against W plus K = 4 requests at the same arrival
  times in each repeat: long prompts while W runs, long outputs after W, long outputs while W
  runs (``K_KINDS``), each pair ``--repeats`` times.
  Every run ends with one tiny marker request at the same time, so the runs span the same load;
  the difference of the runs' dynamic energy (each above its own idle baseline) against the
  dynamic energy attributed to the K requests (target: within 10 %), and the total difference
  (less the idle power over the spans' small difference in length) against K's total;
- (c) the leaderboard's estimate (the run's energy per output token times each request's output
  tokens) against the attributed energy, by kind of request and by load.

Run on the GPU machine (about 5 to 6 minutes; the model is built once into --model-dir):

    HF_HUB_OFFLINE=1 python benchmarks/serve_validation.py --out "$OUT"

Writes ``OUT/serve_validation.json`` (every figure), ``OUT/serve_validation.md`` (the tables
printed), ``OUT/server.log`` and each run's directory under ``OUT/runs/``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import energyframe as ef
from energyframe.serving import read_requests
from energyframe.serving.prompts import WORDS

PORT = 8123


@dataclass(frozen=True)
class Target:
    """Where the runs go and what they measure (the tests point it at their own server).

    Args:
        url, model: the server.
        power: the power sources.
        time_scale: every arrival time of (b) is multiplied by it (1: the real schedule).
        idle_s: each run's idle baseline. Units: s.
    """

    url: str
    model: str
    power: tuple[str, ...] = ("nvml",)
    time_scale: float = 1.0
    idle_s: float = 2.0


#: the model: Llama-shaped, 0.96 B parameters (DEVICE-NOTES: 0.77 B served at ~370 tokens/s)
SHAPE = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 18,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "max_position_embeddings": 4096,
}
VOCAB = 8192


def log(*parts) -> None:
    print(*parts, flush=True)


# -- the model and its server ----------------------------------------------------------------
def build_tokenizer(directory: Path, vocab: int = VOCAB):
    """A byte-level BPE tokenizer trained on the synthetic prompts' words (each one token) and
    random words that fill the vocabulary, with a plain chat template; saved in ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def corpus():
        for _ in range(20000):
            yield " ".join(rng.choice(WORDS) for _ in range(30))
            yield " ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(30))

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    directory.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(directory)
    return fast


def build_model(directory: Path, shape: dict = SHAPE, vocab: int = VOCAB, device: str = "cuda") -> None:
    """A random-weight Llama of ``shape`` and its tokenizer, saved with ``save_pretrained``
    (reused when the directory already holds them). Nothing comes from a hub."""
    if (directory / "config.json").exists() and (directory / "tokenizer.json").exists():
        log(f"model: reusing {directory}")
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    started = time.monotonic()
    fast = build_tokenizer(directory, vocab)
    config = LlamaConfig(
        vocab_size=len(fast),
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        **shape,
    )
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = None  # random weights would stop early
    model.generation_config.pad_token_id = fast.pad_token_id
    model.save_pretrained(directory)
    params = sum(p.numel() for p in model.parameters())
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    log(
        f"model: {params / 1e9:.2f} B parameters, vocabulary {len(fast)}, built in {time.monotonic() - started:.0f} s"
    )


def health(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # straight to 127.0.0.1
    try:
        with opener.open(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


#: the server's command line; {port} and {model} are filled in (--server-cmd changes it)
SERVER_CMD = "transformers serve --continuous-batching --host 127.0.0.1 --port {port} {model}"


def start_server(model_dir: Path, out: Path, command: str = SERVER_CMD) -> subprocess.Popen:
    argv = shlex.split(command.format(port=PORT, model=model_dir))
    if shutil.which(argv[0]) is None:
        sys.exit(f"no `{argv[0]}` command on PATH (pip install transformers)")
    server_log = open(out / "server.log", "w")  # noqa: SIM115 (open for the server's whole life)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    log("server:", " ".join(argv))
    proc = subprocess.Popen(
        argv, stdout=server_log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    started = time.monotonic()
    while not health(f"http://127.0.0.1:{PORT}/health"):
        if proc.poll() is not None:
            sys.exit(
                f"the server exited with {proc.returncode}:\n" + (out / "server.log").read_text()[-4000:]
            )
        if time.monotonic() - started > 300:
            proc.kill()
            sys.exit(
                "the server did not answer /health within 300 s:\n" + (out / "server.log").read_text()[-4000:]
            )
        time.sleep(1.0)
    log(f"server: up after {time.monotonic() - started:.0f} s")
    return proc


# -- prompts ---------------------------------------------------------------------------------
def prompt(n_words: int, max_tokens: int, rid: str, arrival_s: float | None = None, seed: int = 0) -> dict:
    rng = random.Random(f"{rid}-{seed}")
    line = {
        "id": rid,
        "prompt": " ".join(rng.choice(WORDS) for _ in range(n_words)),
        "max_tokens": max_tokens,
    }
    if arrival_s is not None:
        line["arrival_s"] = round(arrival_s, 6)
    return line


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def poisson(n: int, rate: float, start_s: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    t, out = start_s, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


# -- one run ---------------------------------------------------------------------------------
def bench(name: str, out: Path, target: Target, prompts, **kw) -> dict:
    """One serve-bench run; its figures."""
    run_dir = out / "runs" / name
    started = time.monotonic()
    try:
        result = ef.serve_bench(
            target.url,
            prompts,
            model=target.model,
            power=list(target.power),
            out=run_dir,
            idle_s=kw.pop("idle_s", target.idle_s),
            request_timeout_s=120.0,
            stream_usage=False,
            reporters=[],
            **kw,
        )
    except ef.EnergyFrameError as e:
        log(f"{name}: FAILED: {e}")
        result = getattr(e, "result", None)
        if result is None:
            return {"name": name, "error": str(e)}
    try:
        summary = result.derived_table("serving").rows[0]
        conservation = result.derived_table("conservation").rows[0]
    except KeyError:  # nothing was sent: no segments, no tables
        log(f"{name}: no request was measured ({result.reason or result.warnings})")
        return {"name": name, "error": "no request was measured"}
    frame = read_requests(run_dir)
    figures = {
        "name": name,
        "wall_s": time.monotonic() - started,
        "summary": summary,
        "conservation": conservation,
        "requests": frame.to_dict("records"),
        "idle_power_w": _idle_w(result),
        "span_random_j": span_random_j(run_dir),
        "warnings": result.warnings,
    }
    log(
        f"{name}: {summary['ok']}/{summary['requests']} ok, {summary['duration_s']:.1f} s, "
        f"{summary['energy_j']:.0f} J ± {summary['energy_bound_j']:.1f}, median {summary['energy_per_request_median_j']:.2f} J/request, "
        f"conservation {conservation['difference_j']:+.3g} J (bound {conservation['measured_bound_j']:.3g}), "
        f"{figures['wall_s']:.0f} s wall"
    )
    return figures


def _idle_w(result) -> float:
    """The idle baseline's power over the primary channels (those the requests' energy sums)."""
    baseline = result.meta.get("idle_baseline") or {}
    powers = [(baseline.get(c) or {}).get("power_w") for c in result.run_meta.primary_channels]
    return float(sum(powers)) if powers and all(isinstance(p, (int, float)) for p in powers) else math.nan


# -- the validations -------------------------------------------------------------------------
def relative_spread(values: list[float]) -> float:
    """(max - min) / median; NaN where it cannot say (none, or a median of 0)."""
    if not values or not statistics.median(values):
        return math.nan
    return (max(values) - min(values)) / statistics.median(values)


def served_together(requests: list[dict]) -> list[dict]:
    """The requests whose first token came in the same step as most of them (within half the
    median time per output token of the median first token): those the server ran in lockstep."""
    firsts = [r["first_token_s"] for r in requests]
    steps = [r["tpot_s"] for r in requests if math.isfinite(r["tpot_s"])]
    if not firsts or not steps:
        return []
    middle, half_step = statistics.median(firsts), statistics.median(steps) / 2
    return [r for r in requests if abs(r["first_token_s"] - middle) <= half_step]


def identical(out: Path, target: Target, repeats: int) -> list[dict]:
    """(a): 8 identical requests sent at once. A server may start the first to arrive a step or
    two before the others (transformers serve did, on the CPU): it then ran alone, and its energy
    is larger by that much. The spread is given over all of them, and over those served together
    (the target's premise: the same work in the same steps)."""
    rows = []
    for k in range(repeats):
        fig = bench(
            f"identical-{k}",
            out,
            target,
            f"synthetic:prompt_tokens=256,output_tokens=64,same=true,seed={k}",
            requests=8,
            rate=math.inf,
        )
        ok = [r for r in fig.get("requests", []) if r["status"] == "ok"]
        together = served_together(ok)
        energies = [r["energy_j"] for r in ok]
        spread_together = relative_spread([r["energy_j"] for r in together])
        rows.append(
            {
                "run": fig["name"],
                "n": len(ok),
                "median_j": statistics.median(energies) if energies else math.nan,
                "spread_pct": 100 * relative_spread(energies),
                "dynamic_spread_pct": 100 * relative_spread([r["dynamic_energy_j"] for r in ok]),
                "n_together": len(together),
                "spread_together_pct": 100 * spread_together,
                "first_token_range_ms": 1e3 * (max(r["first_token_s"] for r in ok) - min(r["first_token_s"] for r in ok)) if ok else math.nan,
                "target_met": spread_together <= 0.05,
            }
        )  # fmt: skip
    return rows


#: (b)'s kinds of K: 4 requests each, at the same arrival times in every repeat, and when the
#: marker request ends each run (W is run with the same marker, so that both runs span alike)
K_KINDS = {
    # long prompts, 2 output tokens, arriving while W runs: their work is prefill, which the
    # server runs as steps of their own tokens (W's decode tokens join them)
    "W+K prefill overlapping": (
        lambda scale: [
            prompt(1500, 2, f"k{i}", t * scale) for i, t in enumerate(poisson(4, 0.7, 0.5, seed=12))
        ],
        18.0,
    ),
    # outputs after W has finished (W's last request arrives at 4.9 s and ends by ~8 s; K at 8.5 s
    # met W's tail on 2026-11-29): the requests' own steps, nothing shared with W
    "W+K decode after": (
        lambda scale: [prompt(256, 48, f"k{i}", (11.0 + 0.3 * i) * scale) for i in range(4)],
        18.0,
    ),
    # the same, five times the output: ~25 s of steps, so that K's energy stands far above the
    # run-to-run variation of W's (about ±10 J on the H200, 2026-11-29)
    "W+K long decode after": (
        lambda scale: [prompt(256, 256, f"k{i}", (12.0 + 0.3 * i) * scale) for i in range(4)],
        40.0,
    ),
    # long outputs arriving while W runs: most of their steps are shared with W's requests at
    # first and their own after W ends, with K's energy (~125 J) far above W's run-to-run spread
    "W+K long decode overlapping": (
        lambda scale: [
            prompt(256, 256, f"k{i}", t * scale) for i, t in enumerate(poisson(4, 0.7, 0.5, seed=12))
        ],
        40.0,
    ),
    # outputs while W runs: their decode tokens share W's steps, where a step's energy is
    # split per token (an average) while adding a token to a step costs less (its margin)
    "W+K decode overlapping": (
        lambda scale: [
            prompt(256, 48, f"k{i}", t * scale) for i, t in enumerate(poisson(4, 0.7, 0.5, seed=12))
        ],
        18.0,
    ),
}


def marginal(out: Path, target: Target, repeats: int, kinds: list[str] | None = None) -> list[dict]:
    """W against W + K for each kind of K (``kinds``: some of ``K_KINDS``), every run ending
    with the same marker request.

    The measured difference is of the runs' dynamic energies (each above its own idle baseline);
    its bound holds the parts that differ between two runs on one board: each window's random
    part (where its edges fall between the counter's ticks) and each idle baseline's own bound.
    The sensor's stated accuracy (±5 W on an H200 board) is the same offset in both runs and
    cancels in the difference (core/uncertainty.py); the repeats show what the server's own
    run-to-run variation adds."""
    scale = target.time_scale
    w_times = poisson(12, 2.0, 0.0, seed=11)  # ~6 s of load
    base = [prompt(256, 32, f"w{i}", t * scale) for i, t in enumerate(w_times)]
    chosen = {k: K_KINDS[k] for k in (kinds or list(K_KINDS))}
    files, w_of = {}, {}
    for kind, (make, marker_s) in chosen.items():
        marker = prompt(8, 1, "marker", marker_s * scale)
        w_name = "W" if marker_s == 18.0 else f"W {marker_s:g} s"
        if w_name not in files:
            files[w_name] = write_jsonl(out / f"{_slug(w_name)}.jsonl", [*base, marker])
        files[kind] = write_jsonl(out / f"{_slug(kind)}.jsonl", [*base, *make(scale), marker])
        w_of[kind] = w_name
    runs: dict[str, list[dict]] = {name: [] for name in files}
    for k in range(repeats):  # interleaved, so that a drift over the minutes hits every kind alike
        for name, path in files.items():
            runs[name].append(bench(f"{_slug(name)}-{k}", out, target, str(path)))
    rows = []
    for kind in chosen:
        for k in range(repeats):
            w, wk = runs[w_of[kind]][k], runs[kind][k]
            if "summary" in w and "summary" in wk:
                rows.append(_marginal_row(kind, k, w, wk))
    return rows


def _slug(name: str) -> str:
    return name.replace(" ", "-").replace("+", "").replace(".", "")


def _marginal_row(kind: str, k: int, w: dict, wk: dict) -> dict:
    idle_w = statistics.mean([w["idle_power_w"], wk["idle_power_w"]])
    d_span = wk["summary"]["duration_s"] - w["summary"]["duration_s"]
    # the total difference, less the idle power over the spans' difference in length; and the
    # dynamic difference, each run above its own idle baseline (a drift of the idle power
    # between runs, 1 W over 16 s, is 16 J: it cancels there)
    total = wk["summary"]["energy_j"] - w["summary"]["energy_j"] - idle_w * d_span
    measured = wk["summary"]["dynamic_energy_j"] - w["summary"]["dynamic_energy_j"]
    bound = math.hypot(*w["span_random_j"], *wk["span_random_j"])
    k_rows = [r for r in wk["requests"] if str(r["request_id"]).startswith("k")]
    dynamic = sum(r["dynamic_energy_j"] for r in k_rows)
    error = 100 * (dynamic - measured) / measured if measured else math.nan
    return {
        "kind": kind,
        "repeat": k,
        "measured_total_difference_j": total,
        "measured_difference_j": measured,
        "difference_bound_j": bound,
        "attributed_j": sum(r["energy_j"] for r in k_rows),
        "attributed_dynamic_j": dynamic,
        "dynamic_error_pct": error,
        # the error's own bound: the measured difference may lie anywhere within its bound
        "error_bound_pct": 100 * abs(dynamic) * bound / (abs(measured) * max(abs(measured) - bound, 1e-9))
        if measured
        else math.nan,
        "span_difference_s": d_span,
        "k_ok": sum(r["status"] == "ok" for r in k_rows),
        "w_dynamic_j": w["summary"]["dynamic_energy_j"],
    }


def pooled(rows: list[dict]) -> list[dict]:
    """Each kind over its repeats: the median measured difference and attributed energy, their
    ranges, the pairs within 10 %, and how much W's own dynamic energy varied from run to run
    (the server's batching, not the meter: the floor under any one pair's error, since an "after"
    K shares nothing with W)."""
    out = []
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        measured = [r["measured_difference_j"] for r in mine]
        attributed = [r["attributed_dynamic_j"] for r in mine]
        w = [r["w_dynamic_j"] for r in mine]
        m = statistics.median(measured)
        out.append(
            {
                "kind": kind,
                "repeats": len(mine),
                "measured_difference_median_j": m,
                "measured_difference_range_j": max(measured) - min(measured),
                "attributed_dynamic_median_j": statistics.median(attributed),
                "attributed_dynamic_range_j": max(attributed) - min(attributed),
                "median_error_pct": 100 * (statistics.median(attributed) - m) / m if m else math.nan,
                "pairs_within_10_pct": sum(abs(r["dynamic_error_pct"]) <= 10 for r in mine),
                "w_run_to_run_sd_j": statistics.stdev(w) if len(w) > 1 else math.nan,
            }
        )
    return out


def span_random_j(run_dir: Path) -> tuple[float, float]:
    """The serve window's random bound over the primary channels and its idle baseline's own
    bound (``SpanEnergy.random_j``, ``baseline_j``: what differs between two runs on one
    board). Units: J."""
    import pandas as pd

    from energyframe.serving.segments import measured_span

    primary = ef.load_run(run_dir).run_meta.primary_channels
    span = measured_span(pd.read_csv(run_dir / "windows.csv"), primary)
    return (span.random_j, span.baseline_j) if span is not None else (math.nan, math.nan)


def leaderboard(figures: list[dict]) -> list[dict]:
    """(c): the run's energy per output token times each request's tokens, against the attribution."""
    rows = []
    for fig in figures:
        if "summary" not in fig:
            continue
        s = fig["summary"]
        per_token = s["energy_j"] / s["output_tokens"] if s["output_tokens"] else math.nan
        groups: dict[str, list[float]] = {}
        for r in fig["requests"]:
            if r["status"] != "ok" or not r["output_tokens"] or not math.isfinite(r["energy_j"]):
                continue
            estimate = per_token * r["output_tokens"]
            kind = (
                "K"
                if str(r["request_id"]).startswith("k")
                else "marker"
                if r["request_id"] == "marker"
                else "ordinary"
            )
            groups.setdefault(kind, []).append(estimate / r["energy_j"])
        for kind, ratios in groups.items():
            rows.append({"run": fig["name"], "kind": kind, "n": len(ratios), "leaderboard_over_attributed_median": statistics.median(ratios),
                         "min": min(ratios), "max": max(ratios), "load_rate_per_s": s["request_rate_per_s"]})  # fmt: skip
    return rows


# -- tables ----------------------------------------------------------------------------------
def table(rows: list[dict], columns: list[str]) -> str:
    def cell(v):
        if isinstance(v, float):
            return "-" if not math.isfinite(v) else f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


RATE_COLUMNS = (
    "requests", "ok", "request_rate_per_s", "output_tokens_per_s", "energy_j", "energy_bound_j", "mean_power_w",
    "idle_energy_j", "energy_per_request_median_j", "energy_per_request_median_bound_j", "energy_per_request_p99_j",
    "energy_per_output_token_median_j", "ttft_median_s", "tpot_median_s",
)  # fmt: skip


def rates(out: Path, target: Target) -> list[dict]:
    """The 200-request run and a slower one: their summaries and conservation."""
    runs = [
        bench("rate-8", out, target, "synthetic:prompt_tokens=128,output_tokens=32", requests=200, rate=8.0),
        bench(
            "rate-2",
            out,
            target,
            "synthetic:prompt_tokens=128,output_tokens=32,seed=1",
            requests=60,
            rate=2.0,
        ),
    ]
    return [f for f in runs if "summary" in f]


def validate(
    out: Path, target: Target, parts: set[str], repeats: int, kinds: list[str] | None = None
) -> dict:
    """Every part asked for; the report's figures."""
    report: dict = {"shape": SHAPE, "parts": sorted(parts)}
    rate_runs = rates(out, target) if "rates" in parts else []
    if rate_runs:
        report["rates"] = [
            {
                "run": f["name"],
                **{k: f["summary"].get(k) for k in RATE_COLUMNS},
                "conservation_difference_j": f["conservation"]["difference_j"],
                "conservation_bound_j": f["conservation"]["measured_bound_j"],
                "conservation_within_bound": f["conservation"]["within_bound"],
            }
            for f in rate_runs
        ]
    if "a" in parts:
        report["identical"] = identical(out, target, repeats)
    if "b" in parts:
        report["marginal"] = marginal(out, target, repeats, kinds)
        report["marginal_pooled"] = pooled(report["marginal"])
    figures = rate_runs + [bench_figure(out, f"{_slug(kind)}-0") for kind in kinds or K_KINDS]
    report["leaderboard"] = leaderboard([f for f in figures if f])
    return report


def write_report(report: dict, out: Path) -> str:
    """The tables, printed and saved (serve_validation.md), and every figure (.json)."""
    text = [f"# serve-bench validation ({report.get('wall_s', math.nan):.0f} s)"]
    if report.get("rates"):
        text += ["", "## rates", table(report["rates"], list(report["rates"][0]))]
    if "identical" in report:
        text += ["", "## (a) identical requests sent together (target: spread <= 5 %)",
                 table(report["identical"], ["run", "n", "median_j", "spread_pct", "dynamic_spread_pct", "first_token_range_ms",
                                             "n_together", "spread_together_pct", "target_met"])]  # fmt: skip
    if "marginal" in report:
        text += ["", "## (b) marginal truth: the dynamic energy of W+K less W's against the K requests' attributed dynamic energy (target: within 10 %)",
                 table(report["marginal"], ["kind", "repeat", "measured_difference_j", "difference_bound_j", "attributed_dynamic_j",
                                            "dynamic_error_pct", "error_bound_pct", "measured_total_difference_j", "attributed_j",
                                            "span_difference_s", "k_ok"])]  # fmt: skip
        if report.get("marginal_pooled"):
            text += ["", "### (b) over the repeats (W's run-to-run spread: the server's, the floor under one pair's error)",
                     table(report["marginal_pooled"], list(report["marginal_pooled"][0]))]  # fmt: skip
    if report.get("leaderboard"):
        text += ["", "## (c) the leaderboard's estimate over the attributed energy, per request",
                 table(report["leaderboard"], ["run", "kind", "n", "leaderboard_over_attributed_median", "min", "max", "load_rate_per_s"])]  # fmt: skip
    output = "\n".join(text)
    (out / "serve_validation.md").write_text(output + "\n")
    (out / "serve_validation.json").write_text(json.dumps(report, indent=1, default=str))
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model-dir", type=Path, default=Path("/tmp/energyframe-serve-model"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--only", default="rates,a,b", help="parts to run: rates, a, b (comma-separated)")
    parser.add_argument(
        "--kinds", help=f"(b)'s kinds of K, comma-separated (default all): {'; '.join(K_KINDS)}"
    )
    parser.add_argument(
        "--server-cmd", default=SERVER_CMD, help="the server's command line ({port}, {model})"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["HF_HUB_OFFLINE"] = "1"
    started = time.monotonic()
    build_model(args.model_dir)
    server = start_server(args.model_dir, args.out, args.server_cmd)
    target = Target(f"http://127.0.0.1:{PORT}/v1", str(args.model_dir))
    try:
        bench(
            "warmup",
            args.out,
            target,
            "synthetic:prompt_tokens=64,output_tokens=16",
            requests=8,
            concurrency=4,
            idle_s=0.5,
        )
        kinds = [k.strip() for k in args.kinds.split(",")] if args.kinds else None
        unknown = [k for k in kinds or [] if k not in K_KINDS]
        if unknown:
            parser.error(f"unknown kind {unknown[0]!r}; kinds: {'; '.join(K_KINDS)}")
        report = validate(args.out, target, set(args.only.split(",")), args.repeats, kinds)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    report["wall_s"] = time.monotonic() - started
    log(write_report(report, args.out))


def bench_figure(out: Path, name: str) -> dict | None:
    """A saved run's figures (the leaderboard comparison reads the (b) runs back)."""
    run_dir = out / "runs" / name
    if not (run_dir / "run.json").exists():
        return None
    result = ef.load_run(run_dir)
    return {
        "name": name,
        "summary": result.derived_table("serving").rows[0],
        "requests": read_requests(run_dir).to_dict("records"),
    }


if __name__ == "__main__":
    main()
