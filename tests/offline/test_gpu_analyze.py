"""Offline analysis of real nvidia-smi logs against the run's own figures
(``pytest -m gpu tests/offline/test_gpu_analyze.py`` on a GPU machine)."""

import shutil
import signal
import subprocess
import time

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def gemm():
    assert torch.cuda.is_available(), "these tests need a CUDA GPU"
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)

    def step():
        torch.matmul(a, b, out=c)

    for _ in range(200):  # clocks and power up to their steady state
        step()
    torch.cuda.synchronize()
    return step


def measure(out, sources, step, seconds=5.0, windows=3):
    n = int(seconds / 0.00167)
    with ef.measure(power=sources, sync=torch.cuda.synchronize, out=out) as m:
        for _ in range(int(2.0 / 0.00167)):
            step()
        for _ in range(windows):
            with m.window("steady", iterations=n):
                for _ in range(n):
                    step()
    return m.result


def test_the_runs_own_nvidia_smi_log_gives_the_runs_energy(gemm, tmp_path):
    """The raw log the nvidia-smi source keeps, read back by analyze, gives the run's numbers."""
    result = measure(tmp_path / "run", ["nvidia-smi:gpus=0"], gemm, seconds=2.0)
    raw = tmp_path / "run" / "raw" / "nvidia-smi" / "nvidia-smi.csv"
    out = CliRunner().invoke(
        main,
        ["analyze", "--power-log", str(raw), "--run", str(tmp_path / "run"), "--out", str(tmp_path / "o")],
    )
    assert out.exit_code == 0, out.output
    assert "warning" not in out.output
    again = pd.read_csv(tmp_path / "o" / "windows.csv")
    recorded = result.windows[result.windows["channel"] == "gpu0"]["energy_j"].to_numpy()
    offline = again[again["channel"] == "gpu0"]["energy_j"].to_numpy()
    print("run J", recorded, "analyze J", offline)
    assert offline == pytest.approx(recorded, rel=1e-3)


def test_the_earlier_tools_nvidia_smi_log_against_the_energy_counter(gemm, tmp_path):
    """nvidia-smi logging power.draw with units, as the earlier tool ran it, beside an NVML run;
    analyze places the 1-s averages at the middle of their second and integrates them."""
    exe = shutil.which("nvidia-smi")
    assert exe, "nvidia-smi is not on PATH"
    log = tmp_path / "nvidia-smi.csv"
    with open(log, "w") as f:
        logger = subprocess.Popen(
            [exe, "--query-gpu=timestamp,index,power.draw", "--format=csv", "-lms", "100", "-i", "0"],
            stdout=f,
        )
        try:
            time.sleep(2.0)
            result = measure(tmp_path / "run", ["nvml:gpus=0"], gemm, seconds=5.0)
            time.sleep(2.0)
        finally:
            logger.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops it
            logger.wait(timeout=10)
    text = log.read_text()
    torn = not text.endswith("\n")
    print("the log ended in the middle of a line:", torn)
    if torn:  # analyze refuses a cut last row; its message says to remove it, as done here
        log.write_text(text[: text.rfind("\n") + 1])
    out = CliRunner().invoke(
        main,
        ["analyze", "--power-log", str(log), "--run", str(tmp_path / "run"), "--out", str(tmp_path / "o")],
    )
    assert out.exit_code == 0, out.output
    again = pd.read_csv(tmp_path / "o" / "windows.csv")
    smi = again[again["channel"] == "gpu0"]["energy_j"].to_numpy()
    counter = result.windows[result.windows["channel"] == "gpu0"]["energy_j"].to_numpy()
    error = np.abs(smi / counter - 1)
    print("counter J", counter, "nvidia-smi power.draw J", smi, "error %", 100 * error)
    assert np.all(error < 0.05)  # PHYSICS.md: power.draw on 5-s windows, 0.2 % median, 4.5 % worst
