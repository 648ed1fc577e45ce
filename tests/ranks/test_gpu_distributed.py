"""Several ranks on real GPUs (``pytest -m gpu``): torchrun with one rank (world size 1: the
single-process files, the rank's own GPU), and, where the machine has two GPUs, two ranks whose
nvml samplers each measure their own GPU, and vicuna-7b at tp=2 over NCCL measured through the
core's agreed windows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")
WORKLOAD = "matmul:M=4096,K=4096,N=4096"


@pytest.fixture(autouse=True)
def one_process(monkeypatch):
    for name in LAUNCHER:
        monkeypatch.delenv(name, raising=False)


def torchrun(ranks: int, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    done = subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done


def uuid(index: int) -> str:
    return "GPU-" + str(torch.cuda.get_device_properties(index).uuid)


def test_torchrun_with_one_rank_measures_its_gpu_in_the_single_process_format(tmp_path):
    assert torch.cuda.is_available()
    torchrun(
        1, "-m", "energyframe", "run", "--power", "nvml", "--workload", WORKLOAD, "--trials", "3",
        "--out", "run", cwd=tmp_path,
    )
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["status"] == "complete" and meta["distributed"] is None  # format 2 writes every section
    w = pd.read_csv(tmp_path / "run" / "windows.csv")
    assert "rank" not in w.columns and "total" not in set(w["channel"])
    (gpu,) = meta["sources"][0]["info"]["gpus"]  # LOCAL_RANK 0's GPU only, whatever else is here
    assert gpu["uuid"] == uuid(0) and gpu["selected_as"] == "the rank's GPU (LOCAL_RANK 0)"
    s = [p for p in meta["phases"] if p["channel"] == f"gpu{gpu['index']}"]
    assert s and s[0]["mean_power_w"]["median"] > 0


def test_two_ranks_each_measure_their_own_gpu(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("two ranks need two GPUs")
    done = torchrun(
        2, "-m", "energyframe", "run", "--power", "nvml", "--workload", WORKLOAD, "--trials", "3",
        "--out", "run", cwd=tmp_path,
    )
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["status"] == "complete"
    ranks = meta["distributed"]["ranks"]
    assert [r["gpus"] for r in ranks] == [[uuid(0)], [uuid(1)]]  # one sampler per GPU
    w = pd.read_csv(tmp_path / "run" / "windows.csv")
    channels = [meta["distributed"]["total"]["of"][r] for r in (0, 1)]
    assert channels[0].startswith("rank0.gpu") and channels[1].startswith("rank1.gpu")
    parts = w[w["channel"].isin(channels)]
    assert (parts["energy_j"] > 0).all() and (parts.groupby(["phase", "trial"])["iterations"].nunique() == 1).all()
    # each rank's GEMMs ran on the GPU its sampler measured: both draw load power, not one idle
    power = parts.groupby("rank")["mean_power_w"].median()
    assert power[1] > 0.5 * power[0] and power[0] > 0.5 * power[1], power
    total = w[w["channel"] == "total"].set_index(["phase", "trial"])["energy_j"]
    sums = parts.groupby(["phase", "trial"])["energy_j"].sum()
    assert total.to_numpy() == pytest.approx(sums.loc[total.index].to_numpy(), rel=1e-12)
    # the ranks' windows are one interval: their starts differ by far less than a window
    starts = w[w["channel"].isin(channels)].pivot_table(index=["phase", "trial"], columns="rank", values="start_s")
    assert ((starts[1] - starts[0]).abs() < 0.01).all()
    print(done.stdout[-3000:])
    for r in ranks:
        print(f"rank {r['rank']}: clock offset {r['clock_offset_s']} +- {r['clock_offset_uncertainty_s']} s")


def test_vicuna_tp2_over_nccl_through_the_agreed_windows(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("tp=2 needs two GPUs")
    spec = "vicuna-7b:tp=2,hidden=1024,layers=4,heads=16,vocab=32000,seq_len=128,new_tokens=8,mode=both"
    torchrun(
        2, "-m", "energyframe", "run", "--power", "nvml", "--workload", spec, "--trials", "3", "--guard", "0.5",
        "--out", "run", cwd=tmp_path,
    )
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["status"] == "complete"
    w = pd.read_csv(tmp_path / "run" / "windows.csv")
    for phase in ("prefill", "decode"):
        rows = w[(w["phase"] == phase) & (w["channel"] != "total")]
        assert rows.groupby("trial")["iterations"].nunique().max() == 1  # the same steps on both ranks
    tokens = pd.read_csv(tmp_path / "run" / "tokens.csv")
    assert sorted(set(tokens["rank"])) == [0, 1] and (tokens["energy_per_token_j"] > 0).all()
    print(tokens.to_string())
