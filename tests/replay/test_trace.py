"""Trace capture (CPU profiler), Kineto parsing and linking (a GPU-shaped trace), tiers, import."""

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from energyframe.cli import main
from energyframe.errors import UsageError
from energyframe.replay import kineto
from energyframe.replay.capture import capture

torch = pytest.importorskip("torch")

TINY_BLOOM = "bloom:hidden=64,layers=2,heads=4,vocab=1000"


def op(name, ts, dur, ext, dims=None, types=None, concrete=None, tid=1):
    args = {
        "External id": ext,
        "Input Dims": dims or [],
        "Input type": types or [],
        "Input Strides": [],
        "Concrete Inputs": concrete or [],
    }
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def gpu_trace(path):
    """Two steps of linear -> (t, addmm) then add_, and a host-to-device copy; kernels linked by
    External id, the copy only by its runtime call's correlation id."""
    events = []
    for step, base in enumerate((1000.0, 2000.0)):
        e = 100 * step
        events += [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "energyframe.step",
                "pid": 1,
                "tid": 1,
                "ts": base,
                "dur": 900,
            },
            op(
                "aten::copy_",
                base + 5,
                40,
                e + 9,
                [[64, 64], [64, 64], []],
                ["c10::Half", "c10::Half", "Scalar"],
                ["", "", "False"],
            ),
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaMemcpyAsync",
                "pid": 1,
                "tid": 1,
                "ts": base + 10,
                "dur": 5,
                "args": {"correlation": e + 50},
            },
            op(
                "aten::linear",
                base + 100,
                200,
                e + 10,
                [[8, 64], [128, 64], [128]],
                ["c10::Half"] * 3,
                ["", "", ""],
            ),
            op("aten::t", base + 105, 5, e + 11, [[128, 64]], ["c10::Half"], [""]),
            op(
                "aten::addmm",
                base + 120,
                150,
                e + 12,
                [[128], [8, 64], [64, 128], [], []],
                ["c10::Half", "c10::Half", "c10::Half", "Scalar", "Scalar"],
                ["", "", "", "1", "1"],
            ),
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": base + 130,
                "dur": 5,
                "args": {"correlation": e + 60},
            },
            op(
                "aten::add_",
                base + 400,
                50,
                e + 13,
                [[8, 128], [8, 128], []],
                ["c10::Half", "c10::Half", "Scalar"],
                ["", "", "1"],
            ),
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy HtoD (Pinned -> Device)",
                "pid": 0,
                "tid": 7,
                "ts": base + 20,
                "dur": 30,
                "args": {"correlation": e + 50, "stream": 7},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "sm90_xmma_gemm_f16f16_f32_tn",
                "pid": 0,
                "tid": 7,
                "ts": base + 300,
                "dur": 80,
                "args": {
                    "External id": e + 12,
                    "correlation": e + 60,
                    "grid": [4, 1, 1],
                    "block": [128, 1, 1],
                    "stream": 7,
                },
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "vectorized_elementwise_kernel<add>",
                "pid": 0,
                "tid": 7,
                "ts": base + 500,
                "dur": 20,
                "args": {
                    "External id": e + 13,
                    "correlation": e + 61,
                    "grid": [8, 1, 1],
                    "block": [256, 1, 1],
                    "stream": 7,
                },
            },
        ]
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return path


def test_kernels_are_linked_to_the_leaf_ops_that_launched_them(tmp_path):
    trace = kineto.parse(gpu_trace(tmp_path / "t.json.gz"))
    assert trace.iterations == 2
    by_name = {k.name: k for k in trace.kernels}
    assert by_name["sm90_xmma_gemm_f16f16_f32_tn"].op.name == "aten::addmm"
    assert by_name["vectorized_elementwise_kernel<add>"].op.name == "aten::add_"
    assert by_name["Memcpy HtoD (Pinned -> Device)"].op.name == "aten::copy_"  # through the correlation id
    leaves = {o.name for o in kineto.leaf_ops(trace)}
    assert leaves == {"aten::copy_", "aten::addmm", "aten::add_"}  # linear is composite, t launches nothing


def kernel(name, ts, dur, ext):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"External id": ext, "correlation": ext + 1000, "grid": [1, 1, 1], "block": [1, 1, 1]},
    }


def test_a_composite_that_launches_its_own_kernel_is_replayed_whole(tmp_path):
    # as an H200 trace of resnet50 in fp16 shows it: batch norm converts its float weights with
    # a child copy_, then launches its own kernel; that kernel is batch norm's, not copy_'s
    bn = "aten::_native_batch_norm_legit_no_training"
    events = [
        op(bn, 100, 50, 1, [[1, 64, 56, 56], [64], [64], [64], [64], [], []]),
        op("aten::to", 102, 10, 2, [[64]]),
        op("aten::_to_copy", 103, 8, 3, [[64]]),
        op("aten::copy_", 104, 6, 4, [[64], [64]]),
        op("aten::relu_", 200, 10, 5, [[1, 64, 56, 56]]),
        kernel("elementwise_kernel<copy>", 300, 2, 4),  # launched inside copy_
        kernel("batch_norm_transform_input_channels_last_kernel", 310, 7, 1),  # launched by bn itself
        kernel("vectorized_elementwise_kernel<relu>", 320, 2, 5),
    ]
    path = tmp_path / "bn.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = kineto.parse(path)
    assert {k.name: k.op.name for k in trace.kernels} == {
        "elementwise_kernel<copy>": bn,
        "batch_norm_transform_input_channels_last_kernel": bn,
        "vectorized_elementwise_kernel<relu>": "aten::relu_",
    }
    assert [o.name for o in kineto.leaf_ops(trace)] == [bn, "aten::relu_"]  # copy_ is not replayed apart
    ops = {o["name"]: o for o in kineto.unique_ops(trace)}
    assert ops[bn]["gpu_time_us"] == 9 and set(ops) == {bn, "aten::relu_"}


def test_unique_kernels_ops_tiers_and_gaps(tmp_path):
    trace = kineto.parse(gpu_trace(tmp_path / "t.json.gz"))
    kernels = kineto.unique_kernels(trace)
    assert [(k["name"], k["tier"], k["count"], k["count_per_iteration"]) for k in kernels] == [
        ("sm90_xmma_gemm_f16f16_f32_tn", "gemm", 2, 1.0),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy/memset", 2, 1.0),
        ("vectorized_elementwise_kernel<add>", "other", 2, 1.0),
    ]
    assert kernels[0]["op"]["input_dims"] == [[128], [8, 64], [64, 128], [], []]
    assert kernels[0]["grid"] == [4, 1, 1] and kernels[0]["mean_us"] == 80
    ops = {o["name"]: o for o in kineto.unique_ops(trace)}
    assert ops["aten::addmm"]["gpu_time_us"] == 160 and ops["aten::addmm"]["count_per_iteration"] == 1.0
    assert ops["aten::copy_"]["kernel_names"] == ["Memcpy HtoD (Pinned -> Device)"]
    gaps = kineto.gaps(trace)
    assert gaps["span_us"] == 500 and gaps["busy_us"] == 130 and gaps["idle_us"] == 370


@pytest.mark.parametrize(
    "name,category,tier",
    [
        ("nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "kernel", "gemm"),
        ("ampere_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "kernel", "gemm"),
        ("void cutlass::Kernel2<cutlass_80_wmma_tensorop>", "kernel", "gemm"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor>", "kernel", "other"),
        ("Memset (Device)", "gpu_memset", "memcpy/memset"),
        ("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", "memcpy/memset"),
    ],
)
def test_tiers(name, category, tier):
    assert kineto.tier(name, category) == tier


def test_capture_on_the_cpu_records_leaf_ops(tmp_path):
    meta = capture(TINY_BLOOM, tmp_path / "trace", steps=2, warmup=1)
    assert meta["iterations"] == 2 and meta["unique_kernels"] == 0 and meta["unique_leaf_ops"] > 10
    ops = kineto.read_jsonl(tmp_path / "trace" / "ops.jsonl")
    names = {o["name"] for o in ops}
    assert {"aten::native_layer_norm", "aten::_softmax", "aten::bmm"} <= names
    assert not names & {
        "aten::linear",
        "aten::layer_norm",
        "aten::softmax",
        "aten::view",
    }  # composites, views
    embedding = next(o for o in ops if o["name"] == "aten::index_select")
    assert embedding["count"] == 2 and embedding["count_per_iteration"] == 1.0
    assert (tmp_path / "trace" / "trace.json.gz").exists()
    assert json.loads((tmp_path / "trace" / "trace_meta.json").read_text())["workload"] == TINY_BLOOM


def test_trace_import_command(tmp_path):
    path = gpu_trace(tmp_path / "external.json.gz")
    result = CliRunner().invoke(main, ["trace", "import", str(path), "--out", str(tmp_path / "imported")])
    assert result.exit_code == 0, result.output
    assert "3 unique kernels (6 launches), 3 unique leaf ops over 2 iteration(s)" in result.output
    assert (tmp_path / "imported" / "timeline.png").exists()
    assert (tmp_path / "imported" / "trace.json.gz").exists()


def test_import_of_a_real_gpu_trace(tmp_path):
    # recorded on an H200 (torch 2.11, 2026-11-22): energyframe trace --steps 1 --warmup 1
    # --workload bloom:layers=1,hidden=64,heads=2,vocab=256,seq_len=5
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "kineto-h200" / "bloom-tiny.json.gz"
    result = CliRunner().invoke(main, ["trace", "import", str(fixture), "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert "44 unique kernels (56 launches), 45 unique leaf ops over 1 iteration(s)" in result.output
    meta = json.loads((tmp_path / "t" / "trace_meta.json").read_text())
    assert set(meta["gpu_time_by_tier_us"]) == {"gemm", "memcpy/memset", "other"}
    assert meta["gpu_time_by_tier_us"]["gemm"] > 0
    assert 0 < meta["gaps"]["busy_us"] < meta["gaps"]["span_us"]  # a tiny model: mostly launch gaps
    kernels = kineto.read_jsonl(tmp_path / "t" / "kernels.jsonl")
    assert sum(k["count"] for k in kernels) == 56
    assert all(k["op"] for k in kernels)  # each kernel linked to the aten op that launched it
    gemms = [k for k in kernels if k["tier"] == "gemm"]
    assert gemms and all(k["grid"] and k["block"] for k in gemms)
    ops = {o["name"] for o in kineto.read_jsonl(tmp_path / "t" / "ops.jsonl")}
    assert {
        "aten::addmm",
        "aten::bmm",
        "aten::native_layer_norm",
        "aten::index_select",
        "aten::_softmax",
    } <= ops
    # baddbmm copies its input with a child copy_, then launches its own GEMM: one unit, both kernels
    (baddbmm,) = [o for o in kineto.read_jsonl(tmp_path / "t" / "ops.jsonl") if o["name"] == "aten::baddbmm"]
    assert len(baddbmm["kernel_names"]) == 2 and baddbmm["gpu_time_by_tier_us"]["gemm"] > 0


def test_ops_of_a_real_gpu_trace_rebuild(tmp_path):
    from energyframe.replay.rebuild import RebuildError, float_dtype_hint, rebuild

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "kineto-h200" / "bloom-tiny.json.gz"
    CliRunner().invoke(main, ["trace", "import", str(fixture), "--out", str(tmp_path / "t")])
    records = [r for r in kineto.read_jsonl(tmp_path / "t" / "ops.jsonl") if r["gpu_time_us"] > 0]
    hint = float_dtype_hint(records)
    failed, ran, cpu_lacks = [], 0, []
    for record in records:
        try:
            op = rebuild(record, hint)
        except RebuildError as e:
            failed.append((record["name"], str(e)))
            continue
        try:
            op.call(op.make_args(torch.device("cpu")))
            ran += 1
        except RuntimeError as e:  # a GPU trace in fp16: a few half kernels exist only on the GPU
            assert "not supported on CPU" in str(e) or "not implemented for 'Half'" in str(e), e
            cpu_lacks.append(record["name"])
    # the profiler leaves the index list of mask[...] empty: the one op that cannot be rebuilt
    assert [name for name, _ in failed] == ["aten::index"], failed
    assert len(records) >= 40 and ran >= len(records) - 5, cpu_lacks


@pytest.mark.parametrize(
    "content,message",
    [
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op"', "is not complete JSON"),
        (b'{"schemaVersion": 1}', "has no traceEvents list: not a PyTorch profiler (Kineto) trace"),
        (b'{"traceEvents": []}', "holds no aten ops and no GPU kernels"),
    ],
)
def test_malformed_traces_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(UsageError) as e:
        kineto.parse(path)
    assert str(e.value).startswith(str(path)) and message in str(e.value)


def test_truncated_gzip(tmp_path):
    data = gzip.compress(b'{"traceEvents": [' + b'{"ph": "X"},' * 1000 + b"{}]}")
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UsageError, match="cannot be read as a trace .*truncated"):
        kineto.parse(path)


def test_trace_command_needs_its_options():
    result = CliRunner().invoke(main, ["trace"])
    assert result.exit_code == 2
    assert result.output.endswith(
        "Error: energyframe trace needs --workload SPEC and --out DIR (or: energyframe trace import FILE)\n"
    )


def test_kernels_of_graph_replays_are_counted_per_step(tmp_path):
    """A profiled graph replay: no aten op launches its kernels (one cudaGraphLaunch does), so
    they are counted by the step annotation they ran in."""
    from energyframe.replay.graphgap import kernels_per_step

    events = []
    for step, base in enumerate((1000.0, 2000.0)):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "energyframe.step",
                "pid": 1,
                "tid": 1,
                "ts": base,
                "dur": 500,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaGraphLaunch",
                "pid": 1,
                "tid": 1,
                "ts": base + 1,
                "dur": 5,
                "args": {"correlation": 7 + step},
            }
        )
        # three kernels of 10 us with 2 us between them, then one overlapping the last
        for i, (start, dur) in enumerate([(10, 10), (22, 10), (34, 10), (40, 10)]):
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"k{i}",
                    "pid": 0,
                    "tid": 7,
                    "ts": base + start,
                    "dur": dur,
                    "args": {"correlation": 7 + step, "stream": 7},
                }
            )
    path = tmp_path / "graph.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got = kernels_per_step(kineto.parse(path))
    assert got.replays == 2 and got.kernels == 4
    assert got.busy_s == pytest.approx(36e-6) and got.span_s == pytest.approx(40e-6)


def test_a_trace_without_kernels_in_steps_gives_no_graph_figures(tmp_path):
    from energyframe.replay.graphgap import kernels_per_step

    path = tmp_path / "cpu.json"
    path.write_text(
        json.dumps({"traceEvents": [op("aten::mm", 10, 5, 1, [[2, 2], [2, 2]], ["float", "float"])]})
    )
    assert kernels_per_step(kineto.parse(path)) is None
