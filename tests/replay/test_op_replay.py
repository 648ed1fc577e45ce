"""Rebuilding ops from profiler records, the replay workload on the CPU, and the report math."""

import math

import pytest

import energyframe as ef
from energyframe.replay.capture import capture
from energyframe.replay.rebuild import RebuildError, float_dtype_hint, rebuild
from energyframe.replay.report import OpFigures, prediction

torch = pytest.importorskip("torch")
CPU = torch.device("cpu")


def record(name, dims, types, concrete=None, strides=None, **extra):
    return {
        "name": name,
        "input_dims": dims,
        "input_types": types,
        "input_strides": strides,
        "concrete_inputs": concrete or [""] * len(types),
        **extra,
    }


def run(rec, hint="float32"):
    op = rebuild(rec, hint)
    positional, keywords = op.make_args(CPU)
    return op.overload(*positional, **keywords)


@pytest.mark.parametrize(
    "rec,shape",
    [
        (
            record(
                "aten::addmm",
                [[16], [4, 8], [8, 16], [], []],
                ["float", "float", "float", "Scalar", "Scalar"],
                ["", "", "", "1", "1"],
            ),
            (4, 16),
        ),
        (record("aten::mm", [[4, 8], [8, 3]], ["float", "float"]), (4, 3)),
        (record("aten::bmm", [[2, 4, 8], [2, 8, 3]], ["float", "float"]), (2, 4, 3)),
        (
            record(
                "aten::baddbmm",
                [[2, 1, 5], [2, 5, 8], [2, 8, 5], [], []],
                ["float", "float", "float", "Scalar", "Scalar"],
                ["", "", "", "1.", "0.125"],
            ),
            (2, 5, 5),
        ),
        (
            record(
                "aten::convolution",
                [[1, 3, 8, 8], [4, 3, 3, 3], [4], [], [], [], [], [], []],
                [
                    "float",
                    "float",
                    "float",
                    "ScalarList",
                    "ScalarList",
                    "ScalarList",
                    "Scalar",
                    "ScalarList",
                    "Scalar",
                ],
                ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
            ),
            (1, 4, 8, 8),
        ),
        (
            record(
                "aten::native_layer_norm",
                [[2, 5, 16], [], [16], [16], []],
                ["float", "ScalarList", "float", "float", "Scalar"],
                ["", "[16]", "", "", "1e-05"],
            ),
            None,
        ),
        (
            record("aten::_softmax", [[2, 4, 5], [], []], ["float", "Scalar", "Scalar"], ["", "-1", "False"]),
            (2, 4, 5),
        ),
        (record("aten::gelu", [[3, 7], []], ["float", ""], ["", "'tanh'"]), (3, 7)),
        (record("aten::add", [[3, 7], [3, 7], []], ["float", "float", "Scalar"], ["", "", "1"]), (3, 7)),
        (record("aten::mul", [[3, 7], []], ["float", "Scalar"], ["", "0.5"]), (3, 7)),
        (
            record(
                "aten::embedding",
                [[1000, 16], [2, 5], [], [], []],
                ["float", "long int", "Scalar", "Scalar", "Scalar"],
                ["", "", "-1", "False", "False"],
            ),
            (2, 5, 16),
        ),
        (
            record(
                "aten::index_select", [[1000, 16], [], [5]], ["float", "Scalar", "long int"], ["", "0", ""]
            ),
            (5, 16),
        ),
        (record("aten::cat", [[[2, 3], [2, 4]], []], ["TensorList", "Scalar"], ["", "1"]), (2, 7)),
        (
            record(
                "aten::arange",
                [[], [], [], [0]],
                ["Scalar", "Scalar", "Scalar", "long int"],
                ["0", "5", "1", ""],
            ),
            (5,),
        ),
        (
            record(
                "aten::scalar_tensor",
                [[], [], [], [], []],
                ["Scalar", "Scalar", "Scalar", "", ""],
                ["-3.4e+38", "6", "0", "", ""],
            ),
            (),
        ),
        (
            record("aten::copy_", [[64, 64], [64, 64], []], ["float", "float", "Scalar"], ["", "", "False"]),
            (64, 64),
        ),
    ],
    ids=lambda v: v["name"] if isinstance(v, dict) else None,
)
def test_common_schemas_rebuild(rec, shape):
    out = run(rec)
    first = out[0] if isinstance(out, tuple) else out
    if shape is not None:
        assert tuple(first.shape) == shape


def test_dtype_codes_become_dtypes_and_layouts_are_kept():
    out = run(
        record(
            "aten::scalar_tensor",
            [[], [], [], [], []],
            ["Scalar", "Scalar", "Scalar", "", ""],
            ["2.5", "15", "0", "", ""],
        )
    )
    assert out.dtype == torch.bfloat16 and float(out) == 2.5


def test_strides_and_index_ranges_are_respected():
    op = rebuild(
        record(
            "aten::embedding",
            [[50, 4], [1, 200], [], [], []],
            ["float", "long int", "Scalar", "Scalar", "Scalar"],
            ["", "", "-1", "False", "False"],
        ),
        "float32",
    )
    positional, _ = op.make_args(CPU)
    assert int(positional[1].max()) < 50 and int(positional[1].min()) >= 0
    op = rebuild(
        record(
            "aten::add",
            [[2, 3, 4, 5], [2, 3, 4, 5], []],
            ["float", "float", "Scalar"],
            ["", "", "1"],
            strides=[[60, 1, 15, 3], [60, 20, 5, 1], []],
        ),
        "float32",
    )
    positional, _ = op.make_args(CPU)
    assert positional[0].stride() == (60, 1, 15, 3)


def test_tensor_lists_take_the_traces_float_type():
    records = [
        record("aten::mm", [[2, 2], [2, 2]], ["c10::Half", "c10::Half"]),
        record("aten::add", [[2], [2], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"]),
    ]
    assert float_dtype_hint(records) in ("float16", "bfloat16")
    out = run(record("aten::cat", [[[2], [3]], []], ["TensorList", "Scalar"], ["", "0"]), "float16")
    assert out.dtype == torch.float16


@pytest.mark.parametrize(
    "rec,message",
    [
        (record("aten::no_such_op", [[2]], ["float"]), "torch has no op aten::no_such_op"),
        (record("aten::mm", [[2, 2]], ["float"]), r"no overload of aten::mm takes \(float\)"),
        (record("prim::Something", [[2]], ["float"]), "prim::Something is not an aten op"),
        # as a GPU trace of BLOOM records mask[...]: the index list comes out empty
        (
            record("aten::index", [[1, 5], []], ["bool", ""]),
            r"does not hold the tensors of aten::index's indices",
        ),
    ],
)
def test_unrebuildable_ops_say_why(rec, message):
    with pytest.raises(RebuildError, match=message):
        rebuild(rec)


def test_report_math_by_hand():
    ops = [
        OpFigures(
            {"count_per_iteration": 2.0, "gpu_time_us": 200.0, "gpu_time_by_tier_us": {"gemm": 200.0}},
            "a",
            100e-6,
            0.05,
        ),
        OpFigures(
            {
                "count_per_iteration": 4.0,
                "gpu_time_us": 80.0,
                "gpu_time_by_tier_us": {"other": 60.0, "memcpy/memset": 20.0},
            },
            "b",
            10e-6,
            0.004,
        ),
    ]
    meta = {
        "iterations": 1,
        "gpu_time_us": 300.0,
        "gaps": {"span_us": 500.0, "busy_us": 280.0, "idle_us": 220.0},
    }
    report = prediction(
        ops,
        [],
        meta,
        full_latency_s=400e-6,
        full_energy_j=0.15,
        idle_power_w=100.0,
        not_rebuilt=[{"op": "x", "reason": "y", "share_percent": 6.7}],
    )
    assert report["predicted_from_kernels_us"] == pytest.approx(2 * 100 + 4 * 10)
    assert report["error_percent"] == pytest.approx(100 * (240 / 400 - 1))
    assert report["predicted_energy_j"] == pytest.approx(2 * 0.05 + 4 * 0.004)
    assert report["coverage_percent_of_gpu_time"] == pytest.approx(100 * 280 / 300)
    assert report["tier_breakdown"]["gemm"]["predicted_us"] == pytest.approx(200)
    assert report["tier_breakdown"]["other"]["predicted_us"] == pytest.approx(40 * 0.75)
    gap = report["gap_analysis"]
    assert gap["traced_gpu_idle_us"] == pytest.approx(220) and gap["idle_energy_j"] == pytest.approx(
        220e-6 * 100
    )
    assert gap["predicted_plus_idle_us"] == pytest.approx(460)
    # ops predict 0.116 J in 240 us; the measured 400 us leave 160 us at 100 W idle
    assert gap["energy_at_measured_latency_j"] == pytest.approx(0.116 + 160e-6 * 100)
    assert gap["energy_at_measured_latency_error_percent"] == pytest.approx(100 * (0.132 / 0.15 - 1))
    assert math.isnan(report["full_model_graph_inference_us"]) and math.isnan(gap["host_overhead_us"])
    assert report["not_rebuilt_share_percent_of_gpu_time"] == 6.7
    with_graph = prediction(
        ops,
        [],
        meta,
        400e-6,
        0.15,
        100.0,
        [],
        graph_latency_s=300e-6,
        graph_energy_j=0.12,
        graph_execution="cuda graph",
    )
    assert with_graph["graph_error_percent"] == pytest.approx(100 * (240 / 300 - 1))
    assert with_graph["graph_energy_error_percent"] == pytest.approx(100 * (0.116 / 0.12 - 1))
    assert with_graph["gap_analysis"]["host_overhead_us"] == pytest.approx(100)


TINY_BLOOM = "bloom:hidden=64,layers=2,heads=4,vocab=1000"


def replay_tiny_bloom(tmp_path, options: str, out=None):
    """Trace a tiny BLOOM on the CPU into tmp_path/trace and replay it with ``options``."""
    capture(TINY_BLOOM, tmp_path / "trace", steps=2, warmup=1)
    return ef.run(
        f"replay:trace={tmp_path / 'trace'},unroll=2,{options}",
        power="none",
        reporters=[],
        out=out,
        settings=ef.RunSettings(trials=2, min_window_s=0.01),
    )


@pytest.mark.slow
def test_replay_workload_on_the_cpu(tmp_path):
    result = replay_tiny_bloom(tmp_path, "limit=8", out=tmp_path / "run")
    phases = list(result.windows["phase"].unique())
    assert phases[0] == "(full model)" and len(phases) == 1 + 8
    comparison = result.derived_table("comparison").rows[0]
    assert comparison["replayed_ops"] == 8 and comparison["full_model_inference_us"] > 0
    assert math.isfinite(comparison["predicted_from_kernels_us"])
    assert (tmp_path / "run" / "comparison_report.json").exists()
    assert (tmp_path / "run" / "prediction.png").read_bytes()[:4] == b"\x89PNG"


def test_rotated_calls_read_each_copy_of_their_inputs_in_turn():
    import torch

    from energyframe.workloads.graph import Rotation, tensor_bytes

    made, seen = [], []

    def make(device):
        made.append(torch.zeros(1 << 18, dtype=torch.float32, device=device))  # 1 MiB
        return ([made[-1]], {"scale": 2.0})

    rotation = Rotation(make, lambda args: seen.append(args[0][0].data_ptr()), l2_bytes=2 << 20, most=20)
    states = rotation.make("cpu")
    assert tensor_bytes(states[0]) == 1 << 20
    assert rotation.copies == len(states) == 4  # four 1-MiB copies exceed twice a 2-MiB L2
    call = rotation.rotated_call()
    for _ in range(8):  # every call is handed all copies; it takes the next one itself
        call(states)
    assert seen == [t.data_ptr() for t in made] * 2
    capped = Rotation(make, lambda args: None, l2_bytes=64 << 20, most=3)
    assert len(capped.make("cpu")) == 3  # never more copies than calls in one graph


def test_rotating_replay_records_its_copies_on_the_cpu(tmp_path):
    result = replay_tiny_bloom(tmp_path, "limit=2,l2=rotate,full=none")
    # no L2 to exceed on the CPU: each op keeps its one copy, and says so
    rows = result.derived_table("replayed_ops").rows
    assert [r["input_copies"] for r in rows] == [1, 1]
    assert [r["rotated_inputs"] for r in rows] == ["none", "none"]
    info = result.meta["workload"]["info"]
    assert info["l2"] == "rotate" and info["memory_inputs"] == "recorded by the trace"


def test_replay_needs_a_trace_directory(tmp_path):
    with pytest.raises(ef.UsageError, match="is not a trace directory: no ops.jsonl"):
        ef.run(f"replay:trace={tmp_path}", power="none", reporters=[])


@pytest.mark.parametrize(
    "schema_type,recorded,fits",
    [
        ("Optional[List[int]]", "ScalarList", True),  # mean.dim's dim (int[1]?)
        ("int[1]?", "ScalarList", True),
        ("List[str]", "ScalarList", False),  # mean.names_dim's Dimname[] dim: never a recorded list
        ("str", "Scalar", False),  # gather.dimname's dim
        ("str", "", True),  # a string argument (gelu's approximate) is recorded with no type
        ("Optional[Tensor]", "", True),
        ("List[Optional[Tensor]]", "", False),  # an index list the profiler left empty
    ],
)
def test_schema_types_against_recorded_types(schema_type, recorded, fits):
    from energyframe.replay.rebuild import _fits

    assert _fits(schema_type, recorded) is fits


def test_mean_over_dims_picks_the_int_list_overload():
    rec = record(
        "aten::mean",
        [[2, 8, 7, 7], [], [], []],
        ["float", "ScalarList", "Scalar", ""],
        ["", "[-1, -2]", "True", ""],
    )
    op = rebuild(rec)
    assert op.overload._overloadname == "dim"
    positional, keywords = op.make_args(torch.device("cpu"))
    assert op.overload(*positional, **keywords).shape == (2, 8, 1, 1)


def test_python_numbers_stay_cpu_scalars():
    # as a GPU trace records x * 0.5: the number is a 0-dim double tensor, a CPU scalar in the op
    device = torch.device("meta")  # stands for the GPU: any device but the CPU
    positional, _ = rebuild(record("aten::mul", [[1, 5, 256], []], ["c10::Half", "double"])).make_args(device)
    assert positional[0].device == device and positional[1].device.type == "cpu" and positional[1].dim() == 0
    # a 0-dim half tensor (a parameter) is the model's own tensor: on the device
    positional, _ = rebuild(record("aten::mul", [[1, 5, 256], []], ["c10::Half", "c10::Half"])).make_args(
        device
    )
    assert positional[1].device == device


@pytest.mark.parametrize(
    "index,position",
    [
        (lambda x, m: x[m], 0),  # a mask over the leading dimensions
        (lambda x, m: x[:, m[0]], 1),  # a 1-d mask over the second dimension
    ],
    ids=["leading", "second-dim"],
)
def test_boolean_mask_index_is_rebuilt_from_a_real_trace(tmp_path, index, position):
    """The profiler records x[mask]'s index list as empty; the mask's shape comes from the
    op's nonzero child, and its True count from the selects of that nonzero's result."""
    from torch.profiler import ProfilerActivity, profile

    from energyframe.replay import kineto

    x = torch.randn(4, 6)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask.view(-1)[torch.randperm(24)[:5]] = True
    mask[0, 1] = True  # the first row has a True value whatever the permutation
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        expected = index(x, mask)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    # on the CPU no kernel marks aten::index as launching its own, so take its record directly
    records = [op.record() for op in kineto.parse(tmp_path / "trace.json").ops if op.name == "aten::index"]
    assert len(records) == 1 and records[0]["input_dims"][1] == []  # what the profiler left empty
    masks = records[0]["boolean_masks"]
    used = mask if position == 0 else mask[0]
    assert masks == [
        {"dims": list(used.shape), "strides": list(used.stride()), "true_count": int(used.sum())}
    ]
    op = rebuild(records[0], "float32")
    positional, _ = op.make_args(CPU)
    indices = positional[1]
    assert indices[:position] == [None] * position
    assert indices[position].dtype == torch.bool and int(indices[position].sum()) == int(used.sum())
    assert op.overload(*positional).shape == expected.shape


def test_masks_that_do_not_fit_the_tensor_are_refused():
    rec = record("aten::index", [[4, 6], []], ["float", ""])
    rec["boolean_masks"] = [{"dims": [5], "strides": [1], "true_count": 2}]
    with pytest.raises(
        RebuildError,
        match=r"boolean masks of shapes \[\[5\]\] do not fit the indexed tensor's shape \[4, 6\]",
    ):
        rebuild(rec)


def test_kernel_gap_arithmetic():
    from energyframe.replay.report import with_kernel_gaps
    from energyframe.workloads.closure import gap_from_span

    nan = math.nan
    # resnet50 at batch 1 on an H200: a 0.860-ms graph of 78 kernels busy for 0.750 ms
    assert gap_from_span(860e-6, 750e-6, nan, 78) == (pytest.approx(110e-6 / 78), "graph")
    assert math.isnan(gap_from_span(nan, 750e-6, nan, 78)[0]) and math.isnan(gap_from_span(860e-6, 750e-6, nan, 0)[0])
    # the profile ran slower than the windows (clocks): the profiled replays' own span decides,
    # and without one no gap is given rather than a negative one
    assert gap_from_span(740e-6, 750e-6, 860e-6, 78) == (pytest.approx(110e-6 / 78), "profiled span")
    assert math.isnan(gap_from_span(740e-6, 750e-6, nan, 78)[0])
    gapped = with_kernel_gaps(0.719e-3, 0.120, 78, 1.4e-6, 118.0)
    assert gapped["gaps_s"] == pytest.approx(78 * 1.4e-6)
    assert gapped["latency_s"] == pytest.approx(0.719e-3 + 78 * 1.4e-6)
    # the gaps at the ops' own mean power (0.120 J over 0.719 ms), and at idle power
    assert gapped["energy_j"] == pytest.approx(0.120 * (1 + 78 * 1.4e-6 / 0.719e-3))
    assert gapped["kernel_gaps_energy_at_idle_j"] == pytest.approx(0.120 + 78 * 1.4e-6 * 118.0)


def test_the_report_adds_the_graphs_kernel_gaps():
    ops = [OpFigures({"count_per_iteration": 10.0, "gpu_time_us": 100.0}, "a", 10e-6, 0.002)]
    meta = {"iterations": 2, "gpu_time_us": 200.0, "kernel_launches": 24, "gaps": {}}
    common = dict(
        ops=ops,
        kernels=[],
        meta=meta,
        full_latency_s=1e-3,
        full_energy_j=0.05,
        idle_power_w=100.0,
        not_rebuilt=[],
        graph_latency_s=130e-6,
        graph_energy_j=0.025,
    )
    # Σ = 100 us and 0.02 J; the graph: 12 kernels busy for 106 us in 130 us, so 2 us a kernel
    report = prediction(**common, graph_kernels=12, graph_busy_s=106e-6)
    model = report["kernel_gap_model"]
    assert model["measured_gap_per_kernel_us"] == pytest.approx(2.0) and model["gap_source"] == "graph"
    assert model["kernels_counted_in"] == "graph" and model["sum_vs_graph_kernels_percent"] == pytest.approx(
        100 * (100 / 106 - 1)
    )
    assert report["predicted_with_kernel_gaps_us"] == pytest.approx(124)
    assert report["kernel_gap_error_percent"] == pytest.approx(100 * (124 / 130 - 1))
    assert report["predicted_with_kernel_gaps_energy_j"] == pytest.approx(0.02 * 124 / 100)
    assert report["kernel_gap_energy_error_percent"] == pytest.approx(100 * (0.0248 / 0.025 - 1))
    # a gap given as an option (measured on another model) on the trace's kernels: 24 / 2 iterations
    report = prediction(**{**common, "graph_latency_s": math.nan}, kernel_gap_option_s=1.5e-6)
    model = report["kernel_gap_model"]
    assert (
        model["gap_source"] == "option"
        and model["kernels_counted_in"] == "trace"
        and model["kernels_per_inference"] == 12
    )
    assert report["predicted_with_kernel_gaps_us"] == pytest.approx(100 + 12 * 1.5)
    assert math.isnan(report["kernel_gap_error_percent"])  # no graph measured to compare with


def test_the_trace_records_which_inputs_the_model_reads_from_memory(tmp_path):
    """One more step under a dispatch mode: tensors no op of the step made (weights, biases,
    the token ids) are read from memory; activations the step wrote are not among them."""
    from energyframe.replay import kineto
    from energyframe.replay.memory_inputs import memory_positions, read_memory_inputs

    capture(TINY_BLOOM, tmp_path / "trace", steps=1, warmup=1)
    signatures = read_memory_inputs(tmp_path / "trace")
    assert signatures is not None
    assert ((1000, 64), (64, 1), "float32") in signatures  # the embedding table
    assert ((64, 1000), (1, 64), "float32") in signatures  # the tied LM head: a transposed view of it
    assert ((1, 5), (5, 1), "int64") in signatures  # the token ids
    assert not any(dims[:2] == (1, 5) and len(dims) == 3 for dims, _s, _t in signatures)  # hidden states
    by_name = {}
    for record in kineto.read_jsonl(tmp_path / "trace" / "ops.jsonl"):
        by_name.setdefault(record["name"], []).append(memory_positions(record, signatures))
    assert {2, 3} in by_name["aten::native_layer_norm"]  # weight and bias; the input is an activation
    assert all(p == set() for p in by_name["aten::bmm"])  # attention multiplies activations only
    assert {0} in by_name["aten::index_select"]  # the embedding lookup reads the table


def test_a_trace_without_the_record_rotates_every_input(tmp_path):
    from energyframe.replay.memory_inputs import MEMORY_INPUTS, read_memory_inputs

    assert read_memory_inputs(tmp_path) is None
    (tmp_path / MEMORY_INPUTS).write_text("{not json")
    assert read_memory_inputs(tmp_path) is None  # unreadable: logged, and every input rotates


def test_rotation_copies_only_the_inputs_read_from_memory():
    import torch

    from energyframe.replay.memory_inputs import keep_others

    class Arg:
        def __init__(self, name, kwarg_only=False):
            self.name, self.kwarg_only = name, kwarg_only

    made = []

    def make(device):  # (weight, activation) positionally, a scale by keyword
        made.append((torch.zeros(1 << 18, device=device), torch.zeros(1 << 16, device=device)))
        return (list(made[-1]), {"alpha": 2.0})

    keep, rotated_bytes = keep_others([Arg("weight"), Arg("x"), Arg("alpha", kwarg_only=True)], {0})
    from energyframe.workloads.graph import Rotation

    rotation = Rotation(make, lambda state: None, l2_bytes=2 << 20, most=20, keep=keep, rotated_bytes=rotated_bytes)
    states = rotation.make("cpu")
    assert rotated_bytes(states[0]) == 1 << 20  # the weight's MiB; the activation is not counted
    assert rotation.copies == len(states) == 4
    weights = {s[0][0].data_ptr() for s in states}
    activations = {s[0][1].data_ptr() for s in states}
    assert len(weights) == 4 and activations == {made[0][1].data_ptr()}  # one activation, shared
    assert all(s[1] == {"alpha": 2.0} for s in states)
