"""``ef.measure``: windows around the user's own code."""

import time

import pytest

import energyframe as ef
from energyframe.errors import PowerSourceError, UsageError
from energyframe.results.result import RunResult
from tests.fakes import SignalSource


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_named_nested_windows(tmp_path):
    with ef.measure(power=[SignalSource(name="gpu", watts=200.0)], out=tmp_path / "m") as m:
        with m.window("epoch"):
            for _ in range(3):
                with m.window("step", iterations=10) as w:
                    spin(0.05)
                    w.iterations = 20  # known only at the end
    result = m.result
    w = result.windows[result.windows["channel"] == "gpu"]
    steps = w[w["phase"] == "step"]
    assert list(steps["trial"]) == [0, 1, 2]
    assert list(steps["iterations"]) == [20, 20, 20]
    epoch = w[w["phase"] == "epoch"].iloc[0]
    assert epoch["start_s"] <= steps["start_s"].min() and epoch["end_s"] >= steps["end_s"].max()
    assert epoch["energy_j"] == pytest.approx(200.0 * epoch["duration_s"], rel=1e-3)
    assert result.summary("step", "gpu").trials == 3
    table = result.table()
    assert "step" in table and "epoch" in table and "gpu" in table
    assert RunResult.load(tmp_path / "m").summaries == result.summaries


def test_begin_and_end_window_without_a_with_block():
    with ef.measure(power="none") as m:
        m.begin_window("a")
        m.begin_window("b", iterations=5)
        spin(0.01)
        m.end_window("a")
        m.end_window("b")
        with pytest.raises(UsageError, match="no open window named 'c'"):
            m.end_window("c")
    assert sorted(m.result.windows["phase"]) == ["a", "b"]


def test_custom_sync_is_called_at_both_edges():
    calls = []
    with ef.measure(power="none", sync=lambda: calls.append(time.monotonic())) as m:
        with m.window("w"):
            spin(0.01)
    record = m.records[0]
    assert len(calls) == 2
    assert calls[0] <= record.start_s and calls[1] <= record.end_s


def test_a_window_whose_code_raises_is_dropped_and_the_run_is_incomplete():
    with pytest.raises(ZeroDivisionError):
        with ef.measure(power="none") as m:
            with m.window("ok"):
                pass
            with m.window("bad"):
                raise ZeroDivisionError("division by zero")
    assert m.result.status == "incomplete"
    assert m.result.reason == "ZeroDivisionError: division by zero"
    assert list(m.result.windows["phase"]) == ["ok"]


def test_result_is_not_available_while_running():
    with ef.measure(power="none") as m:
        with pytest.raises(UsageError, match="still running"):
            m.result  # noqa: B018


def test_failed_source_surfaces_at_the_next_window_close():
    source = SignalSource(name="gpu", fail_after_s=0.3)
    with pytest.raises(PowerSourceError, match="meter unplugged"):
        with ef.measure(power=[source]) as m:
            for _ in range(50):
                with m.window("w"):
                    time.sleep(0.1)
    assert m.result.status == "incomplete"
    assert "power source 'gpu' failed" in m.result.reason


def test_idle_baseline_from_the_api():
    with ef.measure(power=[SignalSource(name="gpu", watts=60.0)], idle_s=0.2) as m:
        with m.window("w"):
            spin(0.05)
    assert m.result.meta["idle_baseline"]["gpu"]["power_w"] == pytest.approx(60.0, rel=1e-6)


def test_auto_detect_without_hardware_is_timing_only():
    with ef.measure() as m:
        with m.window("w"):
            pass
    assert m.sources == []
    assert m.result.meta["notes"][0] == "power sources auto-detected: none (timing only)"


def test_a_run_writes_run_json_once_after_its_claim(tmp_path, monkeypatch):
    """One writer: the claim creates run.json (saying "running"); the journals hold what the
    run records while it goes; run.json is written once more, last, when the run is saved."""
    from energyframe.results import store

    writes = []
    atomic = store._atomic_write

    def counting(path, write):
        writes.append(path.name)
        return atomic(path, write)

    monkeypatch.setattr(store, "_atomic_write", counting)
    out = tmp_path / "run"
    with ef.measure(power=[SignalSource(name="gpu", watts=100.0)], out=out, sync=None) as m:
        claimed = (out / "run.json").read_text()
        assert '"status": "incomplete"' in claimed and "running (pid" in claimed
        assert (out / "sources.partial.json").exists()  # the channels, for rebuilding a dead run
        for _ in range(2):
            with m.window("step"):
                time.sleep(0.02)
    assert writes.count("run.json") == 1
    assert writes[-1] == "run.json"  # last: a run.json that says complete means every file is there
    assert not (out / "sources.partial.json").exists()
    assert RunResult.load(out).status == "complete"


def test_each_window_records_whether_the_device_was_synced_as_it_opened(tmp_path):
    from energyframe.results.load import journal_records
    from energyframe.results.store import WINDOWS_PARTIAL

    out = tmp_path / "m"
    with ef.measure(power=[SignalSource(name="gpu", watts=200.0)], sync=None, out=out) as m:
        with m.window("plain"):
            spin(0.01)
        m.begin_window("synced", sync=lambda: None)  # a window's own sync
        spin(0.01)
        m.end_window("synced")
        # the journal a killed run is rebuilt from says it too
        journal = journal_records(out / WINDOWS_PARTIAL, m.clock)
    assert [(r.phase, r.synced) for r in m.records] == [("plain", False), ("synced", True)]
    assert [(r.phase, r.synced) for r in journal] == [("plain", False), ("synced", True)]
    with ef.measure(power="none") as auto:  # "auto": torch's CUDA where it is in use
        with auto.window("w"):
            spin(0.01)
    assert auto.records[0].synced


def test_a_journal_written_before_the_synced_column_reads_as_not_synced(tmp_path):
    from energyframe.core.clock import ClockModel, ClockPair
    from energyframe.results.load import journal_records

    path = tmp_path / "windows.partial.csv"
    path.write_text("event,phase,trial,start_s,end_s,iterations\nclosed,w,0,10.0,11.0,1\n")
    (record,) = journal_records(path, ClockModel(ClockPair(0.0, 0.0, 0.0)))
    assert record.phase == "w" and not record.synced


def test_a_window_seen_elsewhere_is_recorded_after_the_fact(tmp_path):
    # a server's request, say: its edges are this host's monotonic times, known only later
    with ef.measure(power=[SignalSource(name="gpu", watts=200.0)], out=tmp_path / "m", sync=None) as m:
        first = time.monotonic()
        spin(0.05)
        second = time.monotonic()
        spin(0.05)
        third = time.monotonic()
        m.record_window("request", first, second)
        m.record_window("request", first, third, iterations=2)  # overlapping is fine, ends in order
        with pytest.raises(UsageError, match="before the last recorded window"):
            m.record_window("request", first, second)
        with pytest.raises(UsageError, match="ahead of now"):
            m.record_window("request", first, time.monotonic() + 60.0)
        with pytest.raises(UsageError, match="not a finite span"):
            m.record_window("request", third, second)
    w = m.result.windows
    w = w[w["channel"] == "gpu"].sort_values("trial")
    assert list(w["iterations"]) == [1, 2]
    assert [r.synced for r in m.records] == [False, False]
    assert w["energy_j"].to_list() == pytest.approx([200.0 * (second - first), 200.0 * (third - first)], rel=1e-3)
    assert RunResult.load(tmp_path / "m").summary("request", "gpu").trials == 2
