"""Kernel sweeps without a GPU: signatures, the parameter space, launches, checks, ncu output,
reports, plots, shards and the CLI. Saved results are a real sweep's (H100, 2026-11-22)."""

import json
import math
import shutil
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import StoreError, UsageError, WorkloadError
from energyframe.results.store import write_json
from energyframe.sweeps import ncu
from energyframe.sweeps.check import (
    DETERMINISTIC,
    MISMATCH,
    NONDETERMINISTIC,
    PASSED,
    UNCHECKED,
    allocate,
    compare,
    determinism,
    poison,
    reference_outputs,
)
from energyframe.sweeps.outputs import write
from energyframe.sweeps.results import SweepResult, merge
from energyframe.sweeps.runtime import compile_ptx, parse_resource_usage, resource_usage
from energyframe.sweeps.signature import parse_signature
from energyframe.sweeps.space import evaluate, expand, in_shard, parse_shard, parse_values
from energyframe.sweeps.workload import plan

ROOT = Path(__file__).resolve().parents[2]
MATMUL = ROOT / "examples" / "matmul_kernels.cu"
BUG = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "planted_bug.cu"
SAXPY = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "saxpy.cu"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
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
    files = write(saved, tmp_path)
    assert [f.name for f in files] == [
        "benchmark_results.json",
        "benchmark_report.txt",
        "heatmap.png",
        "time_vs_N.png",
        "speedup.png",
        "energy_vs_latency.png",
    ]
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
    write(result, tmp_path)
    report = tmp_path / "benchmark_report.txt"
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


def test_the_settings_are_said_settings_not_config(tmp_path):
    # config= was removed in 0.x; it is refused, never taken for a swept parameter named config
    naive = ef.load_kernel(MATMUL, "matmul_naive", shapes=SHAPES)
    with pytest.raises(TypeError) as e:
        ef.sweep(naive, N=[64], M=[64], K=[64], config=ef.RunSettings(trials=1), out=tmp_path, echo=print)
    assert str(e.value) == "ef.sweep() takes no config= since 0.x: say settings=ef.RunSettings(...)"
    assert list(tmp_path.iterdir()) == []


def test_without_a_gpu_nothing_starts_and_nothing_is_claimed(tmp_path, monkeypatch):
    # deliberately changed: the sweep used to start, print an empty table and save a plan of
    # "not run" configurations; now it refuses before anything starts and writes nothing
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    naive = ef.load_kernel(MATMUL, "matmul_naive", shapes=SHAPES)
    with pytest.raises(WorkloadError, match="needs a CUDA GPU"):
        ef.sweep(naive, N=[64], M=[64], K=[64], power="none", out=tmp_path, reporters=[], echo=lambda s: None)
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "cli"
    args = ["sweep", str(MATMUL), "-k", "matmul_naive", "-p", "N=64", "-p", "M=64", "-p", "K=64"]
    result = CliRunner().invoke(main, [*args, "--power", "none", "--out", str(out)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "Error: a kernel sweep needs a CUDA GPU (torch sees none): nothing was run; --dry-run shows the plan\n"
    )
    assert not out.exists()


def test_a_run_that_stops_gives_every_configuration_not_run_its_reason(tmp_path, monkeypatch):
    # CUDA "available" and a CuPy module present, but no driver: the workload's setup fails
    # inside the run, which is saved; nothing may be claimed that was not written
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    naive = ef.load_kernel(MATMUL, "matmul_naive", shapes=SHAPES)
    lines = []
    with pytest.raises(WorkloadError) as raised:
        ef.sweep(
            naive, N=[64, 128], M=[64], K=[64], power="none", out=tmp_path, reporters=[], echo=lines.append
        )
    assert lines == [
        f"sweep results (incomplete) in {tmp_path}: benchmark_results.json, benchmark_report.txt"
    ]
    assert not list(tmp_path.glob("*.png"))
    saved = SweepResult.load(tmp_path)
    reason = f"not measured: the run stopped before it (WorkloadError: {raised.value})"
    assert [(r.status, r.error) for r in saved.results] == [("not run", reason)] * 2
    report = (tmp_path / "benchmark_report.txt").read_text()
    assert report.count(f"NOT RUN: {reason[:150]}") == 2


def test_an_old_result_without_a_reason_still_says_so(saved, tmp_path):
    silent = replace(saved.results[0], status="not run", error="", latency_s=math.nan)
    write(SweepResult((silent,), saved.meta), tmp_path)
    assert "NOT RUN: no reason was recorded" in (tmp_path / "benchmark_report.txt").read_text()


# -- what the user meant: blocks, warnings, determinism ---------------------------------------------
def test_the_default_block_follows_the_rank_of_the_output():
    add = ef.load_kernel(BUG, "add_ok")
    tiled = ef.load_kernel(MATMUL, "matmul_tiled", shapes=SHAPES)
    configs = plan([add, tiled], expand({"n": [1000], "N": [64], "M": [32], "K": [8]}))
    assert [(c.kernel.label, c.block, c.launch.grid) for c in configs] == [
        ("add_ok", (256, 1, 1), (4, 1, 1)),
        ("matmul_tiled", (16, 16, 1), (2, 4, 1)),
    ]
    assert all(c.warnings == () for c in configs)


def test_a_block_dimension_with_nothing_behind_it_is_warned_in_the_dry_run_and_the_report(saved, tmp_path):
    warning = (
        "add_ok: block 16x16x1 has 16 threads along y, but neither the grid nor the output out[1000] "
        "extends along y: each element may be computed 16 times (16x the work, a race if the kernel "
        "reads what it writes); use a 1-D block (--block 256)"
    )
    result = CliRunner().invoke(
        main, ["sweep", str(BUG), "-k", "add_ok", "-p", "n=1000", "--block", "16,16", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"warning: {warning}"
    (config,) = plan([ef.load_kernel(BUG, "add_ok", block=(16, 16))], [{"n": 1000}])
    assert config.warnings == (warning,)
    # a grid along y is extent enough: no warning
    (config,) = plan([ef.load_kernel(BUG, "add_ok", block=(16, 16), grid=(63, 16))], [{"n": 1000}])
    assert config.warnings == ()
    warned = replace(saved.results[0], warnings=(warning,))
    write(SweepResult((warned, saved.results[1]), saved.meta), tmp_path)
    assert f"WARNING: {warning}" in (tmp_path / "benchmark_report.txt").read_text()
    assert SweepResult.load(tmp_path).results[0].warnings == (warning,)


def test_determinism_compares_two_fresh_launches():
    torch = pytest.importorskip("torch")
    saxpy = ef.load_kernel(SAXPY, "saxpy", inouts=["y"])
    x = torch.randn(64)
    first = {"x": x, "y": torch.randn(64)}
    same = determinism(saxpy, first, {"x": x, "y": first["y"].clone()})
    assert (same.status, same.rel_error, same.against) == (DETERMINISTIC, 0.0, "a second launch")
    assert same.detail == "two launches on fresh copies of the inputs agree bit for bit"
    raced = {"x": x, "y": first["y"] + 2.0 * x}  # y += a*x applied twice by racing threads
    differ = determinism(saxpy, first, raced)
    assert differ.status == NONDETERMINISTIC and differ.rel_error > 0.1
    assert differ.detail.startswith("y: the launches differ by ")
    close = determinism(saxpy, first, {"x": x, "y": first["y"] * (1 + 1e-7)})
    assert close.status == DETERMINISTIC and "not bit for bit" in close.detail
    half = first["y"].clone()
    half[10:] = math.nan  # written in one launch only
    assert determinism(saxpy, first, {"x": x, "y": half}).detail == "y: 54 elements finite in one launch only"
    # the poisoned output came back NaN everywhere: nothing can be said, and the fix is named
    nan = {"x": x, "y": torch.full((64,), math.nan)}
    blind = determinism(ef.load_kernel(SAXPY, "saxpy"), nan, {"x": x, "y": nan["y"].clone()})
    assert blind.status == UNCHECKED and blind.detail == (
        "y: no finite value after the launch (poisoned with NaN): the kernel never writes it, or "
        "reads it (y = a*x + y): declare it an in-out (inouts= / --inout y)"
    )


def test_inouts_are_random_not_poisoned_and_the_reference_reads_their_first_values():
    torch = pytest.importorskip("torch")
    plain = ef.load_kernel(SAXPY, "saxpy")
    inout = ef.load_kernel(SAXPY, "saxpy", inouts=["y"], args={"a": 2.0})
    launch = inout.configure({"n": 16}, (256, 1, 1))
    tensors = allocate(inout, launch, {"n": 16}, torch.device("cpu"), seed=3)
    again = allocate(inout, launch, {"n": 16}, torch.device("cpu"), seed=3)
    assert tensors["y"].isfinite().all() and torch.equal(tensors["y"], again["y"])
    assert tensors["y"].data_ptr() != again["y"].data_ptr()  # fresh copies
    assert allocate(plain, launch, {"n": 16}, torch.device("cpu"), seed=3)["y"].isnan().all()
    before = {"y": tensors["y"].clone()}
    tensors["y"] += 2.0 * tensors["x"]  # what the launch did
    expected = reference_outputs(
        inout, lambda x, y, a: a * x + y, tensors, {"a": 2.0, "n": 16}, {"n": 16}, before
    )
    assert torch.allclose(expected["y"], tensors["y"].double())
    assert compare(inout, tensors, expected, "reference").status == PASSED
    with pytest.raises(UsageError, match="inouts \\['x'\\] are not outputs"):
        ef.load_kernel(SAXPY, "saxpy", inouts=["x"])


def test_a_reference_with_unwritten_elements_is_compared_where_it_was_written():
    torch = pytest.importorskip("torch")
    add = ef.load_kernel(BUG, "add_ok")
    expected = {"out": torch.cat([torch.ones(8), torch.full((8,), math.nan)])}
    right = compare(add, {"out": torch.cat([torch.ones(8), torch.zeros(8)])}, expected, "add_ok")
    assert right.status == PASSED and right.rel_error == 0.0
    wrong = compare(add, {"out": torch.cat([2 * torch.ones(8), torch.zeros(8)])}, expected, "add_ok")
    assert wrong.status == MISMATCH and wrong.rel_error == pytest.approx(1.0)
    empty = compare(add, {"out": torch.ones(16)}, {"out": torch.full((16,), math.nan)}, "add_ok")
    assert empty.status == UNCHECKED and empty.detail == "out: the reference holds no finite value"


# -- bad input: one line, exit 2 -------------------------------------------------------------------
def _dry(*args):
    return CliRunner().invoke(main, ["sweep", *map(str, args), "--dry-run"])


def test_a_source_that_is_not_utf8_is_one_line(tmp_path):
    source = tmp_path / "latin1.cu"
    source.write_bytes("// caf\xe9\n__global__ void k(float *y, int n) {}\n".encode("latin-1"))
    result = _dry(source, "-k", "k", "-p", "n=4")
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"Error: the kernel source {str(source)!r} is not UTF-8 text (byte 0xe9 at offset 6); save it as UTF-8\n"
    )


def test_values_that_are_not_numbers_say_what_is_expected():
    result = _dry(MATMUL, "-k", "matmul_naive", "-p", "N=abc")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: -p 'N=abc': 'abc' is not a number (only numbers and arithmetic are allowed here, "
        "e.g. 512 or 2**10)\n"
    )
    result = _dry(BUG, "-k", "scale_half", "-p", "n=4", "--arg", "alpha=fast")
    assert result.exit_code == 2 and result.stderr.startswith(
        "Error: --arg alpha=fast: 'fast' is not a number"
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("10**10**10", "exponent 10000000000 is too large (at most 64)"),
        (
            "2**64 * 2**64",
            "a value of the expression exceeds 2**64 (got ~1e38); sizes, grids and work counts are far smaller",
        ),
        ("1 << 100", "shift by 100: shifts go from 0 to 64"),
        ("(1, 2) * 10**9", "'mult' needs numbers, got (1, 2)"),
        ("cdiv(N, 0)", "division by zero"),
        (
            "2.0**60 * 2.0**60",
            "a value of the expression exceeds 2**64 (got 1.33e+36); sizes, grids and work counts are far smaller",
        ),
        ("(" * 300 + "1" + ")" * 300, None),
    ],
)
def test_expressions_are_bounded(text, message):
    with pytest.raises(UsageError) as raised:
        evaluate(text, {"N": 4})
    if message is None:
        assert str(raised.value).endswith("is longer than 500 characters")
    else:
        assert str(raised.value) == f"{text!r}: {message}"


def test_a_grid_that_cannot_be_computed_for_any_configuration_is_one_line():
    args = [MATMUL, "-k", "matmul_naive", "-p", "N=4", "-p", "M=4", "-p", "K=4"]
    result = _dry(*args, "--grid", "10**10**10")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: no configuration can be launched: UsageError: '10**10**10': exponent 10000000000 is "
        "too large (at most 64)\n"
    )
    result = _dry(MATMUL, "-k", "matmul_naive", "-p", "N=2**40", "-p", "M=4", "-p", "K=4")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: no configuration can be launched: UsageError: matmul_naive: grid 17179869184x1x1 exceeds "
        "CUDA's limit of 2147483647x65535x65535 blocks\n"
    )


def test_absurdly_large_arrays_are_warned_before_anything_is_allocated():
    shapes = ["--shape", "a=N,K", "--shape", "b=K,M", "--shape", "res=N,M"]
    result = _dry(MATMUL, "-k", "matmul_naive", "-p", "N=2**17", "-p", "M=2**17", "-p", "K=1024", *shapes)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "warning: matmul_naive: the arguments take 65 GiB (res 64 GiB, a 0.5 GiB, b 0.5 GiB): is a size wrong?"
    )
    (config,) = plan(
        [ef.load_kernel(MATMUL, "matmul_naive", shapes=SHAPES)], [{"N": 512, "M": 512, "K": 512}]
    )
    assert config.warnings == () and config.launch.array_bytes == 3 * 512 * 512 * 4


# -- crafted results -------------------------------------------------------------------------------
def test_a_crafted_shard_cannot_write_outside_out(saved, tmp_path):
    data = json.loads((FIXTURES / "sweep" / "h100-sgemm.json").read_text())
    evil = "x/../../../PWNED"
    for b in data["benchmarks"]:
        b["parameters"] = {evil if k == "N" else k: v for k, v in b["parameters"].items()}
    data["sweep"]["parameters"] = {evil if k == "N" else k: v for k, v in data["sweep"]["parameters"].items()}
    shard = tmp_path / "a" / "b" / "c" / "shard"
    shard.mkdir(parents=True)
    (shard / "benchmark_results.json").write_text(json.dumps(data))
    out = tmp_path / "a" / "b" / "c" / "merged"
    result = CliRunner().invoke(main, ["merge", str(shard), "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: {shard / 'benchmark_results.json'}: parameter names ['{evil}'] are not identifiers "
        "(letters, digits and _): refused\n"
    )
    assert not out.exists() and not list(tmp_path.rglob("PWNED*"))
    # file names made from data are plain names even when results bypass load()
    crafted = SweepResult(
        tuple(
            replace(r, parameters={evil if k == "N" else k: v for k, v in r.parameters.items()})
            for r in saved.results
        ),
        saved.meta,
    )
    files = write(crafted, out)
    assert all(f.parent == out for f in files)
    assert "time_vs_x_.._.._.._PWNED.png" in [f.name for f in files]
    assert not list(tmp_path.rglob("PWNED*"))


@pytest.mark.parametrize(
    "text", ["[1, 2]", '{"format_version": 2}', '{"format_version": 2, "benchmarks": [{"index": "x"}]}']
)
def test_files_that_are_not_sweep_results_are_refused_in_one_line(tmp_path, text):
    (tmp_path / "benchmark_results.json").write_text(text)
    result = CliRunner().invoke(main, ["merge", str(tmp_path), "--out", str(tmp_path / "m")])
    assert result.exit_code == 2 and result.stderr.startswith(
        f"Error: {tmp_path / 'benchmark_results.json'} is not a sweep's results"
    )
    assert len(result.stderr.splitlines()) == 1


# -- structure -------------------------------------------------------------------------------------
def test_results_do_not_import_their_presentation():
    code = (
        "import sys, energyframe.sweeps.results; "
        "print(sorted(m for m in sys.modules if m.startswith('energyframe.sweeps.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['energyframe.sweeps.devices', 'energyframe.sweeps.results']"
