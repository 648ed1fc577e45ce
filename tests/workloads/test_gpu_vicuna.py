"""vicuna-7b on real GPUs (``pytest -m gpu``): a tiny one and the full-size one at tp=1, each
phase one CUDA graph replay, the decode against its weight-read floor; at tp=2 under torchrun
where the machine has two GPUs (trace, collectives, replay over NCCL)."""

import json
import math
import subprocess
import sys

import pytest

import energyframe as ef

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def one_process(monkeypatch):
    for name in LAUNCHER:
        monkeypatch.delenv(name, raising=False)


def test_tiny_vicuna_tp1_on_the_gpu(tmp_path):
    assert torch.cuda.is_available()
    result = ef.run(
        "vicuna-7b:hidden=256,layers=2,heads=4,vocab=1000,seq_len=64,new_tokens=8,mode=both",
        power=["nvml:gpus=0"],
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunSettings(trials=2),
    )
    info = result.meta["workload"]["info"]
    assert info["dtype"] == "fp16" and info["device"] == "cuda:0"
    # the fast path: each phase's step one CUDA graph replay, and the split agrees with the model
    assert info["prefill_execution"] == info["decode_execution"] == "cuda graph"
    assert info["logits_check_difference"] < 3e-2
    rows = {r["phase"]: r for r in result.derived_table("tokens").rows}
    for phase in ("prefill", "decode"):
        assert rows[phase]["energy_per_token_j"] > 0 and rows[phase]["channel"] == "gpu0"
        assert rows[phase]["energy_per_token_j_all_gpus"] >= rows[phase]["energy_per_token_j"]


def test_vicuna_7b_prefill_512_and_decode_fp16(tmp_path):
    result = ef.run(
        "vicuna-7b:seq_len=512,new_tokens=16,mode=both",
        power=["nvml:gpus=0"],
        reporters=["console"],
        out=tmp_path / "run",
        settings=ef.RunSettings(trials=3, idle_s=2.0),
    )
    info = result.meta["workload"]["info"]
    assert 6.6e9 < info["parameters_on_this_rank"] < 6.8e9  # Llama-7B: 6.74 billion
    assert (info["hidden"], info["layers"], info["heads"], info["intermediate"]) == (4096, 32, 32, 11008)
    assert info["prefill_execution"] == info["decode_execution"] == "cuda graph"
    rows = {r["phase"]: r for r in result.derived_table("tokens").rows}
    prefill, decode = rows["prefill"], rows["decode"]
    assert prefill["tokens_per_iteration"] == 512 and decode["tokens_per_iteration"] == 16
    # a decode token reads every weight (13.5 GB): it costs far more than a prefill token
    assert decode["latency_per_token_s"] > 5 * prefill["latency_per_token_s"]
    assert decode["energy_per_token_j"] > prefill["energy_per_token_j"] > 0
    # against the weight-read floor (2.8 ms on an H200): no decode runs under it, and a graph of
    # it is not host-bound (the DTensor path took 185 ms per token at tp=2)
    # (6.74 B fp16 parameters less the embedding table, of which a token gathers one row)
    assert 13.1e9 < decode["weights_read_per_token_bytes"] < 13.6e9
    floor = decode["floor_latency_per_token_s"]
    if floor == floor:  # a GPU whose bandwidth the table knows
        assert floor < decode["latency_per_token_s"] < 4 * floor
    assert decode["latency_per_token_s"] < 10e-3
    for phase in ("prefill", "decode"):
        s = result.summary(phase, "gpu0")
        assert s.trials == 3 and 50 < s.mean_power_w.median < 1200
        print(
            f"vicuna-7b tp=1 {phase}: {rows[phase]['latency_per_token_s'] * 1e3:.3f} ms/token "
            f"(floor {rows[phase].get('floor_latency_per_token_s', float('nan')) * 1e3:.3f} ms), "
            f"{rows[phase]['energy_per_token_j']:.4f} J/token, {s.mean_power_w.median:.0f} W"
        )


def torchrun(*args):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done


def test_tp2_trace_collectives_and_replay_over_nccl(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("tp=2 needs two GPUs")
    spec = "vicuna-7b:tp=2,layers=4,seq_len=128"
    torchrun(
        "-m", "energyframe", "trace", "--workload", spec, "--out", str(tmp_path / "trace"), "--steps", "2"
    )
    for rank in (0, 1):
        folder = tmp_path / "trace" / f"rank{rank}"
        meta = json.loads((folder / "trace_meta.json").read_text())
        assert meta["world_size"] == 2 and meta["gpu_time_by_tier_us"]["communication"] > 0
        (ar,) = [json.loads(line) for line in (folder / "collectives.jsonl").read_text().splitlines()][:1]
        assert ar["kind"] == "all_reduce" and ar["count_per_iteration"] == 2 * 4
        assert ar["dtype"] == "float16" and ar["shapes"] == [[1, 128, 4096]]
        assert ar["gpu_time_us"] > 0 and any(k.startswith("nccl") for k in ar["kernel_names"])  # linked
    # every rank replays its own trace on its own GPU; rank 0 writes the one run directory
    torchrun(
        "-m", "energyframe", "run", "--power", "nvml", "--trials", "2",
        "--workload", f"replay:trace={tmp_path / 'trace'},limit=10", "--out", str(tmp_path / "run"),
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "complete" and run["distributed"]["world_size"] == 2
    gpus = [r["gpus"] for r in run["distributed"]["ranks"]]
    assert len(gpus[0]) == len(gpus[1]) == 1 and gpus[0] != gpus[1]  # each rank its own GPU
    for rank in (0, 1):
        report = json.loads((tmp_path / "run" / f"rank{rank}" / "comparison_report.json").read_text())
        comm = report["communication"]
        assert report["rank"] == rank and report["full_model_energy_j"] > 0
        assert comm["predicted_us"] > 0 and 0 < comm["share_of_predicted_percent"] < 100
        assert math.isfinite(report["error_percent"])
        info = run["distributed"]["ranks"][rank]["workload_info"]
        assert info["rank"] == rank and info["replayed_collectives"] == 1
        print(
            f"rank {rank}: full {report['full_model_inference_us'] / 1e3:.3f} ms, predicted "
            f"{report['predicted_from_kernels_us'] / 1e3:.3f} ms ({report['error_percent']:+.1f} %), "
            f"communication {comm['share_of_predicted_percent']:.1f} % (traced "
            f"{comm['traced_share_percent_of_gpu_time']:.1f} %)"
        )


def test_vicuna_7b_tp2_at_hardware_speed(tmp_path):
    """Issue 38's targets on two GPUs: decode <= 10 ms per token, a 512-token prefill <= 60 ms,
    each phase one CUDA graph replay with its all-reduces inside, on both ranks."""
    if torch.cuda.device_count() < 2:
        pytest.skip("tp=2 needs two GPUs")
    import pandas as pd

    torchrun(
        "-m", "energyframe", "run", "--power", "nvml", "--trials", "3",
        "--workload", "vicuna-7b:tp=2,mode=both,seq_len=512,new_tokens=16", "--out", str(tmp_path / "run"),
    )
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "complete"
    for rank in run["distributed"]["ranks"]:
        info = rank["workload_info"]
        assert info["prefill_execution"] == info["decode_execution"] == "cuda graph", info
    tokens = pd.read_csv(tmp_path / "run" / "tokens.csv")
    print(tokens.to_string())
    decode, prefill = tokens[tokens["phase"] == "decode"], tokens[tokens["phase"] == "prefill"]
    assert sorted(decode["rank"]) == [0, 1]
    assert (decode["latency_per_token_s"] <= 10e-3).all()
    assert (prefill["latency_per_token_s"] * 512 <= 60e-3).all()
    assert (decode["energy_per_token_j"] > 0).all()
