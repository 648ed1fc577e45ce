"""Kernel sweeps without a GPU: signatures, the parameter space, launches, checks, ncu output,
reports, plots, shards and the CLI. Saved results are a real sweep's (H100, 2026-11-22)."""

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import StoreError, UsageError, WorkloadError
from energyframe.store import write_json
from energyframe.sweeps import ncu
from energyframe.sweeps.check import MISMATCH, PASSED, compare, poison, reference_outputs
from energyframe.sweeps.results import SweepResult, merge
from energyframe.sweeps.runtime import compile_ptx, parse_resource_usage, resource_usage
from energyframe.sweeps.signature import parse_signature
from energyframe.sweeps.space import evaluate, expand, in_shard, parse_shard, parse_values
from energyframe.sweeps.workload import plan

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "examples" / "matmul_kernels.cu"
BUG = Path(__file__).parent / "fixtures" / "cuda" / "planted_bug.cu"
FIXTURES = Path(__file__).parent / "fixtures"
SHAPES = {"a": ("N", "K"), "b": ("K", "M"), "res": ("N", "M")}

SOURCE = r"""
#include <cuda_fp16.h>
/* __global__ void commented_out(int x) {} */
template <typename T>
__global__ void generic(T *x, int n) {}
extern "C" __global__ void __launch_bounds__(256, 2)
scale(const __half *__restrict__ x, __nv_bfloat16 *y,   // comment
      size_t n, float alpha, const double * const z) {}
__global__ void holder(struct Foo f) {}
__global__ void no_args() {}
"""


# -- signatures ------------------------------------------------------------------------------
def test_signature_reads_qualifiers_pointers_and_types():
    sig = parse_signature(SOURCE, "scale")
    assert [(p.name, p.ctype, p.pointer, p.const) for p in sig.params] == [
        ("x", "__half", True, True),
        ("y", "__nv_bfloat16", True, False),
        ("n", "size_t", False, False),
        ("alpha", "float", False, False),
        ("z", "double", True, True),
    ]
    assert [p.torch_dtype for p in sig.params] == ["float16", "bfloat16", "int64", "float32", "float64"]
    assert [p.name for p in sig.outputs] == ["y"]
    assert parse_signature(SOURCE, "no_args").params == ()
    naive = parse_signature(MATMUL.read_text(), "matmul_naive")
    assert str(naive) == "matmul_naive(const float *a, const float *b, float *res, int N, int M, int K)"


def test_templates_unknown_types_and_missing_kernels_are_refused_clearly():
    with pytest.raises(UsageError, match="'generic' is a template.*wrapper"):
        parse_signature(SOURCE, "generic")
    with pytest.raises(UsageError, match="type 'Foo'.*cannot allocate"):
        parse_signature(SOURCE, "holder")
    with pytest.raises(UsageError, match="no __global__ kernel 'commented_out'.*found: generic, holder"):
        parse_signature(SOURCE, "commented_out")


# -- the parameter space ---------------------------------------------------------------------
def test_expressions_are_arithmetic_only():
    assert evaluate("cdiv(M, bx), cdiv(N, by), 1", {"M": 100, "N": 33, "bx": 16, "by": 16}) == (7, 3, 1)
    assert evaluate("N == M and 512 <= K < 4096", {"N": 1, "M": 1, "K": 512}) is True
    assert evaluate("not N > 2", {"N": 3}) is False
    with pytest.raises(UsageError, match="not allowed"):
        evaluate("__import__('os').system('true')", {})
    with pytest.raises(UsageError, match="unknown name 'Q'"):
        evaluate("Q + 1", {"N": 1})


def test_expansion_is_a_stable_product_with_constraints_and_shards():
    assert parse_values("N=512..4096") == ("N", [512, 1024, 2048, 4096])
    assert parse_values("alpha=0.5,2") == ("alpha", [0.5, 2])
    points = expand({"N": [1, 2, 3], "M": [10, 20]}, lambda p: p["N"] != 2)
    assert points == [{"N": 1, "M": 10}, {"N": 1, "M": 20}, {"N": 3, "M": 10}, {"N": 3, "M": 20}]
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "x/2", "2"):
        with pytest.raises(UsageError):
            parse_shard(bad)
    shards = [[i for i in range(10) if in_shard(i, (s, 3))] for s in range(3)]
    assert sorted(sum(shards, [])) == list(range(10)) and shards[1] == [1, 4, 7]


def test_plan_keeps_a_points_kernels_together_and_computes_launches():
    naive = ef.load_kernel(MATMUL, "matmul_naive", shapes=SHAPES)
    tiled = ef.load_kernel(MATMUL, "matmul_tiled", shapes=SHAPES, block=[(16, 16, 1), (32, 8, 1)])
    points = expand({"N": [512, 1000], "M": [256], "K": [64]})
    configs = plan([naive, tiled], points, shard=(1, 2))
    assert [c.index for c in configs] == [3, 4, 5]  # point 1 only, every kernel and block
    launch = configs[0].launch
    assert launch.shapes == {"a": (1000, 64), "b": (64, 256), "res": (1000, 256)}
    assert launch.grid == (16, 63, 1)  # one thread per output element: x over M, y over N
    assert configs[2].launch.grid == (8, 125, 1) and configs[2].block == (32, 8, 1)
    assert launch.scalars == {"N": 1000, "M": 256, "K": 64}


def test_default_shapes_grids_and_clear_errors():
    add = ef.load_kernel(BUG, "add_ok", block=256)
    launch = add.configure({"n": 1000}, (256, 1, 1))
    assert launch.shapes == {"x": (1000,), "y": (1000,), "out": (1000,)} and launch.grid == (4, 1, 1)
    naive = ef.load_kernel(MATMUL, "matmul_naive")  # flat: the largest product of two sizes
    assert naive.configure({"N": 4, "M": 8, "K": 2}, (16, 16, 1)).shapes["a"] == (32,)
    custom = ef.load_kernel(MATMUL, "matmul_naive", grid=lambda N, M, block: (M // block[0], N // block[1]))
    assert custom.configure({"N": 64, "M": 32, "K": 8}, (16, 16, 1)).grid == (2, 4, 1)
    with pytest.raises(UsageError, match="scalar parameter 'K' has no value"):
        naive.configure({"N": 4, "M": 8}, (16, 16, 1))
    scale = ef.load_kernel(BUG, "scale_half", args={"alpha": 2.0})
    assert scale.configure({"n": 10}, (32, 1, 1)).scalars == {"alpha": 2.0, "n": 10}
    with pytest.raises(UsageError, match="outputs \\['q'\\]"):
        ef.load_kernel(BUG, "add_ok", outputs=["q"])
    with pytest.raises(UsageError, match="up to three positive integers"):
        ef.load_kernel(BUG, "add_ok", block=(0, 1))


def test_a_configuration_that_cannot_be_configured_carries_its_error():
    naive = ef.load_kernel(MATMUL, "matmul_naive", grid="cdiv(M, bx), cdiv(Q, by)")
    (config,) = plan([naive], [{"N": 4, "M": 4, "K": 4}])
    assert config.status == "error" and "unknown name 'Q'" in config.error


# -- checking outputs (torch on the CPU) ----------------------------------------------------------
def test_check_compares_with_the_reference_and_catches_unwritten_elements():
    torch = pytest.importorskip("torch")
    kernel = ef.load_kernel(MATMUL, "matmul_naive", shapes=SHAPES)
    a, b = torch.randn(8, 4), torch.randn(4, 6)
    tensors = {"a": a, "b": b, "res": torch.empty(8, 6)}
    poison(kernel, tensors)
    assert tensors["res"].isnan().all()
    expected = reference_outputs(kernel, lambda a, b: a @ b, tensors, {"N": 8, "M": 6, "K": 4}, {})
    assert expected["res"].dtype == torch.float64  # the reference saw float64 inputs
    tensors["res"] = a @ b
    good = compare(kernel, tensors, expected, "reference")
    assert good.status == PASSED and good.rel_error < 1e-6 and good.tolerance == 1e-4
    tensors["res"][0, 0] += 1.0
    assert compare(kernel, tensors, expected, "reference").status == MISMATCH
    tensors["res"][0, 0] = math.nan
    unwritten = compare(kernel, tensors, expected, "reference")
    assert unwritten.status == MISMATCH and "1 elements not finite" in unwritten.detail
    with pytest.raises(UsageError, match="returned 2 tensors"):
        reference_outputs(kernel, lambda a, b: (a, b), tensors, {}, {})


# -- ahead-of-time compilation (nvcc, where installed) --------------------------------------------
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_nvcc_compiles_the_example_to_ptx_and_reports_resources():
    ptx = compile_ptx(MATMUL, arch="compute_80")
    assert ".visible .entry _Z12matmul_naive" in ptx and ".entry _Z12matmul_tiled" in ptx
    usage = resource_usage(MATMUL, arch="sm_80")
    assert set(usage) == {"matmul_naive", "matmul_tiled"}
    assert usage["matmul_tiled"]["shared_bytes"] == 2 * 16 * 16 * 4 and usage["matmul_naive"]["registers"] > 0


def test_ptxas_resource_lines_are_parsed():
    text = """ptxas info    : Compiling entry function '_Z12matmul_tiledPKfS0_Pfiii' for 'sm_90'
ptxas info    : Function properties for _Z12matmul_tiledPKfS0_Pfiii
    0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compiling entry function 'add_ok' for 'sm_90'
ptxas info    : Used 10 registers"""
    assert parse_resource_usage(text) == {
        "matmul_tiled": {"registers": 40, "shared_bytes": 2048, "spill_bytes": 12},
        "add_ok": {"registers": 10, "shared_bytes": 0, "spill_bytes": 0},
    }


# -- ncu ------------------------------------------------------------------------------------------
def test_recorded_ncu_csv_is_parsed_per_launch_in_order():
    # recorded on an H100 (ncu 2025.3.1, 2026-11-22) with our metric list: naive, tiled at 512, 1024
    rows = ncu.parse_csv((FIXTURES / "ncu" / "matmul-h100.csv").read_text())
    assert [r["kernel"].split("(")[0] for r in rows] == ["matmul_naive", "matmul_tiled"] * 2
    tiled_1024 = rows[3]
    assert tiled_1024["ncu_duration_s"] == pytest.approx(278_592e-9)  # "278,592" ns
    assert tiled_1024["registers_per_thread"] == 32
    assert tiled_1024["compute_throughput_pct"] == pytest.approx(69.36)
    assert tiled_1024["grid"] == "(64, 64, 1)"
    assert all(0 < r["occupancy_pct"] <= 100 for r in rows)


def test_ncu_missing_or_refused_is_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ncu.NcuUnavailable, match="not on PATH"):
        ncu.profile([{"kernel": "k"}])
    fake = tmp_path / "ncu"
    fake.write_text(
        "#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission'\nexit 1\n"
    )
    fake.chmod(0o755)
    with pytest.raises(ncu.NcuUnavailable, match="no permission.*NVreg_RestrictProfilingToAdminUsers"):
        ncu.profile([{"kernel": "k"}])
    cmd = ncu.command(Path("x.json"), ["matmul_naive", "matmul_tiled", "matmul_naive"])
    assert "--clock-control" in cmd and cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:^(matmul_naive|matmul_tiled)$"


# -- results, reports, plots, shards ----------------------------------------------------------
@pytest.fixture
def saved():
    return SweepResult.load(FIXTURES / "sweep" / "h100-sgemm.json")


def test_saved_results_round_trip_with_derived_figures(saved, tmp_path):
    assert len(saved.results) == 32
    r = saved.results[0]
    assert r.kernel == "matmul_naive" and r.parameters == {"N": 512, "M": 512, "K": 1024}
    assert r.gflops == pytest.approx(r.flop / r.latency_s / 1e9)
    assert r.energy_j == pytest.approx(r.power_w * r.latency_s, rel=0.05)
    assert r.ncu_diff_pct == pytest.approx(100 * (r.latency_s / r.ncu_duration_s - 1))
    saved.save(tmp_path)
    again = SweepResult.load(tmp_path)
    assert again.results == saved.results
    frame = again.frame()
    assert len(frame) == 32 and {"param_N", "latency_s", "energy_j", "gflop_per_j", "check_status"} <= set(
        frame
    )


def test_report_and_plots_from_saved_results(saved, tmp_path):
    saved.save(tmp_path)
    report = (tmp_path / "benchmark_report.txt").read_text()
    assert "Parameters: N=4096, M=4096, K=1024" in report
    block = report.split("Parameters: N=4096, M=4096, K=1024")[1]
    assert block.index("matmul_tiled") < block.index("matmul_naive")  # fastest first
    tiled = next(
        r
        for r in saved.results
        if r.kernel == "matmul_tiled" and r.parameters["N"] == 4096 and r.parameters["M"] == 4096
    )
    naive = next(
        r
        for r in saved.results
        if r.kernel == "matmul_naive" and r.parameters["N"] == 4096 and r.parameters["M"] == 4096
    )
    assert f"matmul_tiled (16x16x1): {naive.latency_s / tiled.latency_s:.2f}x" in block
    assert "32 configurations: 32 measured, 0 with a wrong result, 0 failed" in report
    for name in ("heatmap.png", "time_vs_N.png", "speedup.png", "energy_vs_latency.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_failed_configurations_are_reported(saved, tmp_path):
    broken = replace(saved.results[1], status="error", error="KernelCompileError: boom", latency_s=math.nan)
    result = SweepResult((saved.results[0], broken), saved.meta)
    report = result.save(tmp_path) / "benchmark_report.txt"
    assert "ERROR: KernelCompileError: boom" in report.read_text()
    assert "1 failed or not run" in report.read_text()


def test_shards_merge_back_into_the_whole_sweep(saved, tmp_path):
    dirs = []
    for i in range(3):
        part = SweepResult(
            tuple(r for r in saved.results if in_shard(r.point_index, (i, 3))),
            {**saved.meta, "shard": [i, 3]},
        )
        # a shard's benchmark_results.json is what merging reads (save() and its plots: above)
        dirs.append(tmp_path / f"shard{i}")
        write_json(dirs[-1] / "benchmark_results.json", part.to_json())
    merged = merge([SweepResult.load(d) for d in reversed(dirs)])
    assert merged.results == saved.results and merged.meta["missing_shards"] == []
    partial = merge([SweepResult.load(d) for d in dirs[:2]])
    assert partial.meta["missing_shards"] == [2]
    with pytest.raises(StoreError, match="given twice"):
        merge([SweepResult.load(dirs[0]), SweepResult.load(dirs[0])])
    other = SweepResult(saved.results[:1], {**saved.meta, "sweep_id": "other", "shard": [2, 3]})
    with pytest.raises(StoreError, match="different sweeps"):
        merge([SweepResult.load(dirs[0]), other])
    result = CliRunner().invoke(main, ["merge", *map(str, dirs), "--out", str(tmp_path / "all")])
    assert result.exit_code == 0, result.output
    assert len(json.loads((tmp_path / "all" / "benchmark_results.json").read_text())["benchmarks"]) == 32
    assert (tmp_path / "all" / "heatmap.png").exists()


# -- the CLI ---------------------------------------------------------------------------------------
def test_cli_dry_run_prints_signatures_and_configurations_without_a_gpu():
    result = CliRunner().invoke(
        main,
        [
            "sweep",
            str(MATMUL),
            "-k",
            "matmul_naive",
            "-k",
            "matmul_tiled",
            "-p",
            "N=512..2048",
            "-p",
            "M=512",
            "-p",
            "K=256",
            "--shape",
            "a=N,K",
            "--shape",
            "b=K,M",
            "--shape",
            "res=N,M",
            "--where",
            "N != 1024",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert (
        "matmul_tiled: matmul_tiled(const float *a, const float *b, float *res, int N, int M, int K)"
        in result.output
    )
    configs = [line for line in lines if line.startswith("  [")]
    assert configs == [
        "  [0] matmul_naive N=512 M=512 K=256 block=16x16x1 grid=32x32x1  a[512, 256] b[256, 512] res[512, 512]",
        "  [1] matmul_tiled N=512 M=512 K=256 block=16x16x1 grid=32x32x1  a[512, 256] b[256, 512] res[512, 512]",
        "  [2] matmul_naive N=2048 M=512 K=256 block=16x16x1 grid=32x128x1  a[2048, 256] b[256, 512] res[2048, 512]",
        "  [3] matmul_tiled N=2048 M=512 K=256 block=16x16x1 grid=32x128x1  a[2048, 256] b[256, 512] res[2048, 512]",
    ]


def test_cli_errors_are_clear():
    runner = CliRunner()
    result = runner.invoke(main, ["sweep", str(MATMUL), "-k", "nope", "-p", "N=1", "--dry-run"])
    assert result.exit_code == 2 and "no __global__ kernel 'nope'" in result.output
    result = runner.invoke(main, ["sweep", str(MATMUL), "-k", "matmul_naive", "-p", "N", "--dry-run"])
    assert result.exit_code == 2 and "expected NAME=V1,V2" in result.output
    result = runner.invoke(
        main, ["sweep", str(MATMUL), "-k", "matmul_naive", "-p", "N=1", "--where", "N > 5", "--dry-run"]
    )
    assert result.exit_code == 2 and "no parameter point" in result.output


def test_python_api_dry_run_returns_the_plan():
    naive = ef.load_kernel(MATMUL, "matmul_naive", shapes=SHAPES)
    lines = []
    configs = ef.sweep(naive, N=[64, 128], M=[64], K=[32], flop="2*N*M*K", dry_run=True, echo=lines.append)
    assert [c.extra["flop"] for c in configs] == [2 * 64 * 64 * 32, 2 * 128 * 64 * 32]
    assert lines[0] == "kernels:" and len(lines) == 5


def test_without_a_gpu_the_sweep_fails_clearly_and_keeps_its_plan(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    naive = ef.load_kernel(MATMUL, "matmul_naive", shapes=SHAPES)
    with pytest.raises(WorkloadError, match="needs a CUDA GPU"):
        ef.sweep(naive, N=[64], M=[64], K=[64], power=None, out=tmp_path, reporters=[], echo=lambda s: None)
    saved = SweepResult.load(tmp_path)
    assert [r.status for r in saved.results] == ["not run"]
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "incomplete"
