"""The fused power series against closed-form loads read the way NVML's sensors read them."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from energyframe.core.energy import counter_energy, power_energy
from energyframe.core.fusion import (
    MAX_OFFSET_S,
    FusionResult,
    ShapeSeries,
    estimate_offset,
    fuse,
    fused_channels,
)
from energyframe.core.samples import SampleSeries
from energyframe.plugin import Channel, ClockBase, Quantity, Scope, Shape
from tests.sensors import PulseLoad, buffer_samples, instant_samples, square_wave, tick_times

#: the targets for windows that start or end on a load step (docs/measurement.md)
LOADED_PCT, IDLE_PCT = 2.0, 5.0


def fused_energy(result: FusionResult, start_s, end_s) -> float:
    s = result.series
    return power_energy(s.times_s, s.values, start_s, end_s).energy_j


def step_windows(edges: np.ndarray):
    """(kind, start, end) of windows that start or end on a load step, per cycle."""
    for on, off, end in edges:
        yield "loaded", on, off  # the whole "on" phase
        yield "loaded", on, on + 0.2
        yield "loaded", off - 0.2, off
        yield "idle", off, end  # the whole "off" phase
        yield "idle", off, off + 0.2


def errors_pct(load, edges, energy_of) -> dict[str, list[float]]:
    out = {"loaded": [], "idle": []}
    for kind, a, b in step_windows(edges):
        truth = float(load.window_j(a, b)[0])
        out[kind].append(100.0 * (energy_of(a, b) / truth - 1.0))
    return out


def worst(errors: list[float]) -> float:
    return float(np.max(np.abs(errors)))


def sensors(
    seed,
    cycles=20,
    late_s=0.008,
    rise_s=0.0,
    fall_s=0.0,
    tick_jitter_s=0.002,
    buffer_jitter_s=5e-4,
    stamp_s=0.0,
):
    rng = np.random.default_rng(seed)
    load, edges = square_wave(rng, cycles, rise_s=rise_s, fall_s=fall_s)
    end = float(edges[-1, 2]) + 1.0
    ticks = tick_times(rng, end, jitter_s=tick_jitter_s)
    counter = 4.2e6 + load.energy_j(ticks)  # joules since the driver loaded
    ticks = ticks + rng.uniform(-stamp_s, stamp_s, ticks.size)  # the sampler's stamp of each tick
    buf_t, buf_p = buffer_samples(load, rng, end, jitter_s=buffer_jitter_s, late_s=late_s)
    inst_t, inst_p = instant_samples(load, rng, end)
    buffer = ShapeSeries("buffer", buf_t, buf_p, 0.02, "period")
    instant = ShapeSeries("instant", inst_t, inst_p, 0.1)
    return load, edges, ticks, counter, buffer, instant


# -- the counter is the truth between ticks --------------------------------------------------


@st.composite
def arbitrary_run(draw):
    """Jittered ticks with arbitrary increments, and an arbitrary (even wrong) shape."""
    n = draw(st.integers(3, 40))
    gaps = draw(st.lists(st.floats(0.05, 0.15), min_size=n - 1, max_size=n - 1))
    ticks = 1000.0 + np.concatenate(([0.0], np.cumsum(gaps)))
    increments = draw(st.lists(st.floats(0.0, 200.0), min_size=n - 1, max_size=n - 1))
    counter = 3e6 + np.concatenate(([0.0], np.cumsum(increments)))
    late = draw(st.floats(-0.03, 0.03))
    m = int((ticks[-1] - ticks[0]) / 0.02) + 6
    shape_t = ticks[0] - 0.05 + 0.02 * np.arange(m) + late
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape_p = rng.uniform(0.0, 1000.0, m) * rng.integers(0, 2, m)  # noise, and zeros
    reading = draw(st.sampled_from(["point", "period"]))
    i = draw(st.integers(0, n - 2))
    j = draw(st.integers(i + 1, n - 1))
    return ticks, counter, ShapeSeries("buffer", shape_t, shape_p, 0.02, reading), i, j


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(arbitrary_run())
def test_tick_aligned_windows_get_the_counter_exactly(run):
    ticks, counter, shape, i, j = run
    result = fuse(ticks, counter, [shape])
    expected = counter[j] - counter[i]
    assert math.isclose(fused_energy(result, ticks[i], ticks[j]), expected, rel_tol=1e-9, abs_tol=1e-6)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(arbitrary_run())
def test_every_tick_interval_integrates_to_its_increment(run):
    ticks, counter, shape, _, _ = run
    result = fuse(ticks, counter, [shape])
    s = result.series
    assert np.all(np.diff(s.times_s) >= 0)
    assert s.times_s[0] == ticks[0] and s.times_s[-1] == ticks[-1]
    for k in range(ticks.size - 1):
        got = power_energy(s.times_s, s.values, ticks[k], ticks[k + 1]).energy_j
        assert math.isclose(got, counter[k + 1] - counter[k], rel_tol=1e-9, abs_tol=1e-6)


def test_ticks_on_unix_seconds_are_kept_exactly():
    # saved runs are on Unix time (~1.8e9 s): a tick's time must come back bit for bit
    _, _, ticks, counter, buffer, instant = sensors(seed=13)
    unix = 1.79e9
    shifted = [
        ShapeSeries(s.name, s.times_s + unix, s.power_w, s.period_s, s.reading) for s in (buffer, instant)
    ]
    result = fuse(ticks + unix, counter, shifted)
    assert np.all(np.isin(ticks + unix, result.series.times_s))
    assert np.all(np.diff(result.series.times_s) >= 0)
    for i, j in [(0, ticks.size - 1), (7, 8), (40, 90)]:
        got = fused_energy(result, ticks[i] + unix, ticks[j] + unix)
        assert got == pytest.approx(counter[j] - counter[i], rel=1e-11)


def test_recorded_h200_ticks_are_kept_exactly():
    # the counter's ticks as an H200 recorded them (2 s idle, then GEMMs), shaped by a buffer
    # that knows nothing of them: every tick-aligned window still gets the recorded energy
    recorded = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "nvml-ticks.json").read_text())
    ticks, counter = (np.asarray(c, dtype=float) for c in zip(*recorded["ticks"]))
    counter = counter / 1e3  # mJ
    shape_t = np.arange(-0.1, ticks[-1] + 0.1, 0.02)
    shape_p = np.where(shape_t < 2.05, 120.0, 700.0)  # the load never stops, says this shape
    result = fuse(ticks, counter, [ShapeSeries("buffer", shape_t, shape_p, 0.02, "period")])
    for i, j in [(0, ticks.size - 1), (3, 25), (20, 21), (19, 22), (30, 52)]:
        got = fused_energy(result, ticks[i], ticks[j])
        assert got == pytest.approx(counter[j] - counter[i], rel=1e-9)
    # after the GEMMs stop (~4.95 s) the counter reads ~120 W against the shape's 700 W: those
    # intervals are not shaped by it
    assert result.shaped["buffer"] + result.flat == ticks.size - 1
    assert result.flat == np.count_nonzero(ticks[:-1] > 4.95)


# -- windows on load steps ---------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.floats(-0.03, 0.03),
    st.sampled_from([(0.0, 0.0), (0.002, 0.015), (0.01, 0.04)]),
    st.floats(0.0, 0.003),
)
def test_windows_on_load_steps_are_within_the_targets(seed, late_s, edges_s, tick_jitter_s):
    rise, fall = edges_s
    load, edges, ticks, counter, buffer, instant = sensors(seed, 20, late_s, rise, fall, tick_jitter_s)
    result = fuse(ticks, counter, [buffer, instant])
    errors = errors_pct(load, edges, lambda a, b: fused_energy(result, a, b))
    assert worst(errors["loaded"]) <= LOADED_PCT
    assert worst(errors["idle"]) <= IDLE_PCT


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_whole_phases_stay_within_the_targets_with_ticks_stamped_as_polled(seed):
    # a read of the counter blocks ~3 ms, so each tick is stamped within ±2 ms of its change
    load, edges, ticks, counter, buffer, instant = sensors(seed, 40, 0.01, 0.002, 0.015, stamp_s=0.002)
    result = fuse(ticks, counter, [buffer, instant])
    for on, off, end in edges:
        for a, b, limit in ((on, off, LOADED_PCT), (off, end, IDLE_PCT)):
            truth = float(load.window_j(a, b)[0])
            assert abs(fused_energy(result, a, b) / truth - 1.0) * 100 <= limit


def test_the_old_methods_miss_the_targets_where_fused_meets_them():
    load, edges, ticks, counter, buffer, instant = sensors(seed=7, cycles=30, late_s=0.012)

    def counter_of(a, b):
        return counter_energy(ticks, counter, a, b).energy_j

    def buffer_of(a, b):  # read as energyframe reads any power channel today
        return power_energy(buffer.times_s, buffer.power_w, a, b).energy_j

    def instant_of(a, b):
        return power_energy(instant.times_s, instant.power_w, a, b).energy_j

    result = fuse(ticks, counter, [buffer, instant])
    fused = errors_pct(load, edges, lambda a, b: fused_energy(result, a, b))
    for old in (counter_of, buffer_of, instant_of):
        errors = errors_pct(load, edges, old)
        assert worst(errors["loaded"]) > LOADED_PCT or worst(errors["idle"]) > IDLE_PCT
        assert np.median(np.abs(errors["idle"])) > 2 * np.median(np.abs(fused["idle"]))
    assert worst(fused["loaded"]) <= LOADED_PCT and worst(fused["idle"]) <= IDLE_PCT


@pytest.mark.parametrize("mean_s", [None, 0.005, 0.0], ids=["20-ms means", "5-ms means", "instant"])
@pytest.mark.parametrize("edges_s", [(0.0, 0.0), (0.002, 0.015)], ids=["clean steps", "soft edges"])
def test_the_period_reading_with_local_shift_is_not_worse_than_joining_samples(mean_s, edges_s):
    # what a buffer sample measures is not documented: the chosen reading must not lose to the
    # plain one whichever it is
    rng = np.random.default_rng(17)
    load, edges = square_wave(rng, 30, rise_s=edges_s[0], fall_s=edges_s[1])
    end = float(edges[-1, 2]) + 1.0
    ticks = tick_times(rng, end)
    counter = load.energy_j(ticks)
    u, p = buffer_samples(load, rng, end, jitter_s=0.003, late_s=0.008, mean_s=mean_s)
    chosen = fuse(ticks, counter, [ShapeSeries("buffer", u, p, 0.02, "period")])
    plain = fuse(ticks, counter, [ShapeSeries("buffer", u, p, 0.02, "point")], max_shift_periods=0.0)
    for kind in ("loaded", "idle"):
        errors = {
            name: np.abs(errors_pct(load, edges, lambda a, b, r=r: fused_energy(r, a, b))[kind])
            for name, r in (("chosen", chosen), ("plain", plain))
        }
        assert np.median(errors["chosen"]) <= np.median(errors["plain"]) + 0.02, kind
        assert errors["chosen"].max() <= errors["plain"].max() + 0.1, kind


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.floats(50.0, 300.0),
    st.floats(-40.0, 40.0),
    st.floats(0.5, 8.0),
    st.floats(0.2, 2.0),
)
def test_a_ramp_is_followed(seed, p0, slope, start, duration):
    # P(t) = p0 + slope * t over 10 s, at least 20 W: no steps, windows anywhere
    assume(p0 + 10.0 * slope >= 20.0)
    rng = np.random.default_rng(seed)
    ticks = tick_times(rng, 10.0)

    def energy_at(x):
        return p0 * x + slope * x**2 / 2

    u = np.arange(0.02, 10.0, 0.02)
    buf = ShapeSeries("buffer", u[1:], np.diff(energy_at(u)) / 0.02, 0.02, "period")
    result = fuse(ticks, energy_at(ticks), [buf])
    end = min(start + duration, ticks[-1] - 1e-3)
    start = max(start, ticks[0] + 1e-3)
    truth = energy_at(end) - energy_at(start)
    assert fused_energy(result, start, end) == pytest.approx(truth, rel=2e-3)


# -- offsets -----------------------------------------------------------------------------------


@pytest.mark.parametrize("late_s", [-0.025, 0.0, 0.012, 0.04])
def test_the_buffer_offset_is_found(late_s):
    _, _, ticks, counter, buffer, _ = sensors(seed=3, late_s=late_s)
    est = estimate_offset(ticks - ticks[0], np.diff(counter), buffer, origin_s=ticks[0])
    assert est.applied, est.reason
    assert est.offset_s == pytest.approx(late_s, abs=0.001)
    assert est.gain == pytest.approx(1.0, abs=0.01)
    assert est.residual_j < est.residual_at_zero_j or late_s == 0.0


def test_a_long_run_estimates_its_offset_from_the_intervals_where_the_load_changed(monkeypatch):
    from energyframe.core import shapes

    _, _, ticks, counter, buffer, _ = sensors(seed=3, late_s=0.012)
    full = estimate_offset(ticks - ticks[0], np.diff(counter), buffer, origin_s=ticks[0])
    keep = full.intervals // 4
    monkeypatch.setattr(shapes, "MAX_OFFSET_INTERVALS", keep)
    few = estimate_offset(ticks - ticks[0], np.diff(counter), buffer, origin_s=ticks[0])
    assert few.intervals == keep < full.intervals
    assert few.applied and few.offset_s == pytest.approx(0.012, abs=0.001)


def test_an_offset_beyond_the_search_is_reported_not_applied():
    _, _, ticks, counter, buffer, _ = sensors(seed=3, late_s=MAX_OFFSET_S + 0.03)
    result = fuse(ticks, counter, [buffer])
    est = result.offsets[0]
    assert not est.applied
    assert est.reason == "the best match lies at the edge of the search (±50 ms)"


def test_a_steady_load_gives_no_offset_to_apply():
    rng = np.random.default_rng(5)
    load = PulseLoad(300.0, 300.0, np.array([0.0]), np.array([0.0]))
    ticks = tick_times(rng, 20.0)
    buf_t, buf_p = buffer_samples(load, rng, 20.0, late_s=0.01)
    result = fuse(ticks, load.energy_j(ticks), [ShapeSeries("buffer", buf_t, buf_p, 0.02, "period")])
    assert not result.offsets[0].applied
    assert result.offsets[0].reason == "no clear best offset (no load changes to match)"
    assert fused_energy(result, 3.33, 7.77) == pytest.approx(300.0 * 4.44, rel=1e-9)


def test_offsets_can_be_left_alone():
    _, _, ticks, counter, buffer, _ = sensors(seed=3, late_s=0.02)
    result = fuse(ticks, counter, [buffer], estimate_offsets=False)
    assert result.offsets[0].offset_s == 0.0 and not result.offsets[0].applied
    assert result.offsets[0].reason == "not estimated"


# -- where the shape cannot be used ----------------------------------------------------------


def linear_counter(ticks, counter, a, b):
    return counter_energy(ticks, counter, a, b).energy_j


def test_intervals_without_fine_samples_get_the_counters_mean_power():
    load, edges, ticks, counter, buffer, _ = sensors(seed=11)
    hole = (buffer.times_s > 5.0) & (buffer.times_s < 8.0)
    holed = ShapeSeries("buffer", buffer.times_s[~hole], buffer.power_w[~hole], 0.02, "period")
    result = fuse(ticks, counter, [holed])
    assert result.flat > 0
    for a, b in [(5.3, 7.6), (6.01, 6.02), (5.5, 5.9)]:
        assert fused_energy(result, a, b) == pytest.approx(linear_counter(ticks, counter, a, b), rel=1e-9)


def test_the_second_series_shapes_what_the_first_does_not_cover():
    load, edges, ticks, counter, buffer, instant = sensors(seed=11)
    early = buffer.times_s < 6.0
    partial = ShapeSeries("buffer", buffer.times_s[early], buffer.power_w[early], 0.02, "period")
    result = fuse(ticks, counter, [partial, instant])
    assert result.shaped["buffer"] > 0 and result.shaped["instant"] > 0
    assert result.shaped["buffer"] + result.shaped["instant"] + result.flat == result.intervals


def test_a_shape_of_zero_power_falls_back_to_the_counter():
    rng = np.random.default_rng(2)
    ticks = tick_times(rng, 5.0)
    counter = 250.0 * ticks
    zero = ShapeSeries("buffer", np.arange(0.0, 5.0, 0.02), np.zeros(250), 0.02)
    result = fuse(ticks, counter, [zero])
    assert result.shaped["buffer"] == 0 and result.flat == result.intervals
    assert fused_energy(result, 1.234, 3.21) == pytest.approx(250.0 * (3.21 - 1.234), rel=1e-9)


def test_an_implausible_shape_is_not_trusted_in_its_interval():
    # a 20-ms glitch reading 30x the real power: scaling it would put most of the interval's
    # energy into those 20 ms; the interval gets the counter's mean power instead
    rng = np.random.default_rng(4)
    ticks = tick_times(rng, 6.0, jitter_s=0.0)
    counter = 300.0 * ticks
    i = int(np.searchsorted(ticks, 3.0))
    u = np.arange(0.0, 6.0, 0.02)
    p = np.full(u.size, 300.0)
    p[np.argmin(np.abs(u - (ticks[i] + ticks[i + 1]) / 2))] = 9000.0  # mid-interval, one sample
    result = fuse(ticks, counter, [ShapeSeries("buffer", u, p, 0.02)])
    clean = fuse(ticks, counter, [ShapeSeries("buffer", u, np.full(u.size, 300.0), 0.02)])
    assert result.flat == clean.flat + 1
    a, b = ticks[i] - 0.03, ticks[i + 1] + 0.05
    assert fused_energy(result, a, b) == pytest.approx(300.0 * (b - a), rel=1e-9)


def test_a_counter_reset_gives_nan_only_across_it():
    rng = np.random.default_rng(8)
    ticks = tick_times(rng, 6.0)
    counter = 400.0 * ticks + 1e6
    reset = int(np.searchsorted(ticks, 3.0))
    counter[reset:] -= 1e6  # the driver reloaded between two ticks
    result = fuse(
        ticks, counter, [ShapeSeries("buffer", np.arange(0.0, 6.0, 0.02), np.full(300, 400.0), 0.02)]
    )
    assert result.unknown == 1
    assert math.isnan(fused_energy(result, 2.0, 4.0))
    assert fused_energy(result, 0.5, ticks[reset - 1]) == pytest.approx(400.0 * (ticks[reset - 1] - 0.5))
    assert fused_energy(result, ticks[reset], 5.5) == pytest.approx(400.0 * (5.5 - ticks[reset]))


def test_missing_counter_values_are_dropped_not_zeroed():
    rng = np.random.default_rng(9)
    ticks = tick_times(rng, 4.0)
    counter = 500.0 * ticks
    counter[[5, 6, 20]] = np.nan
    result = fuse(ticks, counter, [])
    assert result.intervals == ticks.size - 4
    assert fused_energy(result, 0.7, 3.3) == pytest.approx(500.0 * 2.6, rel=1e-9)


def test_fewer_than_two_ticks_give_an_empty_series():
    result = fuse(np.array([1.0]), np.array([5.0]), [])
    assert len(result.series) == 0 and result.intervals == 0
    assert "uncovered" in power_energy(result.series.times_s, result.series.values, 0.5, 1.5).flags


def test_bad_series_are_refused():
    with pytest.raises(ValueError, match="unknown reading 'mean' for 'buffer'; valid: point, period"):
        ShapeSeries("buffer", np.zeros(2), np.zeros(2), 0.02, "mean")
    with pytest.raises(ValueError, match="period_s of 'buffer' must be positive, not 0.0"):
        ShapeSeries("buffer", np.zeros(2), np.zeros(2), 0.0)


# -- the run's hook ----------------------------------------------------------------------------


def nvml_channels(with_instant=True):
    mono, wall = ClockBase.MONOTONIC, ClockBase.WALL
    shapes = (Shape(channel="gpu0.power_samples", reading="period"), Shape(channel="gpu0.power_instant", reading="point"))
    out = {
        # the counter declares what shapes it between its ticks, as the NVML source does
        "gpu0": Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1, mono, shaped_by=shapes[: 2 if with_instant else 1]),
        "gpu0.power_samples": Channel(
            "gpu0.power_samples", Quantity.POWER, Scope.GPU, 0.02, wall, primary=False
        ),
        "gpu0.sm_clock": Channel(
            "gpu0.sm_clock", Quantity.STATE, Scope.GPU, 0.05, mono, unit="MHz", primary=False
        ),
        "gpu1": Channel("gpu1", Quantity.ENERGY, Scope.GPU, 0.1, mono),  # no buffer: left alone
    }
    if with_instant:
        out["gpu0.power_instant"] = Channel(
            "gpu0.power_instant", Quantity.POWER, Scope.GPU, 0.1, mono, primary=False
        )
    return out


def test_fused_channels_adds_one_secondary_power_channel_per_gpu_with_a_buffer():
    load, edges, ticks, counter, buffer, instant = sensors(seed=12, late_s=0.01)
    channels = nvml_channels()
    series = {
        "gpu0": SampleSeries(ticks, counter),
        "gpu0.power_samples": SampleSeries(buffer.times_s, buffer.power_w),
        "gpu0.power_instant": SampleSeries(instant.times_s, instant.power_w),
        "gpu0.sm_clock": SampleSeries(np.array([0.0, 1.0]), np.array([1980.0, 1980.0])),
        "gpu1": SampleSeries(ticks, counter),
    }
    report = {}
    new_channels, new_series = fused_channels(channels, series, report=report)
    assert list(new_channels) == [*channels, "gpu0.fused"]
    fused = new_channels["gpu0.fused"]
    assert fused.quantity == Quantity.POWER and not fused.primary and fused.scope == Scope.GPU
    assert fused.clock == ClockBase.MONOTONIC and fused.resolution_s == 0.02
    assert "counter" in fused.description and "20-ms" in fused.description
    assert set(new_series) == {*series, "gpu0.fused"}
    assert channels == nvml_channels() and "gpu0.fused" not in series  # inputs untouched
    assert report["gpu0.fused"]["offsets"][0]["name"] == "gpu0.power_samples"
    assert report["gpu0.fused"]["offsets"][0]["offset_s"] == pytest.approx(0.01, abs=0.001)
    on, off, _ = edges[3]
    s = new_series["gpu0.fused"]
    got = power_energy(s.times_s, s.values, on, off).energy_j
    assert got == pytest.approx(float(load.window_j(on, off)[0]), rel=LOADED_PCT / 100)


def test_fused_channels_can_make_the_fused_channel_primary():
    _, _, ticks, counter, buffer, _ = sensors(seed=12)
    channels = nvml_channels(with_instant=False)
    series = {
        "gpu0": SampleSeries(ticks, counter),
        "gpu0.power_samples": SampleSeries(buffer.times_s, buffer.power_w),
        "gpu1": SampleSeries(ticks, counter),
    }
    new_channels, _ = fused_channels(channels, series, primary=True)
    assert new_channels["gpu0.fused"].primary and not new_channels["gpu0"].primary
    assert new_channels["gpu1"].primary  # no buffer: its counter stays the primary channel
    assert channels["gpu0"].primary  # the caller's channels are not changed


def test_fused_channels_leaves_runs_without_a_buffer_alone():
    channels = {"gpu0": Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1)}
    series = {"gpu0": SampleSeries(np.array([0.0, 0.1]), np.array([0.0, 10.0]))}
    new_channels, new_series = fused_channels(channels, series)
    assert new_channels == channels and new_series == series
