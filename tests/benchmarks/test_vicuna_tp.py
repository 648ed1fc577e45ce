"""benchmarks/vicuna_tp.py, the script issue 38's tensor-parallel replay runs on GPUs, run through
on the CPU at tp=2 over gloo (timing only): every op of both phases traced and replayed on each
rank, the collectives included, and rank 0's table and figures written. It had refused its own
CPU mode (``power=None``) without a test to say so."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "vicuna_tp.py"


@pytest.mark.slow
def test_tp2_on_the_cpu_traces_and_replays_every_op_on_each_rank(tmp_path):
    out = tmp_path / "figures.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT),
        "--cpu", "--shrink", "hidden=64,layers=2,heads=4,vocab=128", "--seq-len", "8", "--new-tokens", "4",
        "--window-s", "0.02", "--trials", "1", "--out", str(tmp_path / "runs"), "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["tp"] == 2
    rows = figures["rows"]
    assert sorted((r["phase"], r["rank"]) for r in rows) == [("decode", 0), ("decode", 1), ("prefill", 0), ("prefill", 1)]
    for r in rows:
        # each rank replayed its ops, its all-reduces among them, and nothing was left out
        assert r["predicted_latency_per_token_s"] > 0 and r["latency_per_token_s"] > 0
        assert r["collective_calls_per_iteration"] > 0 and 0 < r["communication_share_percent"] < 100
        assert r["not_rebuilt"] == 0
