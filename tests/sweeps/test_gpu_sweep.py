"""CUDA source kernels swept on a real GPU (``pytest -m gpu``): the seed's SGEMM example with
energy, ncu metrics and plots, a planted bug caught by the correctness check, a race caught by
the determinism check, and ``--devices`` over every GPU of the machine."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import energyframe as ef

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pytest.importorskip("cupy")

ROOT = Path(__file__).resolve().parents[2]
MATMUL = ROOT / "examples" / "matmul_kernels.cu"
BUG = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "planted_bug.cu"
SAXPY = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "saxpy.cu"
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
        settings=FAST,
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
    result = ef.sweep([ok, buggy], n=[1 << 20], power="none", out=tmp_path / "bug", settings=FAST, reporters=[])
    by = {r.kernel: r for r in result.results}
    # the first kernel is the reference of the others; it is checked for determinism itself
    # (deliberately changed: it was "unchecked")
    assert by["add_ok"].check["status"] == "deterministic" and by["add_ok"].status == "ok"
    assert by["add_ok"].block == (256, 1, 1)
    assert by["add_buggy"].status == "mismatch"
    assert "not finite" in by["add_buggy"].check["detail"]
    assert math.isnan(by["add_buggy"].check["rel_error"] or math.nan)

    half = ef.load_kernel(BUG, "scale_half", block=256, args={"alpha": 0.5})
    result = ef.sweep(
        half,
        n=[1 << 20],
        reference=lambda x, alpha: alpha * x,
        power="none",
        out=tmp_path / "half",
        settings=FAST,
        reporters=[],
    )
    (r,) = result.results
    assert r.status == "ok" and r.check["status"] == "passed" and r.check["rel_error"] < 1e-3


def test_a_failing_configuration_is_recorded_and_the_sweep_goes_on(tmp_path):
    # 1 MiB of dynamic shared memory per block is over every GPU's limit: a launch error, not a
    # lost context (a block of 2048 threads, used here before, is refused when the kernel loads)
    ok = ef.load_kernel(BUG, "add_ok", block=256, shared_mem=lambda n: (1 << 20) if n == 1 << 16 else 0)
    result = ef.sweep(ok, n=[1 << 16, 1 << 17], power="none", out=tmp_path, settings=FAST, reporters=[])
    by_n = {r.parameters["n"]: r for r in result.results}
    bad, good = by_n[1 << 16], by_n[1 << 17]
    assert bad.status == "error" and "INVALID_VALUE" in bad.error
    assert good.status == "ok" and good.latency_s > 0


def test_determinism_is_checked_when_there_is_nothing_to_compare_against(tmp_path):
    saxpy = ef.load_kernel(SAXPY, "saxpy", inouts=["y"], args={"a": 2.0})
    result = ef.sweep(saxpy, n=[1 << 22], power="none", out=tmp_path / "saxpy", settings=FAST, reporters=[])
    (r,) = result.results
    assert r.block == (256, 1, 1) and r.warnings == ()  # the default block of a 1-D output
    assert r.status == "ok" and r.check["status"] == "deterministic", r.check
    assert r.check["detail"] == "two launches on fresh copies of the inputs agree bit for bit"
    checked = ef.sweep(
        saxpy,
        n=[1 << 22],
        reference=lambda x, y, a: a * x + y,  # y as it was before the launch
        power="none",
        out=tmp_path / "reference",
        settings=FAST,
        reporters=[],
    )
    assert checked.results[0].check["status"] == "passed", checked.results[0].check

    # a 16x16 block on a 1-D output: warned; the lost updates of a racy sum differ per launch
    wide = ef.load_kernel(SAXPY, "saxpy", block=(16, 16), inouts=["y"], args={"a": 2.0})
    (r,) = ef.sweep(wide, n=[1 << 22], power="none", out=tmp_path / "wide", settings=FAST, reporters=[]).results
    assert r.warnings and "has 16 threads along y" in r.warnings[0]
    report = (tmp_path / "wide" / "benchmark_report.txt").read_text()
    assert "WARNING: saxpy: block 16x16x1 has 16 threads along y" in report
    racy = ef.load_kernel(SAXPY, "sum_racy", inouts=["out"], shapes={"out": 1}, grid="cdiv(n, bx)")
    (r,) = ef.sweep(racy, n=[1 << 22], power="none", out=tmp_path / "racy", settings=FAST, reporters=[]).results
    assert r.check["status"] == "nondeterministic" and r.status == "mismatch", r.check
    assert "NONDETERMINISTIC" in (tmp_path / "racy" / "benchmark_report.txt").read_text()
    # without --inout its poisoned output stays NaN: nothing is claimed, the fix is named
    blind = ef.load_kernel(SAXPY, "saxpy", args={"a": 2.0})
    (r,) = ef.sweep(blind, n=[1 << 16], power="none", out=tmp_path / "blind", settings=FAST, reporters=[]).results
    assert r.check["status"] == "unchecked" and "--inout y" in r.check["detail"]


def test_devices_runs_one_shard_per_gpu_and_merges_them(tmp_path):
    """``--devices 0`` on one GPU, ``--devices 0,1,...`` on all of them when there are more."""
    count = torch.cuda.device_count()
    devices = ",".join(str(i) for i in range(count))
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "energyframe", "sweep", str(BUG), "-k", "add_ok", "-k", "add_buggy"]
    cmd += ["-p", f"n={1 << 16},{1 << 18},{1 << 20},{1 << 22}", "--power", "nvml", "--trials", "3"]
    cmd += ["--devices", devices, "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr
    assert f"[GPU {count - 1}]" in done.stderr  # the children's progress, prefixed
    merged = json.loads((out / "benchmark_results.json").read_text())
    assert merged["format_version"] == 2
    labels = [str(i) for i in range(count)]
    assert sorted(merged["sweep"]["devices"]) == labels
    for label, info in merged["sweep"]["devices"].items():
        assert info["cuda_visible_devices"] == label and info["name"] and info["uuid"].startswith("GPU-")
        assert info["power_limit_w"] > 0
    runs = merged["benchmarks"]
    assert len(runs) == 8
    for r in runs:
        assert r["status"] == ("mismatch" if r["kernel"] == "add_buggy" else "ok"), r["error"]
        assert r["device"] == str(r["point_index"] % count)  # shard i ran on GPU i
        assert r["energy_j"] > 0 and r["trials"] == 3
    report = (out / "benchmark_report.txt").read_text()
    for label in labels:
        assert f"GPU {label}: " in report
    for i in range(count):
        assert (out / "shards" / str(i) / "run.json").exists() and (out / "shards" / f"{i}.log").exists()
