"""Collectives in traces (the communication tier), their replay, and the report's communication
share: a GPU-shaped trace of one rank, the report math by hand, the replay's refusals, and (slow)
per-rank traces of vicuna-7b at tp=2 under torchrun, replayed on gloo under torchrun."""

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from energyframe.errors import UsageError
from energyframe.replay import kineto
from energyframe.replay.comm import unique_collectives
from energyframe.replay.rebuild import RebuildError
from energyframe.replay.report import OpFigures, prediction

LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
NCCL = "ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@pytest.fixture
def one_process(monkeypatch):
    for name in LAUNCHER:
        monkeypatch.delenv(name, raising=False)


def cpu_op(name, ts, dur, ext, dims=(), types=(), tid=1, **args):
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {
            "External id": ext,
            "Input Dims": list(dims),
            "Input type": list(types),
            "Input Strides": [],
            "Concrete Inputs": [""] * len(types),
            **args,
        },
    }


def kernel(name, ts, dur, ext, stream=7):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"External id": ext, "correlation": ext + 1000, "grid": [1, 1, 1], "block": [1, 1, 1]},
    }


def rank_trace(path, steps=2):
    """One rank's iteration as a row-parallel linear layer runs it under DTensor on NCCL: a GEMM,
    then the functional all-reduce (a clone, then c10d::allreduce_, which holds the
    record_param_comms event that launches NCCL's kernel), its wait, and a host barrier."""
    h = [1, 5, 4096]
    events = []
    for step in range(steps):
        base, e = 1000.0 + 1000 * step, 100 * step
        events += [
            {"ph": "X", "cat": "user_annotation", "name": "energyframe.step", "pid": 1, "tid": 1}
            | {"ts": base, "dur": 900},
            cpu_op("aten::mm", base + 10, 50, e + 1, [[5, 2048], [2048, 4096]], ["c10::Half"] * 2),
            cpu_op(
                "_c10d_functional::all_reduce", base + 100, 300, e + 2, [h, [], []], ["c10::Half", "", ""]
            ),
            cpu_op("aten::clone", base + 110, 40, e + 3, [h, []], ["c10::Half", ""]),
            cpu_op("c10d::allreduce_", base + 200, 150, e + 4, [[h], [], [], [], [], []], ["TensorList"]),
            cpu_op(
                "record_param_comms",
                base + 210,
                120,
                e + 5,
                **{"Collective name": "allreduce", "dtype": "Half", "Group size": 2, "In msg nelems": 20480},
            ),
            cpu_op("aten::add_", base + 220, 20, e + 6, [h, h, []], ["c10::Half", "c10::Half", "Scalar"]),
            cpu_op("_c10d_functional::wait_tensor", base + 420, 10, e + 7, [h], ["c10::Half"]),
            cpu_op("c10d::barrier", base + 600, 100, e + 8, [[1], [], [], [], []], ["unsigned char"]),
            kernel("sm90_xmma_gemm_f16f16_f32_tn", base + 60, 100, e + 1),
            kernel("elementwise_kernel<copy>", base + 170, 10, e + 3),
            kernel("vectorized_elementwise_kernel<add>", base + 240, 5, e + 6),
            kernel(NCCL, base + 250, 40, e + 5, stream=20),
        ]
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return path


def test_nccl_kernels_are_the_communication_tier():
    assert kineto.tier(NCCL) == kineto.TIER_COMM == "communication"
    assert kineto.tier("ncclKernel_AllGather_RING_LL_Sum_int8_t") == "communication"
    assert kineto.tier("sm90_xmma_gemm_f16f16_f32_tn") == "gemm"


def test_a_collective_is_found_with_its_size_type_count_and_kernel_time(tmp_path):
    trace = kineto.parse(rank_trace(tmp_path / "t.json.gz"))
    records = unique_collectives(trace, "float32", world_size=2)
    assert [(r["kind"], r["replayed"]) for r in records] == [("all_reduce", True), ("barrier", False)]
    ar = records[0]
    assert ar["name"] == "c10d::allreduce_" and ar["shapes"] == [[1, 5, 4096]]
    assert ar["dtype"] == "float16" and ar["group_size"] == 2  # from record_param_comms
    assert ar["numel"] == 20480 and ar["bytes"] == 2 * 20480
    assert ar["count"] == 2 and ar["count_per_iteration"] == 1.0
    # the kernels launched inside it: NCCL's and the backend's own add (2 steps of 40 + 5 us)
    assert ar["gpu_time_us"] == 90.0 and ar["kernel_names"] == sorted(
        [NCCL, "vectorized_elementwise_kernel<add>"]
    )
    # the clone around the collective is the model's work; the add_ inside it is the backend's
    leaves = sorted({op.name for op in kineto.leaf_ops(trace)})
    assert leaves == ["aten::clone", "aten::mm"]


def test_summarize_writes_the_collectives_and_their_tier(tmp_path):
    trace = kineto.parse(rank_trace(tmp_path / "t.json.gz"))
    meta = kineto.summarize(trace, tmp_path / "out", {"workload": "x", "rank": 1, "world_size": 2})
    assert meta["gpu_time_by_tier_us"]["communication"] == 80.0
    assert meta["collectives"] == {
        "unique": 1,
        "calls_per_iteration": 1.0,
        "gpu_time_us": 90.0,
        "by_kind": {"all_reduce": 1.0},
        "barriers_per_iteration": 1.0,
    }
    lines = (tmp_path / "out" / "collectives.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["all_reduce", "barrier"]
    kernels = kineto.read_jsonl(tmp_path / "out" / "kernels.jsonl")
    assert {k["name"]: k["tier"] for k in kernels}[NCCL] == "communication"


def test_the_type_comes_from_the_functional_wrapper_without_record_param_comms(tmp_path):
    events = [
        cpu_op("_c10d_functional::all_reduce", 100, 300, 2, [[4, 8], [], []], ["float", "", ""]),
        cpu_op("c10d::allreduce_", 200, 150, 4, [[[4, 8]], [], [], [], [], []], ["TensorList"]),
    ]
    path = tmp_path / "gloo.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (record,) = unique_collectives(kineto.parse(path), "float16", world_size=4)
    assert (record["dtype"], record["group_size"], record["gpu_time_us"]) == ("float32", 4, 0)


def test_report_adds_the_communication_tier_by_hand():
    ops = [
        OpFigures(
            {"count_per_iteration": 2.0, "gpu_time_us": 400.0, "gpu_time_by_tier_us": {"gemm": 400.0}},
            "a",
            100e-6,
            0.05,
        )
    ]
    collectives = [
        OpFigures(
            {
                "kind": "all_reduce",
                "count_per_iteration": 4.0,
                "count": 8,
                "gpu_time_us": 160.0,
                "dtype": "float16",
            },
            "comm",
            25e-6,
            0.004,
        )
    ]
    meta = {
        "iterations": 2,
        "gpu_time_us": 560.0,
        "gpu_time_by_tier_us": {"gemm": 400.0, "communication": 160.0},
        "rank": 1,
        "world_size": 2,
    }
    report = prediction(ops, [], meta, 400e-6, 0.2, 100.0, [], collectives=collectives)
    # 2 x 100 us of GEMM + 4 x 25 us of all-reduce
    assert report["predicted_from_kernels_us"] == pytest.approx(300)
    assert report["predicted_energy_j"] == pytest.approx(2 * 0.05 + 4 * 0.004)
    comm = report["communication"]
    assert comm["predicted_us"] == pytest.approx(100) and comm["calls_per_iteration"] == 4
    assert comm["share_of_predicted_percent"] == pytest.approx(100 * 100 / 300)
    assert comm["energy_share_of_predicted_percent"] == pytest.approx(100 * 0.016 / 0.116)
    assert comm["traced_us"] == pytest.approx(80) and comm[
        "traced_share_percent_of_gpu_time"
    ] == pytest.approx(100 * 160 / 560)
    assert comm["collectives"][0]["traced_us_per_call"] == pytest.approx(20)
    assert report["tier_breakdown"]["communication"]["predicted_us"] == pytest.approx(100)
    assert report["tier_breakdown"]["communication"]["traced_us"] == pytest.approx(80)
    assert report["coverage_percent_of_gpu_time"] == pytest.approx(100.0)
    assert (report["rank"], report["world_size"]) == (1, 2)


def write_trace_dir(folder: Path, collectives=True) -> Path:
    folder.mkdir(parents=True)
    op = {"name": "aten::mm", "input_dims": [[2, 2], [2, 2]], "input_types": ["float", "float"]}
    op.update(concrete_inputs=["", ""], key="k", count=2, count_per_iteration=1.0, gpu_time_us=0.0)
    (folder / "ops.jsonl").write_text(json.dumps(op) + "\n")
    (folder / "trace_meta.json").write_text(json.dumps({"workload": None, "iterations": 2, "world_size": 2}))
    if collectives:
        record = {"name": "c10d::allreduce_", "kind": "all_reduce", "shapes": [[2, 2]], "dtype": "float32"}
        record.update(group_size=2, key="c", count=4, count_per_iteration=2.0, gpu_time_us=0.0, replayed=True)
        (folder / "collectives.jsonl").write_text(json.dumps(record) + "\n")
    return folder


def test_a_trace_with_collectives_needs_its_ranks(tmp_path, one_process):
    import energyframe as ef

    trace = write_trace_dir(tmp_path / "t")
    with pytest.raises(UsageError) as e:
        ef.run(f"replay:trace={trace}", power="none", reporters=[])
    assert str(e.value) == (
        f"{trace} holds 2 collective calls per iteration (all_reduce) over 2 ranks, but WORLD_SIZE is not "
        "set: replay it under torchrun --nproc-per-node 2, one process per rank, or with comm=false "
        "(and full=none) to replay its compute ops alone"
    )
    result = ef.run(
        f"replay:trace={trace},comm=false,full=none,unroll=2",
        power="none",
        reporters=[],
        settings=ef.RunSettings(trials=1, min_window_s=0.01),
    )
    assert [s.phase for s in result.summaries] == ["000 mm 2x2 2x2"]
    assert result.derived_table("comparison").rows[0]["replayed_collectives"] == 0


def test_per_rank_trace_directories_need_as_many_ranks(tmp_path, one_process, monkeypatch):
    import energyframe as ef

    for rank in range(2):
        write_trace_dir(tmp_path / "t" / f"rank{rank}")
    with pytest.raises(UsageError) as e:
        ef.run(f"replay:trace={tmp_path / 't'}", power="none", reporters=[])
    assert str(e.value) == (
        f"{tmp_path / 't'} holds one trace per rank (2 ranks): replay them under torchrun --nproc-per-node 2, "
        f"one process per rank, or one rank's alone with trace={tmp_path / 't' / 'rank0'}"
    )
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(UsageError, match="holds traces of 2 ranks, but WORLD_SIZE is 4"):
        ef.run(f"replay:trace={tmp_path / 't'}", power="none", reporters=[])


@pytest.mark.parametrize(
    "record,message",
    [
        (
            {"name": "c10d::send", "kind": "send", "group_size": 2, "shapes": [[4]]},
            r"c10d::send \(send\) is not replayed",
        ),
        (
            {"name": "c10d::allreduce_", "kind": "all_reduce", "group_size": 4, "shapes": [[4]]},
            "ran over 4 ranks and this replay has 2: collectives over a subgroup are not replayed",
        ),
        (
            {
                "name": "c10d::_reduce_scatter_base_",
                "kind": "reduce_scatter_tensor",
                "group_size": 2,
                "shapes": [[3, 4]],
            },
            r"the first dimension does not split over 2 ranks",
        ),
    ],
)
def test_collectives_that_cannot_be_replayed_say_why(record, message):
    from energyframe.replay.collectives import rebuild_collective

    with pytest.raises(RebuildError, match=message):
        rebuild_collective(record, 2)


# -- two real ranks on the CPU, under torchrun -------------------------------------------------

TINY_TP2 = "vicuna-7b:tp=2,hidden=64,layers=2,heads=4,vocab=128,seq_len=7,window_s=0.05"


def torchrun(*args, timeout=900):
    """Two processes under torchrun (its module form: no script needs to be on PATH)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def tp2_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp2") / "trace"
    torchrun(
        "-m",
        "energyframe",
        "trace",
        "--workload",
        TINY_TP2,
        "--out",
        str(out),
        "--steps",
        "2",
        "--warmup",
        "1",
    )
    return out


@pytest.mark.slow
def test_trace_under_torchrun_writes_one_trace_per_rank(tp2_trace):
    assert sorted(p.name for p in tp2_trace.iterdir()) == ["rank0", "rank1"]
    for rank in (0, 1):
        folder = tp2_trace / f"rank{rank}"
        meta = json.loads((folder / "trace_meta.json").read_text())
        assert (meta["rank"], meta["world_size"], meta["iterations"]) == (rank, 2, 2)
        # no extra step under a dispatch mode across ranks: their replays rotate every input
        assert not (folder / "memory_inputs.json").exists()
        records = kineto.read_jsonl(folder / "collectives.jsonl")
        (ar,) = [r for r in records if r["kind"] == "all_reduce"]
        # two all-reduces per layer per forward: after attention and after the MLP; 2 layers
        assert ar["count_per_iteration"] == 2 * 2 and ar["shapes"] == [[1, 7, 64]]
        assert ar["dtype"] == "float32" and ar["group_size"] == 2 and ar["replayed"]
        assert meta["collectives"]["by_kind"] == {"all_reduce": 4.0}
        # the barrier that aligns the ranks at each step is counted, not replayed
        assert meta["collectives"]["barriers_per_iteration"] == 1.0
        ops = {r["name"] for r in kineto.read_jsonl(folder / "ops.jsonl")}
        assert "aten::mm" in ops and not any(name.startswith("c10d") for name in ops)


@pytest.mark.slow
def test_replay_of_a_rank_trace_runs_its_collectives_on_gloo(tp2_trace, tmp_path):
    import pandas as pd

    runs = tmp_path / "runs"
    # every rank replays its own trace; rank 0 writes the one run directory, each rank's report
    # in rank<R>/
    torchrun(
        "-m", "energyframe", "run", "--power", "none", "--trials", "2", "--min-window", "0.02",
        "--warmup", "0", "--workload", f"replay:trace={tp2_trace},unroll=2,limit=3,window_s=0.05",
        "--out", str(runs),
    )
    run = json.loads((runs / "run.json").read_text())
    assert run["status"] == "complete" and run["distributed"]["world_size"] == 2
    for rank in (0, 1):
        report = json.loads((runs / f"rank{rank}" / "comparison_report.json").read_text())
        assert (report["rank"], report["world_size"]) == (rank, 2)
        comm = report["communication"]
        (ar,) = comm["collectives"]
        assert ar["kind"] == "all_reduce" and ar["count"] == 4 and ar["latency_us"] > 0
        assert comm["predicted_us"] == pytest.approx(4 * ar["latency_us"])
        assert 0 < comm["share_of_predicted_percent"] < 100
        assert report["tier_breakdown"]["communication"]["unique_ops"] == 1
        assert report["full_model_inference_us"] > 0  # vicuna-7b at tp=2, both ranks together
        assert math.isfinite(report["predicted_from_kernels_us"])
        assert run["distributed"]["ranks"][rank]["workload_info"]["rank"] == rank
    phases = [p["phase"] for p in run["phases"]]
    assert phases[:2] == ["(full model)", "comm 00 all_reduce float32 1x7x64"]
    # each rank's comparison table, joined with a rank column
    comparison = pd.read_csv(runs / "comparison.csv")
    assert list(comparison["rank"]) == [0, 1]
    # a phase over both ranks ran the same steps on each, window by window
    w = pd.read_csv(runs / "windows.csv")
    both = w[w["phase"].isin(phases[:2])]
    assert sorted(set(both["rank"])) == [0, 1]
    assert (both.groupby(["phase", "trial"])["iterations"].nunique() == 1).all()


@pytest.mark.slow
def test_ranks_whose_traces_order_their_ops_differently_replay_the_same_ops(tp2_trace, tmp_path):
    """Each rank's trace times its ops on its own GPU, so ordering by time differs from rank to
    rank (seen on two H100s: rank 0's tenth op was a cat, rank 1's a mul): the ranks agree one
    order, and an op that only one rank traced is named, not replayed."""
    import shutil

    trace = tmp_path / "trace"
    shutil.copytree(tp2_trace, trace)
    ops = trace / "rank1" / "ops.jsonl"
    records = kineto.read_jsonl(ops)
    times = [r.get("gpu_time_us", 0.0) for r in records]
    for record, time_us in zip(records, reversed(times)):  # rank 1 ranks its ops the other way round
        record["gpu_time_us"] = time_us
    only_here = dict(records[0], name="aten::only_on_rank1", gpu_time_us=10 * max(times))
    ops.write_text("".join(json.dumps(r) + "\n" for r in [*records, only_here]))
    runs = tmp_path / "runs"
    torchrun(
        "-m", "energyframe", "run", "--power", "none", "--trials", "1", "--min-window", "0.02",
        "--warmup", "0", "--workload", f"replay:trace={trace},unroll=2,limit=3,window_s=0.05,full=none",
        "--out", str(runs),
    )
    run = json.loads((runs / "run.json").read_text())
    assert run["status"] == "complete"
    ops_measured = [p["phase"] for p in run["phases"] if not p["phase"].startswith("comm")]
    assert len(ops_measured) == 3
    report = json.loads((runs / "rank1" / "comparison_report.json").read_text())
    (skipped,) = [r for r in report["not_rebuilt"] if r["op"] == "aten::only_on_rank1"]
    assert skipped["reason"] == "not traced on every rank"
