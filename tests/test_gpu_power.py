"""The GPU power sources on a real NVIDIA GPU (``pytest -m gpu`` on a GPU machine)."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import energyframe as ef
from energyframe.core.tickgrid import TICK_OFF_GRID, TickGrid
from energyframe.power.nvidia_smi import NvidiaSmiPowerSource
from energyframe.power.nvml import NVMLPowerSource

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


def steady_windows(sources, step, seconds=2.0, windows=3):
    n = int(seconds / 0.00167)
    with ef.measure(power=sources, sync=torch.cuda.synchronize) as m:
        for _ in range(int(1.0 / 0.00167)):
            step()
        for _ in range(windows):
            with m.window("steady", iterations=n):
                for _ in range(n):
                    step()
    return m.result


def by_channel(result, channel):
    return result.windows[result.windows["channel"] == channel]


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_nvml_counter_buffer_and_nvidia_smi_agree_on_2s_windows(gemm, mode):
    result = steady_windows(
        [
            NVMLPowerSource(name="nvml", gpus="0", mode=mode),
            NvidiaSmiPowerSource(name="smi", gpus="0", prefix="smi."),
        ],
        gemm,
    )
    counter = by_channel(result, "gpu0")["energy_j"].to_numpy()
    buffer = by_channel(result, "gpu0.power_samples")["energy_j"].to_numpy()
    smi = by_channel(result, "smi.gpu0")["energy_j"].to_numpy()
    assert np.all(counter > 0)
    assert buffer == pytest.approx(counter, rel=0.03)
    assert smi == pytest.approx(counter, rel=0.03)
    power = by_channel(result, "gpu0")["mean_power_w"].median()
    assert 150 < power < 1200  # a loaded data-centre GPU
    row = by_channel(result, "gpu0").iloc[0]
    assert row["sm_clock_mhz"] > 0 and row["temperature_c"] > 0
    assert row["clock_event_reasons"].startswith("0x")


def test_counter_ticks_every_100ms(gemm):
    source = NVMLPowerSource(name="nvml", gpus="0", channels="state")
    result = steady_windows([source], gemm, seconds=1.0, windows=2)
    ticks = result.samples[result.samples["channel"] == "gpu0"]["time_s"].to_numpy()
    periods = np.diff(ticks)
    assert len(ticks) >= 15
    assert 0.09 < float(np.median(periods)) < 0.11


def test_nvidia_smi_writes_its_raw_log(gemm, tmp_path):
    source = NvidiaSmiPowerSource(name="nvidia-smi", gpus="0", log=tmp_path / "power.csv")
    result = steady_windows([source], gemm, seconds=1.0, windows=1)
    lines = (tmp_path / "power.csv").read_text().splitlines()
    assert lines[0].startswith("timestamp, index, uuid, power.draw.instant [W]")
    assert len(lines) > 20
    assert result.meta["sources"][0]["info"]["power_field"] == "power.draw.instant"


def test_auto_detection_chooses_nvml():
    assert NVMLPowerSource.detect().available
    assert NvidiaSmiPowerSource.detect().available
    with ef.measure() as m:
        with m.window("idle"):
            time.sleep(0.3)
    assert [s.name for s in m.sources] == ["nvml"]


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_nvml_package_in_both_modes(gemm, mode):
    import pynvml

    from energyframe.plugin import Timing

    source = NVMLPowerSource(name="nvml", gpus="0", mode=mode)
    assert type(source).__module__ == "energyframe.power.nvml.source"
    result = steady_windows([source], gemm, seconds=1.0, windows=2)
    channels = {c["name"]: c for c in result.meta["sources"][0]["channels"]}
    assert channels["gpu0"]["timing"] == Timing.EXACT.value
    assert channels["gpu0.power_instant"]["timing"] == Timing.EXACT.value
    assert channels["gpu0.power_samples"]["timing"] == Timing.EXACT.value
    assert channels["gpu0.power_average"]["timing"] == Timing.PERIOD_END.value
    assert channels["gpu0.power_average"]["averaging_s"] == 1.0
    info = result.meta["sources"][0]["info"]
    assert info["mode"] == mode
    assert info["clock_event_bits"]["sw_power_cap"] == pynvml.nvmlClocksEventReasonSwPowerCap
    samples = result.samples
    for name in ("gpu0", "gpu0.power_instant", "gpu0.power_average", "gpu0.power_samples", "gpu0.sm_clock"):
        assert (samples["channel"] == name).sum() >= 5, name
    ticks = samples[samples["channel"] == "gpu0"]["time_s"].to_numpy()
    assert 0.09 < float(np.median(np.diff(ticks))) < 0.11
    if mode == "process":
        assert source.sampler_process is not None and source.sampler_process.returncode == 0
    else:
        assert source.sampler_process is None


def test_a_sampler_kept_from_the_cpu_flags_its_late_ticks_and_a_free_one_none(gemm):
    # a free sampler: on a steady load its ticks lie on the counter's update grid, no window flagged
    free = steady_windows([NVMLPowerSource(name="nvml", gpus="0")], gemm, seconds=0.35, windows=12)
    grid = TickGrid.check(free.samples[free.samples["channel"] == "gpu0"]["time_s"].to_numpy())
    assert grid is not None and not grid.off.any()
    assert not any(TICK_OFF_GRID in f for f in by_channel(free, "gpu0")["flags"])
    # the sampler child stopped for 60 ms every ~0.3 s, as a host short of CPU would: a tick that
    # falls in a stop is stamped in its middle, up to 30 ms off
    source = NVMLPowerSource(name="nvml", gpus="0")
    n, done = int(0.35 / 0.00167), threading.Event()
    with ef.measure(power=[source], sync=torch.cuda.synchronize) as m:
        pid = source.sampler_process.pid

        def starve():
            while not done.wait(0.23):
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.06)
                os.kill(pid, signal.SIGCONT)

        stopper = threading.Thread(target=starve, daemon=True)
        for _ in range(int(1.0 / 0.00167)):
            gemm()
        stopper.start()
        try:
            for _ in range(24):
                with m.window("steady", iterations=n):
                    for _ in range(n):
                        gemm()
        finally:
            done.set()
            stopper.join()
    w = by_channel(m.result, "gpu0")
    flagged = w[w["flags"].map(lambda f: TICK_OFF_GRID in f)]
    # the truth of a steady window: the run's mean power (over all windows at once, where a
    # stamp's error moves only the two outer edges) times its duration
    power_w = w["energy_j"].sum() / w["duration_s"].sum()
    error = (flagged["energy_j"] - power_w * flagged["duration_s"]).abs()
    inside = float((error <= flagged["energy_bound_j"]).mean()) if len(flagged) else float("nan")
    print(
        f"\nstarved sampler: {len(flagged)} of {len(w)} windows flagged, farthest "
        f"{flagged['tick_off_grid_ms'].max():.1f} ms; error {100 * (error / (power_w * flagged['duration_s'])).median():.2f} % "
        f"median; {100 * inside:.0f} % inside the bound (median {flagged['energy_bound_pct'].median():.2f} %); "
        f"unflagged bound median {w.drop(flagged.index)['energy_bound_pct'].median():.2f} %"
    )
    assert len(flagged) >= 2 and (flagged["tick_off_grid_ms"] > 15.0).all()
    assert inside >= 0.8
    assert any(s.startswith("gpu0: ") and "update grid" in s for s in m.result.meta["warnings"])
