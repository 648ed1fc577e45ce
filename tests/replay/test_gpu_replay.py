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
    meta = capture("bloom-560m:seq_len=5,forward=static", tmp_path / "trace", steps=2, warmup=2)
    assert meta["unique_kernels"] > 20 and meta["gpu_time_by_tier_us"]["gemm"] > 0
    assert (tmp_path / "trace" / "timeline.png").exists()
    kernels = [json.loads(line) for line in (tmp_path / "trace" / "kernels.jsonl").read_text().splitlines()]
    assert sum(1 for k in kernels if k["op"] is not None) / len(kernels) > 0.95  # kernels linked to their ops
    result = ef.run(
        f"replay:trace={tmp_path / 'trace'},limit=12",
        power=["nvml:gpus=0"],
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunSettings(trials=2, idle_s=1.0),
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
    # the static forward is captured whole: no host sync, no failed capture
    assert report["full_model_graph_execution"] == "cuda graph"
    # the graph's launch gap, from profiling its replays: its kernels and their busy time
    model = report["kernel_gap_model"]
    print("kernel gap model:", model)
    assert model["kernels_counted_in"] == "graph" and model["kernels_per_inference"] > 24 * 8
    # busy time from the profiled replays, the graph's time from the windows: other clocks may
    # put busy above it (then the profiled span gives the gap, "profiled span")
    assert 0 < model["graph_kernel_busy_us"] < 1.1 * report["full_model_graph_inference_us"]
    assert model["gap_source"] in ("graph", "profiled span")
    assert 0 < model["measured_gap_per_kernel_us"] < 20
    assert report["predicted_with_kernel_gaps_us"] > report["predicted_from_kernels_us"]
    assert (tmp_path / "run" / "prediction.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("family", ["bloom", "opt"])
def test_static_decode_is_one_graph_and_gives_the_eager_tokens(family):
    """A whole greedy decode captured as one CUDA graph: no host sync (sync debug mode), and a
    replay writes the tokens the eager static path and transformers' generate produce."""
    transformers = pytest.importorskip("transformers")
    from energyframe.workloads.static_lm import StaticLM

    torch.manual_seed(0)
    if family == "bloom":
        config = transformers.BloomConfig(vocab_size=4096, hidden_size=256, n_layer=2, n_head=8)
    else:
        config = transformers.OPTConfig(
            vocab_size=4096, hidden_size=256, num_hidden_layers=2, num_attention_heads=8, ffn_dim=1024
        )
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config.pad_token_id = 0
    ids = torch.randint(0, 4096, (2, 9), device="cuda")
    static = StaticLM(model, family, ids, new_tokens=8)
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)[:, 9:]
        torch.cuda.set_sync_debug_mode("error")
        try:
            static.generate()  # raises if anything synchronises with the host
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.equal(static.generated, expected)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            static.generate()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static.generate()
        static.generated.zero_()
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(static.generated, expected)


@pytest.mark.parametrize("spec", ["bloom-560m:seq_len=128", "opt-1.3b:mode=decode,new_tokens=8"])
def test_language_models_run_as_one_cuda_graph(spec):
    result = ef.run(
        f"{spec},execution=graph", power=["nvml:gpus=0"], reporters=[], settings=ef.RunSettings(trials=2)
    )
    info = result.meta["workload"]["info"]
    assert info["execution"] == "cuda graph" and info["forward"] == "static"
    phase = "forward" if "decode" not in spec else "generate"
    s = result.summary(phase, "gpu0")
    assert s.energy_per_iter_j.median > 0 and s.time_per_iter_s.median > 0


def test_rotating_replay_reads_weights_from_memory(tmp_path):
    # l2=rotate: each replayed op rotates copies of the inputs the model reads from memory,
    # enough to exceed twice the L2
    capture("bloom-560m:seq_len=5,forward=static", tmp_path / "trace", steps=2, warmup=2)
    result = ef.run(
        f"replay:trace={tmp_path / 'trace'},limit=4,l2=rotate,full=none",
        power=["nvml:gpus=0"],
        reporters=[],
        settings=ef.RunSettings(trials=2),
    )
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = result.derived_table("replayed_ops").rows
    assert len(rows) == 4 and all(r["input_copies"] >= 1 for r in rows)
    assert any(r["input_copies"] > 1 for r in rows), (l2, rows)
    assert all(r["energy_j"] > 0 and r["latency_s"] > 0 for r in rows)
    # the trace recorded which inputs the model reads from memory: only those are rotated
    assert result.meta["workload"]["info"]["memory_inputs"] == "recorded by the trace"
    assert all(r["rotated_inputs"] != "all" for r in rows), rows
    assert any(r["rotated_inputs"] not in ("all", "none") for r in rows), rows
