"""The GPU power sources on a real NVIDIA GPU (``pytest -m gpu`` on a GPU machine)."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import energyframe as ef
from energyframe.core.tickgrid import TickGrid
from energyframe.core.vocabulary import IRREGULAR_TICKS, TICK_OFF_GRID
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


def starved_windows(step, stop_s, every_s, windows=30):
    """Steady windows of ~0.35 s while the nvml sampler child is stopped for ``stop_s`` after
    every ``every_s`` of running (SIGSTOP / SIGCONT from here, as a host short of CPU keeps a
    process away; each drawn within +-50 %, so that the stops do not lock to the ticks): a
    counter tick that falls in a stop is stamped in its middle, up to half a stop off."""
    source = NVMLPowerSource(name="nvml", gpus="0")
    n, done = int(0.35 / 0.00167), threading.Event()
    rng = np.random.default_rng(0)
    with ef.measure(power=[source], sync=torch.cuda.synchronize) as m:
        pid = source.sampler_process.pid

        def starve():
            while not done.wait(every_s * rng.uniform(0.5, 1.5)):
                os.kill(pid, signal.SIGSTOP)
                time.sleep(stop_s * rng.uniform(0.5, 1.5))
                os.kill(pid, signal.SIGCONT)

        stopper = threading.Thread(target=starve, daemon=True)
        for _ in range(int(1.0 / 0.00167)):
            step()
        if stop_s:
            stopper.start()
        try:
            for _ in range(windows):
                with m.window("steady", iterations=n):
                    for _ in range(n):
                        step()
        finally:
            done.set()
            if stop_s:
                stopper.join()
    return m.result


def against_samples(result, flag):
    """The counter's windows (those flagged ``flag``, or every one) against the 20-ms samples'
    windows, whose stamps are the driver's own (a late poller cannot move them): the share where
    the difference lies inside both random bounds combined, and the figures to record. At the cap
    the power moves by +-8 % from one 0.35-s window to the next, so the run's mean power is no
    window's truth."""
    w = result.windows
    counter = w[w["channel"] == "gpu0"].set_index("trial")
    samples = w[w["channel"] == "gpu0.power_samples"].set_index("trial")
    rows = counter["flags"].map(lambda f: flag in f) if flag else counter["flags"].map(lambda f: True)
    error = (counter["energy_j"] - samples["energy_j"])[rows].abs()
    both = np.hypot(counter["energy_random_j"], samples["energy_random_j"])[rows]
    pct = 100 * error / samples["energy_j"][rows]
    inside = float((error <= both).mean()) if len(error) else float("nan")
    text = (
        f"{int(rows.sum())} of {len(counter)} windows, |error| median {pct.median():.2f} % max {pct.max():.2f} %, "
        f"{100 * inside:.0f} % inside, bound median {counter['energy_bound_pct'][rows].median():.2f} %"
    )
    return int(rows.sum()), inside, text


def test_a_sampler_kept_from_the_cpu_flags_its_late_ticks_and_a_free_one_none(gemm):
    # free: the ticks lie on the counter's update grid, none far off; nothing flagged (a tick
    # 5-15 ms off, as a few are under load, widens its windows' bounds unflagged)
    free = starved_windows(gemm, 0.0, 0.0)
    grid = TickGrid.check(free.samples[free.samples["channel"] == "gpu0"]["time_s"].to_numpy())
    assert grid is not None and grid.regular and not grid.off.any()
    flags = ";".join(by_channel(free, "gpu0")["flags"])
    assert TICK_OFF_GRID not in flags and IRREGULAR_TICKS not in flags
    # stopped ~60 ms after every ~0.23 s: some ticks 15-45 ms off, each found on the grid
    stopped = starved_windows(gemm, 0.06, 0.23)
    n, inside, text = against_samples(stopped, TICK_OFF_GRID)
    _, inside_all, text_all = against_samples(stopped, "")
    print(f"\nsampler stopped ~60 ms after every ~0.23 s: flagged {text}; all: {text_all}")
    assert n >= 2 and (by_channel(stopped, "gpu0")["tick_off_grid_ms"].dropna() > 15.0).all()
    assert inside >= 0.85 and inside_all >= 0.85
    assert any(
        s.startswith("gpu0: ") and "off the counter's update grid" in s for s in stopped.meta["warnings"]
    )
    # stopped ~40 ms after every ~10 ms of running: four ticks in five fall in a stop, up to
    # 30 ms off, so that no tick can be told from the rest: the ticks' spread joins every stamp's
    # error
    often = starved_windows(gemm, 0.04, 0.01)
    n, inside, text = against_samples(often, IRREGULAR_TICKS)
    print(f"sampler stopped ~40 ms after every ~10 ms: flagged {text}")
    assert n == len(by_channel(often, "gpu0")) and inside >= 0.85
    assert any(s.startswith("gpu0: the counter's ticks spread") for s in often.meta["warnings"])


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_the_default_sampler_follows_the_grid_and_stamps_every_tick(gemm, mode):
    # ~5 s idle, then ~3 s of steady GEMMs: the default sampler (sampler=grid) finds the counter's
    # grid, then polls a few times a tick (a ~3-ms call and a 1-ms pause from 3-5 ms before each
    # expected tick; cheap calls give more), and every tick of its life is stamped, on the grid
    source = NVMLPowerSource(name="nvml", gpus="0", mode=mode)
    n = int(3.0 / 0.00167)
    with ef.measure(power=[source], sync=torch.cuda.synchronize) as m:
        with m.window("idle"):
            time.sleep(5.0)
        with m.window("load", iterations=n):
            for _ in range(n):
                gemm()
    info = m.result.meta["sources"][0]["info"]
    cost = info["acquisition"]
    loop = cost["loops"]["nvml-gpu0"]
    ticks = m.result.samples[m.result.samples["channel"] == "gpu0"]["time_s"].to_numpy()
    print(
        f"\n{mode}: sampler {100 * cost['cpu_share']:.2f} % of a core over {cost['wall_s']:.1f} s, "
        f"{loop['polls_per_tick_on_grid']} polls a tick on the grid ({loop['polls_per_tick']} in all), "
        f"brackets {cost['tick_brackets_s']['gpu0']}, calls {1e3 * loop['busy_s'] / loop['polls']:.3f} ms each, "
        f"{loop['cpu_s'] / loop['polls'] * 1e3:.3f} ms CPU each; lead {loop['lead_s']}, early {loop['early']}, "
        f"wide {loop['wide']}; slow loop {cost['loops']['nvml-slow']}"
    )
    assert info["sampler"] == "grid" and loop["following_grid"] and loop["grid_lost"] == 0
    assert loop["polls_per_tick_on_grid"] <= 12
    assert loop["ticks"] == ticks.size  # every change seen is a stamped tick
    assert abs(ticks.size - cost["wall_s"] / 0.1) <= 3  # and every update of the counter was seen
    # no tick came before its guard opened (the host woke the sampler on time); a few may be seen
    # by a field query that blocked 10-30 ms under load (their stamps within ~15 ms, judged below)
    assert loop["early"] == 0 and loop["wide"] <= 3
    grid = TickGrid.check(ticks)
    assert grid is not None and grid.regular and not grid.off.any()
    flags = ";".join(by_channel(m.result, "gpu0")["flags"])
    assert TICK_OFF_GRID not in flags and IRREGULAR_TICKS not in flags
