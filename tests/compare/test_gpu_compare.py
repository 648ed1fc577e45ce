"""``compare`` and ``report`` on real NVML runs (``pytest -m gpu`` on a GPU machine): two runs
of one GEMM on one GPU compare without device warnings, a 4x larger GEMM is found to cost more,
and the report shows the GPU, its clocks' windows and the NVML channels."""

import json

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.compare import tables as compare_report
from energyframe.report.html import build_report
from energyframe.results import rundir

pytestmark = pytest.mark.gpu

pytest.importorskip("torch")
CONFIG = ef.RunSettings(trials=5)
SMALL = "matmul:M=4096,K=4096,N=4096,dtype=fp16"
LARGE = "matmul:M=8192,K=4096,N=8192,dtype=fp16"  # four times the work


@pytest.fixture(scope="module")
def gpu_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu-compare")
    out = {}
    for name, spec in (("a", SMALL), ("b", SMALL), ("large", LARGE)):
        ef.run(spec, power=["nvml"], reporters=[], out=root / name, settings=CONFIG)
        out[name] = root / name
    return out


def test_same_gemm_twice_on_one_gpu(gpu_runs):
    result = CliRunner().invoke(main, ["compare", str(gpu_runs["a"]), str(gpu_runs["b"]), "--table", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert not [w for w in data["warnings"] if w.startswith(("different GPU", "SM clocks", "throttled"))]
    energy = [r for r in data["rows"] if r["figure"] == "energy" and r["run"] == "b"]
    assert energy and energy[0]["channel"] == "gpu0" and energy[0]["n"] == 5
    assert abs(energy[0]["change_pct"]) < 5  # one GEMM, one GPU, minutes apart


def test_four_times_the_work_costs_significantly_more(gpu_runs):
    runs = [rundir.load(gpu_runs["a"]), rundir.load(gpu_runs["large"])]
    comparison = compare_report.compare_runs(runs)
    energy = [r for r in comparison.rows if r.figure == "energy" and r.channel == "gpu0"][0]
    change = energy.changes[1]
    assert change.significant and change.ratio > 2.5
    assert change.verdict.startswith(f"{change.ratio:.2f}× more energy, significant")
    assert any("workload options differ" in w for w in comparison.warnings)


def test_report_of_an_nvml_run(gpu_runs):
    pytest.importorskip("plotly", reason="the report extra (pip install 'energyframe[report]')")
    run = rundir.load(gpu_runs["a"])
    page = build_report([run])
    gpu = run.result.meta["sources"][0]["info"]["gpus"][0]
    assert gpu["name"] in page and f"{gpu['power_limit_w']:g} W" in page
    assert "gpu0.power_samples" in page and "sm_clock_mhz" in page
