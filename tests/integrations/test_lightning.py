"""``EnergyCallback`` in a real Lightning ``Trainer`` on the CPU: a tiny module, the replay source,
gradient accumulation and validation; what the logger wrote (CSVLogger's metrics.csv) adds up to
the saved run's windows. Under DDP (two processes over gloo, each replaying its own power: 100 W
and 50 W) the figures are the two ranks' sum, and rank 0 saves one run with both."""

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from tests.conftest import write_power_csv

pytest.importorskip("torch")
lightning = pytest.importorskip("lightning")
pytestmark = pytest.mark.slow  # Lightning takes seconds to import; DDP starts two processes

SCRIPT = """
    import os, sys, time
    from pathlib import Path
    import torch
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger
    from energyframe.integrations.lightning import EnergyCallback

    class Regression(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            x, y = batch
            time.sleep(0.01)  # every window longer than a sample period
            return torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), y)

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), y), sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    root = Path(sys.argv[1])
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(x, x.sum(1))
    callback = EnergyCallback(power=[f"replay:file={root}/p-{{rank}}.csv,loop=true"])
    trainer = L.Trainer(
        max_steps=6, accelerator="cpu", devices=int(sys.argv[2]), strategy=sys.argv[3],
        accumulate_grad_batches=2, log_every_n_steps=2, val_check_interval=6, callbacks=[callback],
        logger=CSVLogger(root, name="logs"), default_root_dir=root, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
    )
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    trainer.fit(Regression(), loader, torch.utils.data.DataLoader(data, batch_size=16))
    if trainer.is_global_zero:
        print("RUN", callback.run_dir)
"""


def fit(tmp_path, devices: int, strategy: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the script; return the logger's energy rows and the saved run's windows."""
    for rank, watts in ((0, 100.0), (1, 50.0)):
        write_power_csv(tmp_path / f"p-{rank}.csv", watts, period_s=0.01, duration_s=30.0)
    (tmp_path / "fit.py").write_text(textwrap.dedent(SCRIPT))
    launcher = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")
    env = {k: v for k, v in os.environ.items() if k not in launcher}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "fit.py"), str(tmp_path), str(devices), strategy],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RUN ")]
    run_dir = tmp_path / line.split(" ", 1)[1]
    assert run_dir.parent == tmp_path / "energyframe"
    (metrics,) = (tmp_path / "logs").rglob("metrics.csv")
    logged = pd.read_csv(metrics)
    return logged, pd.read_csv(run_dir / "windows.csv")


def check(logged, windows, channel, watts, ranks):
    steps = logged.dropna(subset=["energy/steps"])
    assert steps["energy/steps"].sum() == 6  # every optimizer step once, by the end of training
    mine = windows[(windows["phase"] == "train-step") & (windows["channel"] == channel)]
    assert len(mine) == 6
    total = (steps["energy/steps"] * steps["energy/step_j"]).sum()
    assert total == pytest.approx(mine["energy_j"].sum(), rel=1e-9)
    assert steps["energy/step_power_w"].to_numpy() == pytest.approx(watts, rel=1e-6)
    # two micro-batches of two samples per step, on every rank
    ratio = steps["energy/step_j"] / steps["energy/step_sample_j"]
    assert ratio.to_numpy() == pytest.approx(4.0 * ranks)
    evals = logged.dropna(subset=["energy/evals"])
    validation = windows[(windows["phase"] == "evaluation") & (windows["channel"] == channel)]
    assert len(validation) == 2 and evals["energy/evals"].sum() == 2  # after 6 batches and after 12
    logged_j = (evals["energy/evals"] * evals["energy/eval_j"]).sum()
    assert logged_j == pytest.approx(validation["energy_j"].sum(), rel=1e-9)
    # the 64 validation samples, shared by the ranks
    assert (evals["energy/eval_j"] / evals["energy/eval_sample_j"]).to_numpy() == pytest.approx(64.0)


def test_one_process(tmp_path):
    logged, windows = fit(tmp_path, 1, "auto")
    check(logged, windows, "replay", 100.0, ranks=1)


def test_two_ranks_over_gloo_sum_their_gpus(tmp_path):
    logged, windows = fit(tmp_path, 2, "ddp")
    assert {"rank0.replay", "rank1.replay", "total"} <= set(windows["channel"])
    check(logged, windows, "total", 150.0, ranks=2)


def test_both_package_names_and_ddp_spawn_pickling():
    import pickle

    from energyframe.integrations import lightning as integration

    assert issubclass(integration.EnergyCallback, lightning.pytorch.Callback)
    pl = pytest.importorskip("pytorch_lightning")
    assert issubclass(integration.PLEnergyCallback, pl.Callback)
    for cls in (integration.EnergyCallback, integration.PLEnergyCallback):
        copy = pickle.loads(pickle.dumps(cls(power="none")))  # what ddp_spawn sends to each process
        assert type(copy) is cls and copy.meter.power == "none"
