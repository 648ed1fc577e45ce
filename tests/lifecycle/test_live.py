"""A window's energy the moment it is known: the handle, the non-blocking form, subscribers, and
the final run's agreement with the live numbers."""

import math
import threading
import time

import numpy as np
import pytest

import energyframe as ef
from energyframe.core.clock import ClockModel, ClockPair
from energyframe.core.samples import SampleSeries
from energyframe.core.windows import WindowRecord
from energyframe.errors import UsageError
from energyframe.lifecycle.assemble import Recording
from energyframe.lifecycle.live import LiveWindows
from energyframe.model import Channel, ClockBase, Quantity, Scope, Shape
from tests.fakes import SignalSource


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_the_handle_gives_the_energy_once_the_window_closes():
    with ef.measure(power=[SignalSource(name="gpu", watts=200.0)]) as m:
        with m.window("step", iterations=4) as w:
            with pytest.raises(UsageError, match="window 'step' is still open"):
                _ = w.energy_j
            spin(0.2)
        live = w.energy()
        assert live.channel == "gpu"
        assert live.energy_j == pytest.approx(200.0 * w.record.duration_s, rel=1e-3)
        assert w.energy_j == live.energy_j  # computed once
        assert w.energy(wait=False) is live
        assert live.estimator == "counter" and math.isfinite(live.bound_pct)
    final = m.result.windows
    row = final[(final["phase"] == "step") & (final["channel"] == "gpu")].iloc[0]
    assert row["energy_j"] == live.energy_j  # the final run gives the same number
    assert m.result.meta["live"] == {"windows": 1, "revised": []}


def test_subscribers_hear_every_window_in_order():
    heard = []
    with ef.measure(power=[SignalSource(name="gpu", watts=100.0)]) as m:
        m.on_window_energy(heard.append)
        records = []
        for _ in range(3):
            with m.window("step"):
                spin(0.05)
            records.append(m.records[-1])
        assert m.window_energy(records[-1]).record == records[-1]
    assert [h.record for h in heard] == records
    assert all(h.energy_j == pytest.approx(100.0 * h.record.duration_s, rel=1e-3) for h in heard)
    assert m.result.meta["live"]["windows"] == 3


def test_nothing_is_computed_live_unless_asked():
    with ef.measure(power=[SignalSource(name="gpu")]) as m:
        with m.window("step"):
            spin(0.02)
    assert "live" not in m.result.meta


def recording(ticks_s, counter_j, records=()):
    channels = {"gpu0": Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1, ClockBase.MONOTONIC)}
    return Recording(
        clock=ClockModel(ClockPair(1.79e9, 0.0, 0.0)),
        channels=channels,
        channel_source={"gpu0": "nvml"},
        series={"gpu0": SampleSeries(np.asarray(ticks_s, float), np.asarray(counter_j, float))},
        samples=None,
        records=list(records),
    )


def test_the_non_blocking_form_answers_none_until_samples_cover_the_window():
    gate = threading.Event()
    ticks = 0.1 * np.arange(40)

    def wait_for_samples(end_s):
        gate.wait()  # the samples past the window's end have not arrived yet
        return []

    live = LiveWindows(lambda since: recording(ticks, 500.0 * ticks), wait_for_samples, lambda: ["gpu0"], print)
    pending = live.submit(WindowRecord("w", 0, 1.05, 2.35))
    assert pending.result(wait=False) is None
    assert pending.result(timeout_s=0.05) is None  # still waiting for a sample past the end
    gate.set()
    value = pending.result()
    assert value.energy_j == pytest.approx(500.0 * 1.3)
    assert live.submit(WindowRecord("w", 0, 1.05, 2.35)) is pending  # asked twice, computed once
    live.stop()


def test_a_number_the_whole_run_changed_is_recorded_with_why():
    ticks = 0.1 * np.arange(40)
    counter = 500.0 * ticks
    live = LiveWindows(lambda since: recording(ticks[:26], counter[:26]), lambda end: [], lambda: ["gpu0"], print)
    record = WindowRecord("w", 0, 1.05, 2.35)
    first = live.submit(record).result()
    live.stop()
    final = first.rows.copy()
    final["energy_j"] = first.energy_j + 1.0
    revised = live.reconcile(final, lambda r: {"gpu0": 30})
    assert revised["windows"] == 1
    (change,) = revised["revised"]
    assert change["live_energy_j"] == first.energy_j and change["energy_j"] == first.energy_j + 1.0
    assert change["why"] == "samples of gpu0 arrived after the live number"


def test_a_live_window_reads_only_the_recent_readings_and_the_same_ones():
    """``series_since``: what ``series`` gives from that time on (readings out of order and of one
    instant included), read from the recent end of the store."""
    from energyframe.core.samplestore import SampleStore
    from energyframe.model import Sample

    store = SampleStore(ClockModel())
    store.register("src", [Channel("gpu0", Quantity.POWER, Scope.GPU, 0.02, ClockBase.MONOTONIC)])
    rng = np.random.default_rng(3)
    times = np.arange(0.0, 100.0, 0.02)
    times[500:510] = times[500:510][::-1]  # delivered out of order
    store.add("src", [Sample("gpu0", float(t), float(p)) for t, p in zip(times, 100 + rng.normal(0, 5, times.size))])
    store.add("src", [Sample("gpu0", 99.0, 300.0)])  # a second reading of one instant, a second late
    for since in (0.0, 9.99, 60.0, 99.0, 99.9, 200.0):
        whole = store.series("gpu0").between(since, math.inf)
        recent = store.series_since("gpu0", since)
        assert np.array_equal(recent.times_s, whole.times_s) and np.array_equal(recent.values, whole.values)


def test_a_live_window_ending_as_a_synced_window_opens_reads_its_end_as_the_final_run():
    # back-to-back synced windows whose samples place window 11's rise 25 ms early: window 11's
    # start takes that rise (edge.estimators.anchored_reading), so window 10's end gives it up; live, window
    # 11 is still open when window 10's number is computed
    from energyframe.core.pipeline import add_fused_power, integrate, place_samples
    from tests.core.test_edges import burst_readings

    ticks, counter, stamps, means, starts, _ = burst_readings(0.025)
    channels = {
        "gpu0": Channel(
            "gpu0", Quantity.ENERGY, Scope.GPU, 0.1, ClockBase.MONOTONIC,
            shaped_by=(Shape(channel="gpu0.power_samples", reading="period"),),
        ),
        "gpu0.power_samples": Channel(
            "gpu0.power_samples", Quantity.POWER, Scope.GPU, 0.02, ClockBase.MONOTONIC, primary=False
        ),
    }
    series = {"gpu0": SampleSeries(ticks, counter), "gpu0.power_samples": SampleSeries(stamps, means)}
    windows = [WindowRecord("period", k, starts[k], starts[k + 1], synced=True) for k in (10, 11)]

    def snapshot(records=(), opened_s=()):
        return Recording(
            clock=ClockModel(ClockPair(1.79e9, 0.0, 0.0)),
            channels=channels,
            channel_source={name: "nvml" for name in channels},
            series=series,
            samples=None,
            records=list(records),
            opened_s=list(opened_s),
        )

    def live_number(opened_s):
        live = LiveWindows(lambda since: snapshot(opened_s=opened_s), lambda end: [], lambda: ["gpu0"], print)
        value = live.submit(windows[0]).result()
        live.stop()
        return value

    value = live_number([starts[10], starts[11]])  # window 11 open: its start is known
    recording_ = snapshot(records=windows)
    placement = place_samples(recording_, None, print)
    recording_, placement, _ = add_fused_power(recording_, placement, print)
    rows, _ = integrate(recording_, placement, None)
    final = rows[(rows["trial"] == 10) & (rows["channel"] == "gpu0")].iloc[0]
    assert final["estimator"].endswith("anchored") and value.estimator == final["estimator"]
    assert value.energy_j == final["energy_j"]  # the same number, live and final
    # not knowing the open window, the live number would count its rise in window 10 too
    assert live_number([starts[10]]).energy_j > value.energy_j + 1.0


def test_the_live_snapshot_holds_every_synced_start_so_far_open_windows_included():
    from energyframe.model import no_sync

    with ef.measure(power=[SignalSource(name="gpu")]) as m:
        with m.window("a"):
            spin(0.01)
        with m.window("b") as b:
            m.begin_window("c", sync=no_sync)
            opened = m._live_recording(0.0).opened_s
            since_b = m._live_recording(b.start_s).opened_s
            m.end_window("c", sync=no_sync)
        assert sorted(opened) == [m.records[0].start_s, b.start_s]  # "c" opened with no sync
        assert since_b == [b.start_s]  # only what a window from then on could end before
