"""CUDA source kernels swept on a real GPU (``pytest -m gpu``): the seed's SGEMM example with
energy, ncu metrics and plots, and a planted bug caught by the correctness check."""

import json
import math
import shutil
from pathlib import Path

import pytest

import energyframe as ef

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pytest.importorskip("cupy")

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "examples" / "matmul_kernels.cu"
BUG = Path(__file__).parent / "fixtures" / "cuda" / "planted_bug.cu"
FAST = ef.RunSettings(trials=3, min_window_periods=2.5, warmup_s=0.1)
SHAPES = {"a": ("N", "K"), "b": ("K", "M"), "res": ("N", "M")}


def test_sgemm_sweep_with_energy_ncu_and_plots(tmp_path):
    naive = ef.load_kernel(MATMUL, "matmul_naive", block=(16, 16, 1), shapes=SHAPES)
    tiled = ef.load_kernel(MATMUL, "matmul_tiled", block=(16, 16, 1), shapes=SHAPES)
    result = ef.sweep(
        [naive, tiled],
        N=[512, 1024],
        M=[512, 1024],
        K=[1024],
        reference=lambda a, b: a @ b,
        flop="2*N*M*K",
        power=["nvml:gpus=0"],
        profile=shutil.which("ncu") is not None,
        out=tmp_path,
        config=FAST,
        reporters=[],
    )
    assert len(result.results) == 8
    for r in result.results:
        assert r.status == "ok", r.error
        assert r.check["status"] == "passed" and r.check["rel_error"] < 1e-5
        assert r.latency_s > 0 and r.energy_j > 0 and r.trials == 3
        assert r.gflops > 0 and r.gflop_per_j > 0
        if shutil.which("ncu"):
            assert r.ncu["registers_per_thread"] > 0 and 0 < r.ncu["occupancy_pct"] <= 100
            assert r.ncu_duration_s > 0
    for name in (
        "benchmark_results.json",
        "benchmark_report.txt",
        "heatmap.png",
        "time_vs_N.png",
        "speedup.png",
        "energy_vs_latency.png",
        "windows.csv",
        "run.json",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    saved = json.loads((tmp_path / "benchmark_results.json").read_text())
    assert saved["sweep"]["gpu"] and len(saved["benchmarks"]) == 8
    # the tiled kernel is faster than the naive one at every size
    by = {(r.kernel, tuple(r.parameters.values())): r.latency_s for r in result.results}
    for (kernel, point), t in by.items():
        if kernel == "matmul_tiled":
            assert t < by[("matmul_naive", point)]


def test_planted_bug_is_caught_and_half_precision_runs(tmp_path):
    ok = ef.load_kernel(BUG, "add_ok", block=256)
    buggy = ef.load_kernel(BUG, "add_buggy", block=256)
    result = ef.sweep([ok, buggy], n=[1 << 20], power=None, out=tmp_path / "bug", config=FAST, reporters=[])
    by = {r.kernel: r for r in result.results}
    assert by["add_ok"].check["status"] == "unchecked"  # the first kernel is the reference
    assert by["add_buggy"].status == "mismatch"
    assert "not finite" in by["add_buggy"].check["detail"]
    assert math.isnan(by["add_buggy"].check["rel_error"] or math.nan)

    half = ef.load_kernel(BUG, "scale_half", block=256, args={"alpha": 0.5})
    result = ef.sweep(
        half,
        n=[1 << 20],
        reference=lambda x, alpha: alpha * x,
        power=None,
        out=tmp_path / "half",
        config=FAST,
        reporters=[],
    )
    (r,) = result.results
    assert r.status == "ok" and r.check["status"] == "passed" and r.check["rel_error"] < 1e-3


def test_a_failing_configuration_is_recorded_and_the_sweep_goes_on(tmp_path):
    # 2048 threads per block is over every GPU's limit: a launch error, not a lost context
    ok = ef.load_kernel(BUG, "add_ok", block=[(2048, 1, 1), (256, 1, 1)])
    result = ef.sweep(ok, n=[1 << 16], power=None, out=tmp_path, config=FAST, reporters=[])
    bad, good = result.results
    assert bad.status == "error" and "INVALID_VALUE" in bad.error
    assert good.status == "ok" and good.latency_s > 0
