"""Readings that cannot be physical, sources that stall, and sources that never drain: none of
them may turn into a confident number or a hang."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

import energyframe as ef
from energyframe.core.clock import ClockModel
from energyframe.errors import PowerSourceError
from energyframe.lifecycle.recorder import Recorder, stall_after_s
from energyframe.model import Channel, ClockBase, Quantity, Sample, Scope
from energyframe.plugin import PowerSource
from tests.fakes import ListWorkload, ScriptedSource, busy_phase

FAST = ef.RunSettings(trials=3, min_window_s=0.2, warmup_s=0.0)


@pytest.mark.parametrize("bad,flag,reason", [(-100.0, "negative_power", "negative"),
                                              (math.nan, "invalid_reading", "not_finite"),
                                              (math.inf, "invalid_reading", "not_finite"),
                                              (4294967.295, "invalid_reading", "implausible")])
def test_impossible_readings_are_flagged_counted_and_never_integrated(tmp_path, bad, flag, reason):
    def value(t):  # 100 W, with a burst of impossible readings every quarter second
        return bad if (t % 0.25) < 0.03 else 100.0

    source = ScriptedSource(value)
    result = ef.run(ListWorkload([busy_phase(seconds=0.002)]), power=[source], reporters=[], out=tmp_path / "r",
                    settings=ef.RunSettings(trials=30, min_window_s=0.05, warmup_s=0.0))
    windows = result.windows
    flagged = windows[windows["flags"].str.contains(flag)]
    assert len(flagged) >= 1
    # every window's power is the 100 W around the bad readings, never pulled towards them
    assert np.allclose(windows["mean_power_w"].dropna(), 100.0)
    counts = result.meta["rejected_samples"]["scripted"]
    assert counts[reason] >= 3
    raw = ef.RunResult.load(tmp_path / "r").samples
    kept = raw["value"].to_numpy(float)
    assert np.isnan(kept).any() if math.isnan(bad) else (kept == bad).sum() == counts[reason]


class FrozenSource(PowerSource):
    """Delivers while ``alive`` is set, then stays silent without failing (a stalled child)."""

    DESCRIPTION = "test"

    def __init__(self, now):
        super().__init__("frozen")
        self.now = now
        self.alive = True

    def start(self, context):
        return [Channel("frozen", Quantity.POWER, Scope.GPU, 0.1, ClockBase.MONOTONIC)]

    def read(self):
        return [Sample("frozen", self.now(), 50.0)] if self.alive else []

    def stop(self):
        pass


def test_a_silent_channel_is_a_stall_after_a_few_update_periods():
    clock = {"t": 1000.0}
    now = lambda: clock["t"]  # noqa: E731
    source = FrozenSource(now)
    recorder = Recorder([source], ClockModel(), now=now)
    recorder.start()
    recorder._stop.set()  # drive the drain by hand: the test owns time
    limit = stall_after_s(recorder.channels["frozen"])
    for _ in range(3):
        clock["t"] += 1.0
        recorder.drain()
        recorder.watch()
    source.alive = False
    clock["t"] += 1.0
    recorder.drain()
    recorder.watch()
    while clock["t"] - 1003.0 <= limit:
        assert recorder.failure is None
        clock["t"] += 1.0
        recorder.drain()
        recorder.watch()
    assert isinstance(recorder.failure, PowerSourceError)
    assert str(recorder.failure).startswith("channel 'frozen' delivered no sample for ")
    assert "the source stalled" in str(recorder.failure)
    recorder.stop()


def test_a_drain_that_was_itself_held_up_proves_nothing():
    clock = {"t": 0.0}
    now = lambda: clock["t"]  # noqa: E731
    source = FrozenSource(now)
    recorder = Recorder([source], ClockModel(), now=now)
    recorder.start()
    recorder._stop.set()
    recorder.drain()
    recorder.watch()
    source.alive = False
    clock["t"] += 60.0  # the whole process was busy for a minute: the drain thread too
    recorder.drain()
    recorder.watch()
    assert recorder.failure is None
    recorder.stop()


class StallingSource(ScriptedSource):
    """Delivers for half a second, then its thread lives on, silent (a child that hangs)."""

    def _loop(self):
        end = time.monotonic() + 0.5
        while not self._stop.wait(0.01):
            if time.monotonic() < end:
                with self._lock:
                    self._pending.append(Sample(self.name, time.monotonic(), 100.0))


@pytest.mark.slow
def test_a_stalled_source_ends_the_run_incomplete(tmp_path):
    with pytest.raises(ef.PowerSourceError, match="delivered no sample for .* the source stalled"):
        ef.run(ListWorkload([busy_phase()]), power=[StallingSource(lambda t: 100.0)], reporters=[],
               out=tmp_path / "r", settings=ef.RunSettings(trials=20, min_window_s=1.0, warmup_s=0.0))
    result = ef.RunResult.load(tmp_path / "r")
    assert result.status == "incomplete" and "the source stalled" in result.reason


class NeverEmpty(PowerSource):
    """``read()`` always has a fresh reading: a source written against the old contract
    (called until empty) would hold the run's start forever."""

    DESCRIPTION = "test"

    def start(self, context):
        return [Channel("busy", Quantity.POWER, Scope.GPU, 0.01, ClockBase.MONOTONIC)]

    def read(self):
        return [Sample("busy", time.monotonic(), 10.0)]

    def stop(self):
        pass


def test_a_source_that_never_drains_cannot_hang_the_run():
    done = threading.Event()
    outcome = {}

    def measure():
        with ef.measure(power=[NeverEmpty()]) as m:
            with m.window("w"):
                time.sleep(0.05)
        outcome["result"] = m.result
        done.set()

    thread = threading.Thread(target=measure, daemon=True)
    thread.start()
    assert done.wait(timeout=120), "ef.measure hung on a source whose read() never returns []"
    assert outcome["result"].windows["energy_j"].notna().all()


def test_one_meter_in_two_power_specs_is_refused_before_anything_starts(tmp_path):
    from click.testing import CliRunner

    from energyframe.cli import main

    port = tmp_path / "ttyUSB0"
    port.write_text("")
    alias = tmp_path / "meter"
    alias.symlink_to(port)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--power", f"wattsup:ports={port}", "--power", f"wattsup:ports={alias}",
                                       "--workload", "sleep", "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: serial:{port} is claimed by power source 'wattsup' and by 'wattsup2': one device measured "
        "twice would be counted twice"
    )
    assert not out.exists()


def test_rejected_readings_move_with_their_channel_to_the_run_timeline():
    # a period-end channel's readings move back by half the period they average, a wall meter's by
    # its lag: a rejected reading must move the same way to flag the window it fell in
    from energyframe.core.clock import ChannelTimeMap
    from energyframe.core.pipeline import placed_rejections

    times = np.array([10.0, 20.0])
    placed = placed_rejections(
        {"late": {"negative": times}, "exact": {"not_finite": times}},
        {"late": ChannelTimeMap(lag_s=0.5)},
    )
    assert placed["late"]["negative"].tolist() == [9.5, 19.5]
    assert placed["exact"]["not_finite"].tolist() == [10.0, 20.0]
