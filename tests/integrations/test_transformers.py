"""``EnergyCallback`` in a real ``transformers.Trainer`` on the CPU: a tiny model, the replay source
at a constant 100 W, gradient accumulation and evaluations. The Trainer's log_history and the
TensorBoard tracker it reports to (read back with EventAccumulator) carry the energy figures, and
they add up to the saved run's windows."""

import math
import time

import pandas as pd
import pytest

import energyframe as ef

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow  # transformers' Trainer takes seconds to import and set up

from energyframe.integrations.transformers import EnergyCallback  # noqa: E402

WATTS = 100.0
STEPS, MICRO_BATCHES, BATCH, EVAL_SIZE = 6, 2, 2, 12


class Tiny(torch.nn.Module):
    """A linear regression that takes a few ms a batch (so every window is longer than a sample period)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x, y):
        time.sleep(0.01)
        out = self.lin(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, y), "logits": out}


class Pairs(torch.utils.data.Dataset):
    def __init__(self, n):
        self.x = torch.randn(n, 4, generator=torch.Generator().manual_seed(n))
        self.y = self.x.sum(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


def scalars(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values = {}
    for events_file in logdir.rglob("events.out.tfevents.*"):
        events = EventAccumulator(str(events_file))
        events.Reload()
        for tag in events.Tags()["scalars"]:
            values.setdefault(tag, []).extend(s.value for s in events.Scalars(tag))
    return values


def test_steps_and_evaluations_in_the_logs_the_tracker_and_the_run(tmp_path, power_csv):
    csv = power_csv(WATTS, period_s=0.01, duration_s=5.0)
    callback = EnergyCallback(power=[f"replay:file={csv},loop=true"])
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=MICRO_BATCHES,
        per_device_eval_batch_size=4,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=3,
        save_strategy="no",
        report_to=["tensorboard"],
        remove_unused_columns=False,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=Tiny(), args=args, train_dataset=Pairs(64), eval_dataset=Pairs(EVAL_SIZE), callbacks=[callback]
    )
    order = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    assert order.index("EnergyCallback") < order.index("TensorBoardCallback")  # so the tracker gets them
    trainer.train()

    # the run directory: a window per optimizer step and per evaluation
    run_dir = callback.run_dir
    assert run_dir.parent == tmp_path / "out" / "energyframe" and callback.result.complete
    w = pd.read_csv(run_dir / "windows.csv")
    steps, evals = w[w["phase"] == "train-step"], w[w["phase"] == "evaluation"]
    assert len(steps) == STEPS and len(evals) == 2
    assert ef.load_run(run_dir).summary("train-step").mean_power_w.median == pytest.approx(WATTS, rel=1e-6)

    # the logs: every step and evaluation once, by the end of training; figures consistent with the run
    logged = [e for e in trainer.state.log_history if "energy/steps" in e or "energy/evals" in e]
    assert logged and all(math.isfinite(v) for e in logged for k, v in e.items() if k.startswith("energy/"))
    step_logs = [e for e in logged if "energy/steps" in e]
    assert sum(e["energy/steps"] for e in step_logs) == STEPS
    step_energy_j = sum(e["energy/steps"] * e["energy/step_j"] for e in step_logs)
    assert step_energy_j == pytest.approx(steps["energy_j"].sum(), rel=1e-9)
    assert step_logs[-1]["energy/total_j"] == pytest.approx(steps["energy_j"].sum(), rel=1e-9)
    for e in step_logs:
        assert e["energy/step_power_w"] == pytest.approx(WATTS, rel=1e-6)
        samples = BATCH * MICRO_BATCHES  # each optimizer step took two micro-batches of two
        assert e["energy/step_sample_j"] == pytest.approx(e["energy/step_j"] / samples)
        assert e["energy/step_bound_j"] >= 0 and e["energy/step_power_bound_w"] >= 0
    eval_logs = [e for e in logged if "energy/evals" in e]
    assert sum(e["energy/evals"] for e in eval_logs) == 2
    assert sum(e["energy/evals"] * e["energy/eval_j"] for e in eval_logs) == pytest.approx(evals["energy_j"].sum(), rel=1e-9)
    assert all(e["energy/eval_sample_j"] == pytest.approx(e["energy/eval_j"] / EVAL_SIZE) for e in eval_logs)
    assert "train_runtime" in logged[-1]  # what was left was waited for at the end of training

    # the tracker the Trainer reports to logged the same figures
    tracked = scalars(tmp_path / "out")  # wherever this transformers release puts its event files
    (tag,) = [t for t in tracked if t.endswith("energy/step_j")]
    assert tracked[tag] == pytest.approx([e["energy/step_j"] for e in step_logs], rel=1e-6)
