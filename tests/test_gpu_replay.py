"""Trace, replay and prediction report on a real GPU (``pytest -m gpu``)."""

import json
import math

import pytest

import energyframe as ef
from energyframe.replay.capture import capture

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def test_bloom_560m_trace_replay_and_report(tmp_path):
    assert torch.cuda.is_available()
    meta = capture("bloom-560m:seq_len=5", tmp_path / "trace", steps=2, warmup=2)
    assert meta["unique_kernels"] > 20 and meta["gpu_time_by_tier_us"]["gemm"] > 0
    assert (tmp_path / "trace" / "timeline.png").exists()
    kernels = [json.loads(line) for line in (tmp_path / "trace" / "kernels.jsonl").read_text().splitlines()]
    assert sum(1 for k in kernels if k["op"] is not None) / len(kernels) > 0.95  # kernels linked to their ops
    result = ef.run(
        f"replay:trace={tmp_path / 'trace'},limit=12",
        power=["nvml:gpus=0"],
        reporters=[],
        out=tmp_path / "run",
        config=ef.RunSettings(trials=2, idle_s=1.0),
    )
    report = json.loads((tmp_path / "run" / "comparison_report.json").read_text())
    assert report["full_model_inference_us"] > 0 and report["predicted_from_kernels_us"] > 0
    assert report["full_model_energy_j"] > 0 and report["predicted_energy_j"] > 0
    assert 0 < report["coverage_percent_of_gpu_time"] <= 100
    assert math.isfinite(report["gap_analysis"]["idle_energy_j"])
    full = result.summary("(full model)", "gpu0")
    assert full.trials == 2 and 50 < full.mean_power_w.median < 1200
    rebuilt = 12 - len(report["not_rebuilt"])
    assert rebuilt >= 10 and len({s.phase for s in result.summaries}) == 2 + rebuilt  # + eager and graph
    assert report["full_model_graph_inference_us"] > 0 and report["full_model_graph_energy_j"] > 0
    assert report["full_model_graph_execution"].startswith(("cuda graph", "eager: "))
    print("full model as one CUDA graph:", report["full_model_graph_execution"])
    assert (tmp_path / "run" / "prediction.png").read_bytes()[:4] == b"\x89PNG"
