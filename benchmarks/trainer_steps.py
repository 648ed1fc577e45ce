"""Energy per optimizer step in a Hugging Face ``Trainer`` (``energyframe.integrations``), on a GPU.

A stack of one 8192-wide linear layer applied ``--layers`` times (bf16, about 0.1 s per optimizer
step of two micro-batches on an H200) trains for ``--steps`` steps with an evaluation halfway,
twice: without the callback (the step time it costs nothing) and with ``EnergyCallback`` over
NVML. Then, from the Trainer's ``log_history`` and the saved run:

1. every step logged once, every figure finite, every bound positive;
2. the live figures (what the logs say, computed while training ran) against the saved run's
   windows of the same steps (the whole run's samples): their difference against the combined
   95 % bound, and against its random part alone (the sensor's systematic error is common to both);
3. the steps against one window spanning them all (recorded when training ends, integrated by the
   same pipeline): span - steps - evaluation is the energy of the gaps between steps, between 0
   and the power cap times their length, within the bounds;
4. the step time with the callback against without (the edges' device syncs, the live numbers).

    python benchmarks/trainer_steps.py OUT            # one H200: about 1 minute
    python benchmarks/trainer_steps.py OUT --dry-run  # the CPU, the replay source at 300 W, tiny sizes

Prints a table and writes ``OUT/summary.json``, ``OUT/log_history.json``, ``OUT/table.txt`` and the
run directory ``OUT/run``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import pandas as pd

#: the most an H200 draws (its power limit is 700 W), for the gaps' upper bound. Units: W.
MAX_POWER_W = 1000.0


def build(features: int, hidden: int, layers: int):
    import torch

    class Stack(torch.nn.Module):
        """One wide layer applied ``layers`` times: much GPU work for few parameters."""

        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(features, hidden)
            self.block = torch.nn.Linear(hidden, hidden)
            self.down = torch.nn.Linear(hidden, 1)

        def forward(self, x, y):
            h = self.up(x)
            for _ in range(layers):
                h = torch.tanh(self.block(h))
            out = self.down(h).squeeze(-1).float()
            return {"loss": torch.nn.functional.mse_loss(out, y), "logits": out}

    class Rows(torch.utils.data.Dataset):
        def __init__(self, n: int, seed: int) -> None:
            g = torch.Generator().manual_seed(seed)
            self.x = torch.randn(n, features, generator=g)
            self.y = self.x.mean(1)

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i):
            return {"x": self.x[i], "y": self.y[i]}

    return Stack, Rows


def train(args, out: Path, callback=None):
    """One training run; returns the Trainer (its state's log_history) and the time per step."""
    import torch
    import transformers

    Stack, Rows = build(args.features, args.hidden, args.layers)
    torch.manual_seed(0)
    micro = 2
    targs = transformers.TrainingArguments(
        output_dir=str(out),
        use_cpu=args.dry_run,
        bf16=not args.dry_run,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        per_device_eval_batch_size=args.batch,
        gradient_accumulation_steps=micro,
        learning_rate=1e-4,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=args.steps // 2 + 1,  # one evaluation inside the steps' span, one at the end
        save_strategy="no",
        report_to=[],
        remove_unused_columns=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(
        model=Stack(),
        args=targs,
        train_dataset=Rows(args.steps * micro * args.batch, 0),
        eval_dataset=Rows(4 * args.batch, 1),
        callbacks=[callback] if callback is not None else None,
    )
    trainer.remove_callback(transformers.PrinterCallback)  # the logs go to log_history.json
    started = time.perf_counter()
    trainer.train()
    return trainer, (time.perf_counter() - started) / args.steps


def spanning_callback(power, out: Path):
    """``EnergyCallback`` that, as the last step ends, records one more window from the first
    step's start to the last step's end (before the evaluation the Trainer runs at the end)."""
    from energyframe.integrations.transformers import EnergyCallback

    class Spanning(EnergyCallback):
        def on_step_end(self, args, state, control, **kwargs):
            super().on_step_end(args, state, control, **kwargs)
            if state.global_step >= state.max_steps:
                m = self.meter.m
                steps = [r for r in m.closed_windows() if r.phase == "train-step"]
                m.record_window("span", steps[0].start_s, steps[-1].end_s)

    return Spanning(power=power, out=out)


def bound(rows: pd.DataFrame, random_only: bool = False) -> float:
    """The 95 % bound of the sum of ``rows``' energies: random parts in quadrature, systematic
    ones (one sensor) added."""
    random = math.sqrt(float((rows["energy_random_j"] ** 2).sum()))
    return random if random_only else math.hypot(random, float(rows["energy_systematic_j"].sum()))


def analyse(history: list[dict], windows: pd.DataFrame, channel: str, steps: int) -> dict:
    logged = [e for e in history if "energy/steps" in e]
    evals_logged = [e for e in history if "energy/evals" in e]
    figures = [v for e in history for k, v in e.items() if k.startswith("energy/")]
    w = windows[windows["channel"] == channel]
    step_w, eval_w, span_w = (w[w["phase"] == p] for p in ("train-step", "evaluation", "span"))
    live_j = sum(e["energy/steps"] * e["energy/step_j"] for e in logged)
    final_j = float(step_w["energy_j"].sum())
    inside = eval_w[(eval_w["start_s"] >= span_w["start_s"].iloc[0]) & (eval_w["end_s"] <= span_w["end_s"].iloc[0])]
    gaps_s = float(span_w["duration_s"].iloc[0] - step_w["duration_s"].sum() - inside["duration_s"].sum())
    gaps_j = float(span_w["energy_j"].iloc[0] - final_j - inside["energy_j"].sum())
    parts = pd.concat([span_w, step_w, inside])
    return {
        "steps": steps,
        "steps_logged": int(sum(e["energy/steps"] for e in logged)),
        "logs_with_steps": len(logged),
        "logs_before_the_end": sum(1 for e in logged if "train_runtime" not in e),
        "evals_logged": int(sum(e["energy/evals"] for e in evals_logged)),
        "all_finite": all(math.isfinite(v) for v in figures),
        "bounds_positive": all(e["energy/step_bound_j"] > 0 for e in logged),
        "step_j_median": float(step_w["energy_j"].median()),
        "step_s_median": float(step_w["duration_s"].median()),
        "step_bound_pct_median": float(step_w["energy_bound_pct"].median()),
        "step_power_w_median": float(step_w["mean_power_w"].median()),
        "live_j": live_j,
        "final_j": final_j,
        "live_minus_final_j": live_j - final_j,
        "final_bound_j": bound(step_w),
        "final_random_bound_j": bound(step_w, random_only=True),
        "span_j": float(span_w["energy_j"].iloc[0]),
        "gaps_s": gaps_s,
        "gaps_j": gaps_j,
        "gaps_bound_j": bound(parts),
        "gaps_random_bound_j": bound(parts, random_only=True),
        "gaps_max_j": MAX_POWER_W * gaps_s,
    }


def checks(s: dict) -> dict[str, bool]:
    """What the GPU test asserts."""
    return {
        "every step logged once": s["steps_logged"] == s["steps"],
        # the replay source of a dry run states no accuracy: its bounds are 0
        "figures finite, bounds positive": s["all_finite"] and (s["bounds_positive"] or s["dry_run"]),
        "live within the bound of the final": abs(s["live_minus_final_j"]) <= s["final_bound_j"],
        "gaps within [0, cap x length] and the bounds": -s["gaps_bound_j"] <= s["gaps_j"] <= s["gaps_max_j"] + s["gaps_bound_j"],
    }


def table(s: dict, verdicts: dict[str, bool]) -> str:
    rows = [
        ("optimizer steps / logged / logs with steps / before the end", f"{s['steps']} / {s['steps_logged']} / {s['logs_with_steps']} / {s['logs_before_the_end']}"),
        ("step: median time, energy, power, bound", f"{s['step_s_median'] * 1e3:.1f} ms, {s['step_j_median']:.2f} J, {s['step_power_w_median']:.0f} W, ±{s['step_bound_pct_median']:.2f} %"),
        ("steps: live (logs) vs final (run)", f"{s['live_j']:.2f} J vs {s['final_j']:.2f} J: {s['live_minus_final_j']:+.3f} J"),
        ("  bound of the sum (random part)", f"±{s['final_bound_j']:.2f} J (±{s['final_random_bound_j']:.2f} J)"),
        ("span - steps - evaluation (the gaps)", f"{s['gaps_j']:+.2f} J over {s['gaps_s'] * 1e3:.1f} ms (at most {s['gaps_max_j']:.1f} J)"),
        ("  bound (random part)", f"±{s['gaps_bound_j']:.2f} J (±{s['gaps_random_bound_j']:.2f} J)"),
        ("step time without / with the callback", f"{s['baseline_step_s'] * 1e3:.1f} / {s['callback_step_s'] * 1e3:.1f} ms ({s['overhead_pct']:+.1f} %)"),
    ]
    rows += [(f"check: {name}", "pass" if ok else "FAIL") for name, ok in verdicts.items()]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--dry-run", action="store_true", help="the CPU, the replay source, tiny sizes")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        args.hidden, args.layers, args.batch = 32, 2, 4
        csv = args.out / "power.csv"
        start = time.time()
        csv.write_text("time_s,power_w\n" + "".join(f"{start + 0.01 * i!r},300.0\n" for i in range(1000)))
        power, channel = [f"replay:file={csv},loop=true"], "replay"
    else:
        power, channel = ["nvml:gpus=0"], "gpu0"

    _, baseline_s = train(args, args.out / "baseline")
    callback = spanning_callback(power, args.out / "run")
    trainer, callback_s = train(args, args.out / "trainer", callback)
    history = trainer.state.log_history
    windows = pd.read_csv(args.out / "run" / "windows.csv")
    summary = analyse(history, windows, channel, args.steps)
    summary.update(
        baseline_step_s=baseline_s,
        callback_step_s=callback_s,
        overhead_pct=100.0 * (callback_s / baseline_s - 1.0),
        channel=channel,
        dry_run=args.dry_run,
    )
    verdicts = checks(summary)
    text = table(summary, verdicts)
    print(text)
    (args.out / "table.txt").write_text(text + "\n")
    (args.out / "summary.json").write_text(json.dumps({**summary, "checks": verdicts}, indent=1, default=float))
    (args.out / "log_history.json").write_text(json.dumps(history, indent=1, default=float))
    summary["checks"] = verdicts
    return summary


if __name__ == "__main__":
    result = main()
    sys.exit(0 if all(result["checks"].values()) else 1)
