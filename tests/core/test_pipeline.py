"""Pipeline totals: the formulas, and a pipeline measured end to end on the CPU."""

import math

import pytest

import energyframe as ef
from energyframe.workloads.kernels import ElementwiseKernel, MatmulKernel
from energyframe.workloads.pipeline import StageFigures, pipeline_totals

torch = pytest.importorskip("torch")


def test_totals_by_hand():
    stages = [
        StageFigures("a", 1, 0.002, 1.0),
        StageFigures("b", 2, 0.005, 3.0),
        StageFigures("c", 1, 0.001, 0.2),
    ]
    totals = pipeline_totals(stages, idle_power_w=100.0)
    assert totals["sum_latency_s"] == pytest.approx(0.002 + 2 * 0.005 + 0.001)
    assert totals["sum_energy_j"] == pytest.approx(1.0 + 6.0 + 0.2)
    assert totals["dynamic_energy_j"] == pytest.approx(7.2 - 100.0 * 0.013)
    # every stage instance on its own device; each waits for the slowest (5 ms) at 100 W
    waiting = (0.005 - 0.002) + 2 * 0.0 + (0.005 - 0.001)
    assert totals["parallel_energy_j"] == pytest.approx(7.2 + 100.0 * waiting)
    assert totals["parallel_throughput_per_s"] == pytest.approx(200.0)
    assert pipeline_totals([], 100.0) == {}


def test_with_constant_power_parallel_energy_is_power_times_devices_times_slowest(power_csv):
    csv = power_csv(250.0, period_s=0.01, duration_s=2.0)
    pipe = ef.Pipeline(
        "two",
        [
            ("mm", MatmulKernel(M=128, K=128, N=128, dtype="fp32", unroll=4)),
            ("add", ElementwiseKernel(op="add", M=64, N=64, dtype="fp32", unroll=4)),
        ],
    )
    result = ef.run(
        pipe,
        power=[f"replay:file={csv},loop=true"],
        reporters=[],
        settings=ef.RunSettings(trials=2, min_window_s=0.1, idle_s=0.2, warmup_s=0.0),
    )
    totals = result.derived_table("summary").rows[0]
    stages = {r["stage"]: r for r in result.derived_table("stages").rows}
    assert set(stages) == {"mm", "add"}
    t_max = max(r["latency_s"] for r in stages.values())
    assert totals["idle_power_w"] == pytest.approx(250.0, rel=1e-9)
    assert totals["dynamic_energy_j"] == pytest.approx(0.0, abs=1e-9 * totals["sum_energy_j"] + 1e-12)
    assert totals["parallel_energy_j"] == pytest.approx(250.0 * 2 * t_max, rel=1e-6)
    assert totals["sum_energy_j"] == pytest.approx(250.0 * totals["sum_latency_s"], rel=1e-6)
    assert math.isclose(stages["mm"]["share_of_latency_pct"] + stages["add"]["share_of_latency_pct"], 100.0)


def test_summary_and_stage_tables_are_saved_as_csv(tmp_path):
    pipe = ef.Pipeline("p", [("mm", MatmulKernel(M=32, K=32, N=32, dtype="fp32", unroll=2))])
    ef.run(
        pipe, power="none", reporters=[], out=tmp_path / "run", settings=ef.RunSettings(trials=2, min_window_s=0.02)
    )
    header = (tmp_path / "run" / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["pipeline", "stages", "calls"]
    for column in ("sum_latency_s", "sum_energy_j", "dynamic_energy_j", "parallel_energy_j", "idle_power_w"):
        assert column in header
    stages = (tmp_path / "run" / "stages.csv").read_text().splitlines()
    assert stages[0].startswith("stage,count,latency_s,energy_j,power_w,total_latency_s,total_energy_j")
    assert len(stages) == 2


def test_the_csv_reporter_leaves_a_pipelines_summary_csv_alone(tmp_path):
    pipe = ef.Pipeline("p", [("mm", MatmulKernel(M=32, K=32, N=32, dtype="fp32", unroll=2))])
    ef.run(pipe, power="none", reporters=["csv"], out=tmp_path / "run", settings=ef.RunSettings(trials=2, min_window_s=0.02))
    assert (tmp_path / "run" / "summary.csv").read_text().startswith("pipeline,stages,calls")
    phases = (tmp_path / "run" / "phase-summary.csv").read_text().splitlines()
    assert phases[0].startswith("phase,channel,trials,iterations") and phases[1].startswith("mm,")


def test_pipeline_run_defaults_apply_unless_the_user_says_otherwise():
    pipe = ef.Pipeline("p", [("mm", MatmulKernel(M=8, K=8, N=8, dtype="fp32", unroll=2))])
    resolved = ef.RunSettings(trials=4).resolve(pipe.run_defaults())
    assert resolved.trials == 4  # the user's
    assert resolved.min_window_periods == 2.0 and resolved.idle_s == 1.0  # the pipeline's
