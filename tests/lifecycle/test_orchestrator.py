"""The run lifecycle with real built-in plugins (replay, cpu-matmul) and sources that fail."""

import io
import json
import logging
import math
import os
import signal
import time

import pandas as pd
import pytest

import energyframe as ef
from energyframe.errors import PowerSourceError, RunInterrupted, UsageError, WorkloadError
from energyframe.lifecycle import measurement, phases, planning, precision, window_edges
from energyframe.lifecycle.config import CALIBRATION_MARGIN, RunSettings
from energyframe.lifecycle.phases import SHORT_REDO
from energyframe.lifecycle.planning import calibrate
from energyframe.plugin import Phase
from energyframe.results.result import RunResult
from tests.fakes import ListWorkload, SignalSource, StepClock, busy_phase, spin

FAST = RunSettings(trials=3, min_window_s=0.15, warmup_s=0.02)


@pytest.fixture
def step_clock(monkeypatch):
    """The orchestrator's clock (calibration, warm-up, the phases' timings, the precision's
    waits) moves only when a step advances it."""
    clock = StepClock()
    for module in (planning, phases, precision):
        monkeypatch.setattr(module, "time", clock.module())
    return clock


def test_constant_power_gives_exact_window_energy(power_csv, tmp_path):
    csv = power_csv(100.0, period_s=0.05, duration_s=1.0)
    result = ef.run(
        "cpu-matmul:sizes=32,64",
        power=[f"replay:file={csv},loop=true"],
        reporters=[],
        out=tmp_path / "run",
        settings=FAST,
    )
    assert result.complete
    w = result.windows
    assert list(w["phase"].unique()) == ["matmul-32", "matmul-64"]
    assert len(w) == 6 and (w["channel"] == "replay").all()
    for _, row in w.iterrows():
        assert row["energy_j"] == pytest.approx(100.0 * row["duration_s"], rel=1e-9)
        assert row["mean_power_w"] == pytest.approx(100.0, rel=1e-9)
        assert row["energy_per_iter_j"] == pytest.approx(row["energy_j"] / row["iterations"])
        assert row["end_s"] - row["start_s"] == pytest.approx(row["duration_s"], abs=1e-5)
        assert row["flags"] == ""
    s = result.summary("matmul-64", "replay")
    assert s.trials == 3 and s.energy_per_iter_j.n == 3
    assert s.mean_power_w.median == pytest.approx(100.0)
    assert s.work == {"flop": 2.0 * 64**3}


def test_saved_run_reads_back_identically(power_csv, tmp_path):
    csv = power_csv(lambda t: 50 + 100 * t, period_s=0.02, duration_s=5.0)
    out = tmp_path / "run"
    result = ef.run("cpu-matmul:sizes=16", power=[f"replay:file={csv}"], reporters=[], out=out, settings=FAST)
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "samples.parquet", "windows.csv"]
    loaded = RunResult.load(out)
    assert loaded.status == "complete"
    pd.testing.assert_frame_equal(
        loaded.windows.reset_index(drop=True), result.windows.reset_index(drop=True), check_dtype=False
    )
    assert len(loaded.samples) == len(result.samples) > 0
    assert set(loaded.samples.columns) == {"source", "channel", "time_s", "value", "unit"}
    assert loaded.summaries == result.summaries
    meta = json.loads((out / "run.json").read_text())
    assert meta["format_version"] == 2
    assert meta["workload"]["name"] == "cpu-matmul"
    assert meta["sources"][0]["channels"][0]["quantity"] == "power"
    assert meta["versions"]["python"]
    assert meta["clock"]["anchor_wall_s"] > 1.6e9


def test_idle_baseline_gives_dynamic_energy(tmp_path):
    source = SignalSource(name="gpu", watts=80.0)
    result = ef.run(
        ListWorkload([busy_phase()]),
        power=[source],
        reporters=[],
        settings=RunSettings(trials=2, min_window_s=0.1, idle_s=0.3, warmup_s=0.0),
    )
    idle = result.meta["idle_baseline"]["gpu"]
    assert idle["power_w"] == pytest.approx(80.0, rel=1e-6)
    assert idle["duration_s"] >= 0.3
    row = result.windows[result.windows["channel"] == "gpu"].iloc[0]
    assert row["dynamic_energy_j"] == pytest.approx(0.0, abs=1e-6 * row["energy_j"])
    assert result.summary("busy", "gpu").dynamic_energy_per_iter_j is not None


def test_wall_and_monotonic_channels_agree(tmp_path):
    # the same constant power stamped on two clocks integrates to the same energy
    source = SignalSource(name="gpu", watts=250.0)
    result = ef.run(ListWorkload([busy_phase()]), power=[source], reporters=[], settings=FAST)
    w = result.windows
    counter = w[w["channel"] == "gpu"]["energy_j"].to_numpy()
    power = w[w["channel"] == "gpu.power"]["energy_j"].to_numpy()
    assert counter == pytest.approx(power, rel=1e-3)
    assert "gpu.clock" not in set(w["channel"])  # state channels are not integrated


def test_source_annotations_become_columns_and_flags():
    result = ef.run(ListWorkload([busy_phase()]), power=[SignalSource(name="gpu")], reporters=[], settings=FAST)
    rows = result.windows[result.windows["channel"] == "gpu"]
    assert (rows["sm_clock_mhz"] == 1980.0).all()
    assert result.meta["primary_channels"] == ["gpu"]


def test_timing_only_run_has_one_row_per_window():
    result = ef.run(ListWorkload([busy_phase(seconds=0.001)]), power="none", reporters=[], settings=FAST)
    assert result.complete
    w = result.windows
    assert list(w["channel"]) == ["", "", ""]
    assert w["energy_j"].isna().all()
    assert (w["time_per_iter_s"] == w["duration_s"] / w["iterations"]).all()
    assert (w["time_per_iter_s"] >= 0.001).all()  # a 1-ms busy step is never faster, however loaded
    s = result.summary("busy")
    assert s.trials == 3 and s.time_per_iter_s.n == 3
    assert s.time_per_iter_s.median == pytest.approx(w["time_per_iter_s"].median(), rel=1e-12)
    assert math.isnan(s.energy_per_iter_j.median)
    assert "(timing only)" in result.table()


def test_fixed_iterations_warmup_and_trials_of_a_phase_are_respected():
    calls = []
    phase = Phase("fixed", step=lambda: calls.append(1), iterations=7, warmup=2, trials=4)
    result = ef.run(ListWorkload([phase]), power="none", reporters=[], settings=FAST)
    assert list(result.windows["iterations"]) == [7, 7, 7, 7]
    assert len(calls) == 2 + 4 * 7


def test_phase_setup_and_teardown_and_sync_are_called_in_order():
    events = []
    phase = Phase(
        "p",
        step=lambda: events.append("step"),
        sync=lambda: events.append("sync"),
        iterations=2,
        warmup=0,
        trials=1,
        setup=lambda: events.append("setup"),
        teardown=lambda: events.append("teardown"),
    )
    ef.run(ListWorkload([phase]), power="none", reporters=[], settings=FAST)
    assert events == ["setup", "sync", "step", "step", "sync", "teardown"]


def test_calibration_reaches_the_minimum_window(step_clock):
    syncs = []
    phase = Phase("p", step=lambda: step_clock.advance(0.0002), sync=lambda: syncs.append(step_clock.now_s))
    n, per_iter = calibrate(phase, 0.2, 10**9)
    assert per_iter == pytest.approx(0.0002, rel=1e-9)
    target = CALIBRATION_MARGIN * 0.2  # the window is aimed 8 % above the minimum
    assert n * per_iter >= target and (n - 1) * per_iter < target  # and no further
    assert len(syncs) >= 4 and len(syncs) % 2 == 0  # each timed batch is synced at both ends


def test_calibration_respects_the_iteration_cap(step_clock):
    n, _ = calibrate(Phase("p", step=lambda: step_clock.advance(0.0001)), 10.0, 50)
    assert n == 50


def test_source_failing_mid_run_stops_the_run_and_keeps_samples(tmp_path):
    out = tmp_path / "run"
    source = SignalSource(name="gpu", fail_after_s=1.2)
    slow = busy_phase(seconds=0.01)
    with pytest.raises(PowerSourceError) as e:
        ef.run(
            ListWorkload([slow]),
            power=[source],
            reporters=[],
            out=out,
            settings=RunSettings(trials=100, min_window_s=0.1, warmup_s=0.0),
        )
    assert "power source 'gpu' failed: meter unplugged (test)" in str(e.value)
    result = e.value.result
    assert result.status == "incomplete"
    assert source.stopped
    saved = RunResult.load(out)
    assert saved.status == "incomplete" and "meter unplugged" in saved.reason
    assert len(saved.samples) > 50  # what was acquired before the failure is kept
    assert 0 < len(saved.windows) < 200  # windows measured before the failure are kept


def test_source_failing_to_start_raises_and_starts_nothing(tmp_path):
    ok = SignalSource(name="ok")
    bad = SignalSource(name="bad", fail_on_start=True)
    with pytest.raises(PowerSourceError, match="no such meter"):
        ef.run(ListWorkload([busy_phase()]), power=[ok, bad], reporters=[], settings=FAST)
    assert ok.stopped  # the source started before the failing one was stopped again


def test_workload_failure_is_reported_and_teardown_runs(tmp_path):
    workload = ListWorkload([busy_phase()], fail_in_setup=True)
    with pytest.raises(WorkloadError, match="RuntimeError: no GPU here"):
        ef.run(workload, power=[SignalSource(name="gpu")], reporters=[], out=tmp_path / "r", settings=FAST)
    assert workload.torn_down
    assert RunResult.load(tmp_path / "r").reason == "RuntimeError: no GPU here (test)"


def test_channel_going_silent_is_flagged_not_guessed():
    # the source goes quiet as the last two windows open (an event, not a time, so that a loaded
    # machine moves nothing): those windows are uncovered, never read from the last sample
    source = SignalSource(name="gpu")
    with ef.measure(power=[source], sync=None) as m:
        for trial in range(8):
            if trial == 6:
                source.options["silent_after_s"] = 0.0  # from its next poll on
            with m.window("busy"):
                time.sleep(0.1)
    windows = m.result.windows[m.result.windows["channel"] == "gpu"]
    assert windows["energy_j"].iloc[:5].notna().all()  # before the silence: read as usual
    late = windows.iloc[-1]
    assert "uncovered" in late["flags"] and math.isnan(late["energy_j"])
    assert any("delivered no sample after the last window" in w for w in m.result.warnings)


def test_runs_sets_a_floor_on_the_timed_iterations(step_clock):
    def step():  # 0.2 ms on the orchestrator's clock, and at least that in real time
        step_clock.advance(0.0002)
        spin(0.0002)

    config = RunSettings(trials=3, min_window_s=0.05, warmup_s=0.0)
    calibrated, _ = calibrate(Phase("busy", step=step), 0.05, 10**9)
    assert calibrated < 1000
    # 3000 runs over 3 trials need 1000 per window, more than the calibrated window holds
    result = ef.run(
        ListWorkload([Phase("busy", step=step)]),
        power="none",
        reporters=[],
        settings=RunSettings(**{**vars(config), "runs": 3000}),
    )
    assert list(result.windows["iterations"]) == [1000, 1000, 1000]
    short = ef.run(
        ListWorkload([Phase("busy", step=step)]),
        power="none",
        reporters=[],
        settings=RunSettings(**{**vars(config), "runs": 3}),
    )
    assert list(short.windows["iterations"]) == [calibrated] * 3  # the calibrated window still applies


def test_bad_config_is_rejected():
    with pytest.raises(UsageError):
        RunSettings(trials=0)
    with pytest.raises(UsageError):
        RunSettings(cooldown_s=-1)
    with pytest.raises(UsageError):
        RunSettings(runs=0)


def test_existing_run_directory_is_not_overwritten(tmp_path, power_csv):
    out = tmp_path / "run"
    ef.run(ListWorkload([busy_phase()]), power="none", reporters=[], out=out, settings=FAST)
    with pytest.raises(UsageError, match="already holds a run"):
        ef.run(ListWorkload([busy_phase()]), power="none", reporters=[], out=out, settings=FAST)


def test_a_window_that_comes_out_short_is_measured_again(step_clock, monkeypatch, caplog):
    # calibration sees 2 ms per step; from the first window on a step takes 0.1 ms (as after a
    # clock boost), so the first window comes out far short of the minimum. The windows are timed
    # on the same step clock: their lengths are exact, whatever the load
    monkeypatch.setattr(window_edges, "time", step_clock.module())
    step = {"s": 0.002}
    begin = measurement.Measurement.begin_window

    def boosted(self, *args, **kwargs):
        step["s"] = 0.0001
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(measurement.Measurement, "begin_window", boosted)
    phase = Phase("speeds-up", step=lambda: step_clock.advance(step["s"]), warmup=0)
    calibrated, _ = calibrate(phase, 0.2, 10**9)
    with caplog.at_level(logging.INFO, logger="energyframe"):
        result = ef.run(
            ListWorkload([phase]), power="none", reporters=[], settings=RunSettings(trials=3, min_window_s=0.2)
        )
    # the first window, 20 times shorter than calibrated, once; the next one long enough
    assert caplog.text.count("was short of 0.2 s; measuring again") == 1
    w = result.windows
    assert list(w["trial"]) == [0, 1, 2]  # the short window was discarded, not kept
    assert (w["iterations"] > calibrated).all()  # and measured again, longer
    assert (w["duration_s"] >= SHORT_REDO * 0.2).all()
    assert w["duration_s"].to_numpy() == pytest.approx(w["iterations"].to_numpy() * 0.0001)


class _SigtermOnWrite(io.StringIO):
    """A log stream that receives SIGTERM while a progress line is being written."""

    def write(self, text):
        if "trial 1/" in text:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().write(text)


def test_sigterm_while_a_progress_line_is_written_stops_the_run(tmp_path, monkeypatch):
    logger = logging.getLogger("energyframe")
    handler = logging.StreamHandler(_SigtermOnWrite())
    monkeypatch.setattr(logger, "level", logging.INFO)
    monkeypatch.setattr(logging, "raiseExceptions", False)  # keep "--- Logging error ---" quiet
    logger.addHandler(handler)
    try:
        with pytest.raises(RunInterrupted, match="terminated by SIGTERM"):
            ef.run(ListWorkload([busy_phase()]), power="none", reporters=[], out=tmp_path / "r", settings=FAST)
    finally:
        logger.removeHandler(handler)
    assert RunResult.load(tmp_path / "r").reason == "terminated by SIGTERM"


def test_run_json_says_where_the_time_went(tmp_path):
    ef.run(ListWorkload([busy_phase("a"), busy_phase("b")]), power="none", reporters=[], out=tmp_path / "r",
           settings=RunSettings(trials=2, min_window_s=0.05, warmup_s=0.0))
    timings = json.loads((tmp_path / "r" / "run.json").read_text())["timings_s"]
    spans = ("sources_start", "setup", "warmup", "calibration", "windows", "between_windows", "stop_sources",
             "integrate", "save")
    assert set(spans) <= set(timings)
    assert timings["windows"] > 0 and timings["calibration"] > 0
    # the spans and "other" make up the run; the process had started before it
    assert sum(timings[k] for k in (*spans, "phase_setup", "teardown", "guard", "other") if k in timings) == (
        pytest.approx(timings["run"], rel=1e-6)
    )
    assert timings["process"] is None or timings["process"] >= timings["run"]


def test_a_window_that_runs_slow_does_not_grow_the_next_ones(step_clock, monkeypatch):
    # calibration sees 1 ms per step; from the second window on a step takes 50 ms (a machine
    # that became loaded): the next windows run fewer steps, back to the plan, and the run says so
    monkeypatch.setattr(window_edges, "time", step_clock.module())
    step = {"s": 0.001, "windows": 0}
    begin = measurement.Measurement.begin_window

    def slowing(self, *args, **kwargs):
        step["windows"] += 1
        if step["windows"] == 2:
            step["s"] = 0.05
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(measurement.Measurement, "begin_window", slowing)
    phase = Phase("slows-down", step=lambda: step_clock.advance(step["s"]), warmup=0)
    result = ef.run(ListWorkload([phase]), power="none", reporters=[], settings=RunSettings(trials=4, min_window_s=0.2))
    w = result.windows
    iterations = list(w["iterations"])
    assert iterations[0] == iterations[1] > 100  # calibrated at 1 ms; the second ran at 50 ms
    assert w["duration_s"].iloc[1] > 4 * 0.2  # 50 times the plan
    assert iterations[2] == iterations[3] < iterations[1] / 10  # back near the plan at 50 ms a step
    assert w["duration_s"].iloc[2:].to_numpy() == pytest.approx(w["iterations"].iloc[2:].to_numpy() * 0.05)
    assert all(d < 4 * 0.2 * CALIBRATION_MARGIN for d in w["duration_s"].iloc[2:])
    assert sum("times the 0.2 s planned" in x for x in result.warnings) == 1


def test_a_window_measured_again_grows_at_most_25_fold(step_clock, monkeypatch):
    # a first window that reads almost nothing (steps of 0.1 us after calibration at 2 ms) would ask
    # for 20000 times the steps; it gets 25 times, and the run says why
    monkeypatch.setattr(window_edges, "time", step_clock.module())
    step = {"s": 0.002}
    begin = measurement.Measurement.begin_window
    seen = []

    def boosted(self, *args, **kwargs):
        seen.append(args[1] if len(args) > 1 else kwargs.get("iterations"))
        step["s"] = 1e-7 if len(seen) == 1 else 0.002
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(measurement.Measurement, "begin_window", boosted)
    phase = Phase("boost-once", step=lambda: step_clock.advance(step["s"]), warmup=0)
    result = ef.run(ListWorkload([phase]), power="none", reporters=[], settings=RunSettings(trials=2, min_window_s=0.2))
    assert seen[1] == phases.REDO_GROWTH_MAX * seen[0]
    assert any("25 times as many" in x and "uneven" in x for x in result.warnings)
