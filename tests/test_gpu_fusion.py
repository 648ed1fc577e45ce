"""Fused power on a real NVIDIA GPU (``pytest -m gpu`` on a GPU machine).

A short square-wave GEMM load, measured with the nvml source and fused after the run from its
samples: the fused channel must keep the counter's energy at every tick, find the buffer's
offset within its search range, and shape nearly every tick interval from the buffer.
"""

import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import energyframe as ef
from energyframe.core.energy import power_energy
from energyframe.core.fusion import fused_channels
from energyframe.power.nvml import NVMLPowerSource

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture(scope="module")
def square_wave_dir(tmp_path_factory):
    assert torch.cuda.is_available(), "these tests need a CUDA GPU"
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    for _ in range(300):  # clocks and power up to their steady state
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    rng = random.Random(1)
    directory = tmp_path_factory.mktemp("fusion-run")
    with ef.measure(
        power=[NVMLPowerSource(name="nvml", gpus="0")], sync=torch.cuda.synchronize, out=directory
    ) as m:
        time.sleep(1.0)
        for _ in range(12):
            with m.window("on"):
                end = time.monotonic() + 0.5
                while time.monotonic() < end:
                    for _ in range(4):
                        torch.matmul(a, b, out=c)
                    torch.cuda.synchronize()
            with m.window("off"):
                time.sleep(0.5)
            time.sleep(rng.uniform(0.0, 0.1))
        time.sleep(1.0)
    return directory


@pytest.fixture(scope="module")
def square_wave_run(square_wave_dir):
    from run_data import load_run

    return load_run(square_wave_dir)


def test_fused_power_keeps_the_counter_at_every_tick(square_wave_run):
    run = square_wave_run
    report = {}
    channels, series = fused_channels(run.channels, run.series, report=report)
    assert "gpu0.fused" in channels
    fused, ticks = series["gpu0.fused"], run.series["gpu0"]
    inside = ticks.times_s[(ticks.times_s >= fused.times_s[0]) & (ticks.times_s <= fused.times_s[-1])]
    for i, j in [(0, len(inside) - 1), (5, 6), (10, 40), (33, 34)]:
        got = power_energy(fused.times_s, fused.values, inside[i], inside[j]).energy_j
        k = np.searchsorted(ticks.times_s, [inside[i], inside[j]])
        assert got == pytest.approx(ticks.values[k[1]] - ticks.values[k[0]], rel=1e-9)
    r = report["gpu0.fused"]
    buffer_offset = r["offsets"][0]
    assert buffer_offset["applied"], buffer_offset["reason"]  # a square wave has steps to match
    assert abs(buffer_offset["offset_s"]) < 0.05
    assert buffer_offset["gain"] == pytest.approx(1.0, abs=0.1)
    assert r["shaped"]["gpu0.power_samples"] >= 0.9 * r["intervals"]
    assert r["unknown"] == 0


def test_fused_on_and_off_windows_sum_to_the_counter(square_wave_run):
    # per window the two differ at the edges (that is the point); over the whole run they agree
    run = square_wave_run
    _, series = fused_channels(run.channels, run.series)
    fused, ticks = series["gpu0.fused"], run.series["gpu0"]
    first, last = run.windows["start_s"].min(), run.windows["end_s"].max()
    total_fused = power_energy(fused.times_s, fused.values, first, last).energy_j
    total_counter = np.diff(np.interp([first, last], ticks.times_s, ticks.values))[0]
    assert total_fused == pytest.approx(total_counter, rel=0.01)


def test_the_run_itself_records_the_fused_channel(square_wave_dir):
    # the run computes gpu0.fused after placement: a secondary channel with a row per window,
    # whose whole-run energy is the counter's
    w = pd.read_csv(square_wave_dir / "windows.csv")
    fused, counter = w[w["channel"] == "gpu0.fused"], w[w["channel"] == "gpu0"]
    assert len(fused) == len(counter) == 24
    assert fused["energy_j"].sum() == pytest.approx(counter["energy_j"].sum(), rel=0.02)
    meta = json.loads((square_wave_dir / "run.json").read_text())
    assert meta["primary_channels"] == ["gpu0"] and meta["fusion"]["gpu0.fused"]["unknown"] == 0
