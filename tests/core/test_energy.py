"""The window math against closed-form signals (property tests)."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from energyframe.core.energy import (
    COUNTER_RESET,
    GAP,
    SHORT_WINDOW,
    STUCK_COUNTER,
    UNCOVERED,
    counter_energy,
    power_energy,
    window_energy,
)
from energyframe.plugin import Quantity

REL = 1e-9

starts = st.floats(0.0, 1e5)
durations = st.floats(1e-3, 100.0)
powers = st.floats(1.0, 2000.0)


def close(a, b, rel=REL):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9 * max(1.0, abs(b)))


def sample_times(draw, lo, hi, n_min=2, n_max=60):
    """Sorted random times covering [lo, hi]: one before, some inside, one after."""
    n = draw(st.integers(n_min, n_max))
    before = lo - draw(st.floats(1e-4, 5.0))
    after = hi + draw(st.floats(1e-4, 5.0))
    inside = sorted(draw(st.lists(st.floats(lo, hi), min_size=0, max_size=n)))
    return np.array([before, *inside, after])


@st.composite
def window_and_times(draw):
    start = draw(starts)
    duration = draw(durations)
    end = start + duration
    times = sample_times(draw, start, end)
    assume(np.all(np.diff(times) > 0))
    return start, end, times


@settings(max_examples=300, deadline=None)
@given(window_and_times(), powers)
def test_constant_power_is_exact(wt, p):
    start, end, times = wt
    result = power_energy(times, np.full(times.size, p), start, end)
    assert close(result.energy_j, p * (end - start))


@settings(max_examples=300, deadline=None)
@given(window_and_times(), powers, st.floats(-5.0, 5.0))
def test_linear_ramp_is_exact(wt, a, b):
    start, end, times = wt
    # P(t) = a + b (t - start); the piecewise-linear interpolant of a line is the line
    values = a + b * (times - start)
    expected = a * (end - start) + 0.5 * b * (end - start) ** 2
    result = power_energy(times, values, start, end)
    assert close(result.energy_j, expected, rel=1e-8)


@settings(max_examples=300, deadline=None)
@given(window_and_times(), powers, powers, st.floats(-0.5, 1.5))
def test_step_with_samples_at_the_step_is_exact(wt, p1, p2, where):
    start, end, times = wt
    t_step = start + where * (end - start)
    keep = times[np.abs(times - t_step) > 1e-9]
    t = np.sort(np.concatenate([keep, [t_step, t_step]]))
    values = np.where(t < t_step, p1, p2).astype(float)
    # the two samples at the step: first the old value, then the new one
    i = int(np.searchsorted(t, t_step, side="left"))
    values[i], values[i + 1] = p1, p2
    lo, hi = start, end
    before = max(0.0, min(t_step, hi) - lo)
    after = max(0.0, hi - max(t_step, lo))
    expected = p1 * before + p2 * after
    result = power_energy(t, values, start, end)
    assert close(result.energy_j, expected)


@st.composite
def jittered_ticks(draw):
    """Counter ticks every ~100 ms with random jitter, around a random window."""
    start = draw(starts)
    duration = draw(st.floats(1e-3, 20.0))
    period = 0.1
    first = start - draw(st.floats(1e-4, 0.3))
    jitter = draw(st.floats(0.0, 0.04))
    n = int((start + duration - first) / period) + 3
    offsets = draw(st.lists(st.floats(-1.0, 1.0), min_size=n, max_size=n))
    times = first + period * np.arange(n) + jitter * np.asarray(offsets)
    times = np.maximum.accumulate(times)
    assume(np.all(np.diff(times) > 1e-6) and times[0] <= start and times[-1] >= start + duration)
    return start, start + duration, times


@settings(max_examples=300, deadline=None)
@given(jittered_ticks(), powers, st.floats(0.0, 5e6))
def test_counter_with_jittered_ticks_under_constant_power_is_exact(wt, p, e0):
    start, end, ticks = wt
    counter = e0 + p * (ticks - ticks[0])  # megajoules since driver load, like NVML
    result = counter_energy(ticks, counter, start, end, resolution_s=0.1)
    assert close(result.energy_j, p * (end - start), rel=1e-8)


@settings(max_examples=200, deadline=None)
@given(jittered_ticks(), powers, powers)
def test_counter_under_piecewise_constant_power_with_ticks_at_changes_is_exact(wt, p1, p2):
    start, end, ticks = wt
    change = ticks[len(ticks) // 2]  # the power changes exactly at a tick

    def energy(t):
        return np.where(t < change, p1 * (t - ticks[0]), p1 * (change - ticks[0]) + p2 * (t - change))

    counter = energy(ticks)
    expected = float(energy(np.array(end)) - energy(np.array(start)))
    result = counter_energy(ticks, counter, start, end)
    assert close(result.energy_j, expected, rel=1e-8)


def test_counter_between_two_ticks_is_not_zero():
    # the case a plain difference of two reads gets wrong: both edges between the same ticks
    ticks = np.array([0.0, 0.1, 0.2])
    counter = np.array([0.0, 70.0, 140.0])  # 700 W
    result = counter_energy(ticks, counter, 0.12, 0.17, resolution_s=0.1)
    assert result.energy_j == pytest.approx(35.0)
    assert SHORT_WINDOW in result.flags


def test_counter_reset_is_flagged_never_negative():
    ticks = np.array([0.0, 0.1, 0.2, 0.3])
    counter = np.array([500.0, 570.0, 3.0, 73.0])  # the driver reloaded
    result = counter_energy(ticks, counter, 0.05, 0.25)
    assert math.isnan(result.energy_j)
    assert COUNTER_RESET in result.flags


def test_reset_outside_the_window_does_not_matter():
    ticks = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    counter = np.array([500.0, 3.0, 73.0, 143.0, 213.0])
    result = counter_energy(ticks, counter, 0.15, 0.35)
    assert result.energy_j == pytest.approx(140.0)
    assert result.flags == ()


def test_a_reset_counted_as_a_wraparound_is_a_reset_not_85_kilowatts():
    # 100 W read every 10 ms; the counter reset to 0 and the reader added its 262-kJ wrap range,
    # which no device draws in 10 ms (26 MW): NaN, flagged, not one window of 257 kJ
    ticks = np.arange(0.0, 6.0, 0.01)
    counter = 100.0 * ticks
    counter[300:] += 262_143.0 - counter[300]
    result = counter_energy(ticks, counter, 1.0, 4.0, resolution_s=0.01)
    assert math.isnan(result.energy_j) and COUNTER_RESET in result.flags
    # the windows on either side of it are exact
    assert counter_energy(ticks, counter, 0.5, 2.5, resolution_s=0.01).energy_j == pytest.approx(200.0)
    assert counter_energy(ticks, counter, 3.5, 5.5, resolution_s=0.01).energy_j == pytest.approx(200.0)


def test_a_frozen_counter_whose_samples_keep_coming_is_stuck_not_idle():
    # energy_uj read every 10 ms (KEEP), 100 W, frozen from 2 s to 4 s: a window inside reads 0 J
    ticks = np.arange(0.0, 6.0, 0.01)
    counter = 100.0 * np.minimum(ticks, 2.0) + 100.0 * np.clip(ticks - 4.0, 0.0, None)
    inside = counter_energy(ticks, counter, 2.5, 3.0, resolution_s=0.01)
    assert math.isnan(inside.energy_j) and STUCK_COUNTER in inside.flags
    across = counter_energy(ticks, counter, 1.5, 4.5, resolution_s=0.01)
    assert math.isnan(across.energy_j) and STUCK_COUNTER in across.flags
    before = counter_energy(ticks, counter, 0.5, 1.5, resolution_s=0.01)
    assert before.energy_j == pytest.approx(100.0) and before.flags == ()
    after = counter_energy(ticks, counter, 4.5, 5.5, resolution_s=0.01)
    assert after.energy_j == pytest.approx(100.0) and after.flags == ()


def test_a_counter_read_faster_than_it_ticks_is_not_stuck():
    # read every 10 ms, ticking every 50 ms: each value stands one tick period, as it should
    ticks = np.arange(0.0, 3.0, 0.01)
    counter = 100.0 * np.floor(ticks / 0.05) * 0.05
    result = counter_energy(ticks, counter, 0.52, 2.52, resolution_s=0.05)
    assert result.energy_j == pytest.approx(200.0, rel=0.01) and STUCK_COUNTER not in result.flags


@pytest.mark.parametrize("start,end", [(-1.0, 0.5), (0.5, 2.5), (-1.0, 3.0)])
@pytest.mark.parametrize("fn", [counter_energy, power_energy])
def test_window_outside_the_samples_is_uncovered(fn, start, end):
    times = np.array([0.0, 1.0, 2.0])
    result = fn(times, np.array([0.0, 1.0, 2.0]), start, end)
    assert math.isnan(result.energy_j)
    assert result.flags == (UNCOVERED,)


def test_empty_stream_is_uncovered():
    result = power_energy(np.array([]), np.array([]), 0.0, 1.0)
    assert UNCOVERED in result.flags and math.isnan(result.energy_j)


def test_gap_longer_than_three_periods_is_flagged():
    times = np.array([0.0, 0.1, 0.2, 1.0, 1.1])
    result = power_energy(times, np.full(5, 100.0), 0.05, 1.05, resolution_s=0.1)
    assert GAP in result.flags
    assert result.energy_j == pytest.approx(100.0)


def test_no_flags_for_a_long_well_sampled_window():
    times = np.arange(0.0, 3.0, 0.1)
    result = power_energy(times, np.full(times.size, 50.0), 0.5, 2.5, resolution_s=0.1)
    assert result.flags == ()


def test_window_energy_dispatch_and_state_rejected():
    times = np.array([0.0, 1.0])
    assert window_energy(Quantity.POWER, times, np.array([2.0, 2.0]), 0.0, 1.0).energy_j == 2.0
    assert window_energy(Quantity.ENERGY, times, np.array([0.0, 2.0]), 0.0, 1.0).energy_j == 2.0
    with pytest.raises(ValueError):
        window_energy(Quantity.STATE, times, np.array([1.0, 1.0]), 0.0, 1.0)
