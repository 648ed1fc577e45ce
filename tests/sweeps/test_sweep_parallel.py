"""``energyframe sweep --devices``: shards in parallel child processes, merged, without a GPU.

The children here are real processes: the CLI's own (which fail clearly: this machine has no
GPU), or small Python programs that stand in for a measuring child by saving a recorded shard.
The shards in fixtures/sweep/shard-*-of-2.json are the recorded H100 SGEMM sweep split in two,
with device information added to each; shard 1's was edited to a 500 W power limit and a lower
measured clock, so that the GPUs differ.
"""

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import UsageError, WorkloadError
from energyframe.sweeps.parallel import Child, children, finish, parse_devices, run_children
from energyframe.sweeps.results import SweepResult, merge
from energyframe.sweeps.space import expand
from energyframe.sweeps.workload import plan

ROOT = Path(__file__).resolve().parents[2]
MATMUL = ROOT / "examples" / "matmul_kernels.cu"
SWEEPS = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"
SHARDS = [SWEEPS / "shard-0-of-2.json", SWEEPS / "shard-1-of-2.json"]
SHAPES = {"a": ("N", "K"), "b": ("K", "M"), "res": ("N", "M")}
SIZES = [512, 1024, 2048, 4096]
POWER_WARNING = (
    "the GPUs differ in power limit (W) (GPU 0: 700.0, GPU 1: 500.0): configurations measured on "
    "different GPUs are not comparable"
)


def test_devices_are_indices_of_the_visible_gpus_or_uuids():
    assert parse_devices("0,1") == [("0", "0"), ("1", "1")]
    assert parse_devices("0, 1", visible="2,3") == [("0", "2"), ("1", "3")]
    assert parse_devices("GPU-3c1e5b8a") == [("GPU-3c1e5b8a", "GPU-3c1e5b8a")]
    for text, message in [
        ("0,0", "--devices '0,0': a GPU is named twice"),
        ("", "--devices '': expected GPU indices or UUIDs, e.g. 0,1,2,3"),
        (
            "gpu0",
            "--devices 'gpu0': 'gpu0' is neither a GPU index nor a UUID (GPU-...); expected e.g. 0,1,2,3",
        ),
    ]:
        with pytest.raises(UsageError) as raised:
            parse_devices(text)
        assert str(raised.value) == message
    with pytest.raises(UsageError) as raised:
        parse_devices("0,2", visible="4,5")
    assert str(raised.value) == (
        "--devices '0,2': device 2 is not visible (CUDA_VISIBLE_DEVICES=4,5 makes devices 0..1 visible)"
    )


def test_each_child_is_a_shard_on_one_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    kids = children(["sweep", "k.cu", "-k=a"], [("0", "0"), ("1", "1")], tmp_path, python="py")
    assert [k.command for k in kids] == [
        (
            "py",
            "-m",
            "energyframe",
            "sweep",
            "k.cu",
            "-k=a",
            "--shard=0/2",
            f"--out={tmp_path / 'shards' / '0'}",
        ),
        (
            "py",
            "-m",
            "energyframe",
            "sweep",
            "k.cu",
            "-k=a",
            "--shard=1/2",
            f"--out={tmp_path / 'shards' / '1'}",
        ),
    ]
    assert [dict(k.env) for k in kids] == [
        {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"},
    ]


def test_dry_run_shows_which_gpu_measures_which_configurations():
    result = CliRunner().invoke(
        main,
        ["sweep", str(MATMUL), "-k", "matmul_naive", "-p", "N=512..2048", "-p", "M=512", "-p", "K=64"]
        + ["--shape", "a=N,K", "--shape", "b=K,M", "--shape", "res=N,M", "--devices", "0,1", "--dry-run"],
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [
        "GPU 0 (shard 0/2): 2 configurations: 0, 2",
        "GPU 1 (shard 1/2): 1 configurations: 1",
    ]


def test_devices_refuse_what_cannot_work():
    args = ["sweep", str(MATMUL), "-k", "matmul_naive", "-p", "N=64", "-p", "M=64", "-p", "K=64"]
    runner = CliRunner()
    result = runner.invoke(main, [*args, "--devices", "0,1", "--shard", "0/2"])
    assert result.exit_code == 2
    assert result.stderr == "Error: --devices splits the sweep into shards itself: drop --shard\n"
    result = runner.invoke(main, [*args, "--devices", "0,1", "--power", "nvml:gpus=0"])
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: --power 'nvml:gpus=0': with --devices each child measures the one GPU it sees; drop gpus=\n"
    )


@pytest.mark.slow
def test_children_that_fail_are_each_reported(tmp_path):
    # the real CLI children: each parses the same arguments (a mistake there would be a usage
    # error, exit 2), plans its shard, and fails because this machine has no GPU
    out = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "energyframe",
        "sweep",
        str(MATMUL),
        "-k",
        "matmul_naive",
        "-k",
        "matmul_tiled",
    ]
    cmd += ["-p", "N=512..2048", "-p", "M=512", "-p", "K=256", "--where", "N != 1024", "-X", "-DTILE=16"]
    cmd += ["--shape", "a=N,K", "--shape", "b=K,M", "--shape", "res=N,M", "--flop", "2*N*M*K"]
    cmd += ["--power", "none", "--trials", "2", "--devices", "0,1", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    no_gpu = "a kernel sweep needs a CUDA GPU (torch sees none): nothing was run; --dry-run shows the plan"
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert f"[GPU 0] Error: {no_gpu}" in lines and f"[GPU 1] Error: {no_gpu}" in lines
    assert lines[-1] == f"Error: 2 of 2 GPUs failed: GPUs 0, 1: {no_gpu}"
    assert done.stdout == ""
    assert sorted(p.name for p in out.iterdir()) == ["shards"]  # nothing merged, nothing claimed
    assert (out / "shards" / "1.log").read_text() == f"Error: {no_gpu}\n"


def _child(tmp_path: Path, device: str, shard: int, body: str) -> Child:
    out = tmp_path / "shards" / str(shard)
    script = textwrap.dedent(body)
    return Child(
        device,
        (shard, 2),
        (sys.executable, "-c", script, str(out)),
        {"CUDA_VISIBLE_DEVICES": device},
        out,
        tmp_path / "shards" / f"{shard}.log",
    )


def _planned():
    kernels = [ef.load_kernel(MATMUL, n, shapes=SHAPES) for n in ("matmul_naive", "matmul_tiled")]
    points = expand({"N": SIZES, "M": SIZES, "K": [1024]})
    return {i: plan(kernels, points, (i, 2)) for i in range(2)}


@pytest.mark.slow
def test_one_child_fails_and_the_others_are_merged_and_it_is_named(tmp_path):
    measuring = f"""
        import os, shutil, sys
        print("measuring on CUDA_VISIBLE_DEVICES=" + os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
        os.makedirs(sys.argv[1])
        shutil.copy({str(SHARDS[0])!r}, os.path.join(sys.argv[1], "benchmark_results.json"))
    """
    failing = """
        import sys
        print("Error: NVML could not start: the GPU is lost", flush=True)
        sys.exit(1)
    """
    kids = [_child(tmp_path, "0", 0, measuring), _child(tmp_path, "3", 1, failing)]
    lines = []
    outcomes, interrupted = run_children(kids, lines.append)
    assert not interrupted and [o.exit_code for o in outcomes] == [0, 1]
    assert sorted(lines) == [
        "[GPU 0] measuring on CUDA_VISIBLE_DEVICES=0",
        "[GPU 3] Error: NVML could not start: the GPU is lost",
    ]
    with pytest.raises(WorkloadError) as raised:
        finish(outcomes, interrupted, _planned(), tmp_path, lines.append)
    assert str(raised.value) == (
        "1 of 2 GPUs failed: GPU 3: NVML could not start: the GPU is lost; the other GPUs' results are "
        f"merged in {tmp_path}"
    )
    assert lines[-1] == (
        f"sweep results (incomplete) in {tmp_path}: benchmark_results.json, benchmark_report.txt, "
        "heatmap.png, time_vs_N.png, speedup.png, energy_vs_latency.png"
    )
    merged = SweepResult.load(tmp_path)
    assert [r.index for r in merged.results] == list(range(32))
    by_shard = {i: [r for r in merged.results if r.point_index % 2 == i] for i in range(2)}
    assert {(r.status, r.device) for r in by_shard[0]} == {("ok", "0")}
    assert {(r.status, r.device, r.error) for r in by_shard[1]} == {
        ("not run", "", "not run: GPU 3 failed (NVML could not start: the GPU is lost)")
    }
    assert merged.meta["failed_devices"] == [
        {"device": "3", "shard": [1, 2], "exit_code": 1, "reason": "NVML could not start: the GPU is lost"}
    ]
    assert merged.meta["missing_shards"] == []
    report = (tmp_path / "benchmark_report.txt").read_text()
    assert "WARNING: GPU 3 (shard 1/2) failed: NVML could not start: the GPU is lost" in report
    assert "16 configurations: 16 measured" not in report and "32 configurations: 16 measured" in report
    assert (tmp_path / "shards" / "1.log").read_text() == "Error: NVML could not start: the GPU is lost\n"


@pytest.mark.slow
def test_shards_from_gpus_that_differ_are_labelled_and_warned(tmp_path):
    parts = [SweepResult.load(p) for p in SHARDS]
    merged = merge(parts)
    assert merged.meta["warnings"] == [
        POWER_WARNING,
    ]
    assert sorted(merged.meta["devices"]) == ["0", "1"]
    assert merged.meta["devices"]["1"]["shards"] == [[1, 2]]
    assert {r.device for r in merged.results if r.point_index % 2 == 0} == {"0"}
    assert {r.device for r in merged.results if r.point_index % 2 == 1} == {"1"}
    # the figures are the recorded ones, unchanged
    recorded = SweepResult.load(SWEEPS / "h100-sgemm.json")
    assert [r.latency_s for r in merged.results] == [r.latency_s for r in recorded.results]
    # the --devices labels win over the recorded ones
    assert {r.device for r in merge(parts, labels=["GPU-3c1e5b8a", "7"]).results} == {"GPU-3c1e5b8a", "7"}

    result = CliRunner().invoke(main, ["merge", *map(str, SHARDS), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"warning: {POWER_WARNING}\n"
    report = (tmp_path / "benchmark_report.txt").read_text()
    assert (
        "GPU 1: NVIDIA H100 80GB HBM3 (GPU-9d4f0c2e-1b7a-4c3d-8e5f-6a2b1c0d3e4f), 500 W limit, "
        "application clocks 1980/2619 MHz, measured SM clock 1410 MHz (median), host node01, shards 1/2"
    ) in report
    assert f"WARNING: {POWER_WARNING}" in report
    header = next(line for line in report.splitlines() if line.startswith("Kernel "))
    assert header.split()[-2:] == ["GPU", "Check"]
    for point, device in (("N=512, M=512, K=1024", "0"), ("N=4096, M=4096, K=1024", "1")):
        block = report.split(f"Parameters: {point}\n")[1].split("\n\n")[0]
        rows = [line for line in block.splitlines() if line.startswith("matmul_")]
        assert [row.split()[-2:] for row in rows] == [[device, "passed"]] * 2


def test_the_same_gpu_index_on_two_hosts_is_told_apart():
    parts = [SweepResult.load(p) for p in SHARDS]
    meta = json.loads(json.dumps(parts[1].meta))
    meta["device"].update(cuda_visible_devices="0", host="node02", power_limit_w=700.0)
    merged = merge([parts[0], SweepResult(parts[1].results, meta)])
    assert sorted(merged.meta["devices"]) == ["0@node01", "0@node02"]
    assert merged.meta["warnings"] == []


def test_ctrl_c_stops_every_child(tmp_path):
    child = """
        import pathlib, signal, sys, time
        out = pathlib.Path(sys.argv[1])
        out.parent.mkdir(parents=True, exist_ok=True)
        def stop(signum, frame):
            pathlib.Path(str(out) + ".stopped").write_text(signal.Signals(signum).name)
            sys.exit(130)
        signal.signal(signal.SIGINT, stop)
        pathlib.Path(str(out) + ".started").write_text("")
        while True:
            time.sleep(0.05)
    """
    parent = f"""
        import sys
        from pathlib import Path
        from energyframe.errors import RunInterrupted
        from energyframe.sweeps.parallel import Child, finish, run_children
        out = Path({str(tmp_path)!r})
        kids = [
            Child(str(i), (i, 2), (sys.executable, "-c", {textwrap.dedent(child)!r}, str(out / "shards" / str(i))),
                  {{}}, out / "shards" / str(i), out / "shards" / f"{{i}}.log")
            for i in range(2)
        ]
        outcomes, interrupted = run_children(kids, lambda line: None)
        print("codes", [o.exit_code for o in outcomes], flush=True)
        try:
            finish(outcomes, interrupted, {{}}, out, print)
        except RunInterrupted as e:
            print(e, flush=True)
            sys.exit(e.exit_code)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(parent)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = [tmp_path / "shards" / f"{i}.started" for i in range(2)]
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in started):
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the children did not start"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    assert output.splitlines() == ["codes [130, 130]", "interrupted by SIGINT: every child was stopped"]
    assert [(tmp_path / "shards" / f"{i}.stopped").read_text() for i in range(2)] == ["SIGINT", "SIGINT"]


def test_a_merged_sweep_reads_back_with_its_devices(tmp_path):
    merged = merge([SweepResult.load(p) for p in SHARDS])
    merged.save(tmp_path)
    again = SweepResult.load(tmp_path)
    assert again.results == merged.results and again.meta["devices"] == merged.meta["devices"]
