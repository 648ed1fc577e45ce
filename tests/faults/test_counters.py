"""Energy counters that misbehave: a reset a reader counted as a wraparound, a counter frozen under
load. Neither may become a confident number: the windows are NaN and flagged, and a counter whose
samples keep coming but never change stops the run as a stall would."""

from __future__ import annotations

import math
import time

import pytest

import energyframe as ef
from energyframe.core.clock import ClockModel
from energyframe.errors import PowerSourceError
from energyframe.lifecycle.recorder import Recorder
from energyframe.model import Channel, ClockBase, Quantity, Sample, Scope
from energyframe.plugin import PowerSource
from tests.fakes import ListWorkload, ScriptedSource, busy_phase


def counter_source(energy, name="cpu0"):
    """A CPU energy counter read every 10 ms (``energy(t)``: its value t s after the start)."""
    return ScriptedSource(energy, name, Quantity.ENERGY, Scope.CPU)


def measure(source, pause_s: float = 0.0):
    """Three windows of 0.3 s, ``pause_s`` apart."""
    with ef.measure(power=[source], sync=None) as m:
        for name in ("a", "b", "c"):
            with m.window(name):
                time.sleep(0.3)
            time.sleep(pause_s)
    return m.result.windows.set_index("phase")


def test_a_reset_counted_as_a_wraparound_is_flagged_not_257_kilojoules():
    # the reader added the 262-kJ wrap range when the counter restarted from 0, 0.45 s in (in b)
    source = counter_source(lambda t: 100.0 * t + (262_143.0 if t > 0.45 else 0.0))
    windows = measure(source)
    assert windows.loc["a", "mean_power_w"] == pytest.approx(100.0, rel=0.05)
    assert math.isnan(windows.loc["b", "energy_j"]) and "counter_reset" in windows.loc["b", "flags"]
    assert windows.loc["c", "mean_power_w"] == pytest.approx(100.0, rel=0.05)


def test_a_counter_frozen_under_load_is_stuck_not_0_joules():
    # energy_uj stops for the whole of window b and a while around it, then counts on
    state = {"lost_s": 0.0, "since": None}

    def energy(t):
        if state["since"] is not None:
            t = state["since"]
        return 100.0 * (t - state["lost_s"])

    source = counter_source(energy)
    with ef.measure(power=[source], sync=None) as m:
        with m.window("a"):
            time.sleep(0.3)
        time.sleep(0.1)
        state["since"] = time.monotonic() - source.t0
        time.sleep(0.1)
        with m.window("b"):
            time.sleep(0.3)
        time.sleep(0.1)
        state["lost_s"] += time.monotonic() - source.t0 - state["since"]
        state["since"] = None
        time.sleep(0.1)
        with m.window("c"):
            time.sleep(0.3)
    windows = m.result.windows.set_index("phase")
    assert windows.loc["a", "mean_power_w"] == pytest.approx(100.0, rel=0.05)
    assert math.isnan(windows.loc["b", "energy_j"]) and "stuck_counter" in windows.loc["b", "flags"]
    assert windows.loc["c", "mean_power_w"] == pytest.approx(100.0, rel=0.05)


def test_the_watchdog_stops_a_run_whose_counter_is_stuck():
    clock = {"t": 1000.0}
    value = {"j": 0.0}

    class Frozen(PowerSource):
        DESCRIPTION = "test"

        def start(self, context):
            return [Channel("cpu0", Quantity.ENERGY, Scope.CPU, 0.01, ClockBase.MONOTONIC)]

        def read(self):  # a fresh sample at every drain, the same value once it froze
            return [Sample("cpu0", clock["t"], value["j"])]

        def stop(self):
            pass

    recorder = Recorder([Frozen("frozen")], ClockModel(), now=lambda: clock["t"])
    recorder.start()
    recorder._stop.set()  # the test drives the drain, and owns time
    for _ in range(5):
        clock["t"] += 1.0
        value["j"] += 100.0
        recorder.drain()
        recorder.watch()
    assert recorder.failure is None
    for _ in range(3):  # frozen: samples keep arriving, the value never changes
        clock["t"] += 1.0
        recorder.drain()
        recorder.watch()
    assert recorder.failure is None  # 3 s: the stall limit (max(5 periods, 3 s)) not passed yet
    clock["t"] += 1.0
    recorder.drain()
    recorder.watch()
    assert isinstance(recorder.failure, PowerSourceError)
    assert str(recorder.failure) == (
        "channel 'cpu0' is a counter whose samples keep arriving but has not changed for 4.0 s (it updates every "
        "0.01 s): the counter is stuck, and energy after its last change is unknown"
    )
    recorder.stop()


def test_a_run_with_a_counter_that_freezes_ends_incomplete(tmp_path):
    source = counter_source(lambda t: 100.0 * min(t, 0.5))
    with pytest.raises(PowerSourceError, match="the counter is stuck"):
        ef.run(ListWorkload([busy_phase(seconds=0.01)]), power=[source], reporters=[], out=tmp_path / "r",
               settings=ef.RunSettings(trials=60, min_window_s=0.1, warmup_s=0.0))
    result = ef.RunResult.load(tmp_path / "r")
    assert result.status == "incomplete" and "the counter is stuck" in result.reason
    assert not (result.windows["energy_j"] == 0).any()  # never a confident 0 J
