"""The ground truth for windows on a repeated load, against closed-form loads."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

# the truth serves the transient benchmark, and lives beside it
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from cycle_truth import (  # noqa: E402
    Segments,
    fit_profile,
    idle_truth,
    other_truths,
    profile_energy,
    window_truth,
)

from tests.sensors import PulseLoad, square_wave, tick_times


def run(seed=0, cycles=60, rise_s=0.0, fall_s=0.0, spread=0.0, jitter_s=0.002):
    """A repeated load, its counter, and its segments. ``spread``: each cycle's load power
    varies by up to this fraction (cycles that are not quite identical)."""
    rng = np.random.default_rng(seed)
    load, edges = square_wave(rng, cycles, rise_s=rise_s, fall_s=fall_s)
    if spread:
        # one load per cycle, summed: the same edges, each pulse with its own height
        heights = 1.0 + rng.uniform(-spread, spread, cycles)
        parts = [
            PulseLoad(0.0, (load.on_w - load.idle_w) * h, np.array([s]), np.array([length]), rise_s, fall_s)
            for s, length, h in zip(load.starts_s, load.lengths_s, heights)
        ]
        energy = lambda t: load.idle_w * np.atleast_1d(t) + sum(p.energy_j(t) for p in parts)  # noqa: E731
    else:
        energy = load.energy_j
    end = float(edges[-1, 2])
    ticks = tick_times(rng, end + 0.5, jitter_s=jitter_s)
    counter = 1e6 + energy(ticks)
    segments = Segments.from_cycles(edges[:, 0], edges[:, 1], end)
    return edges, ticks, counter, segments, energy


def windows_of(edges):
    """Windows of each kind, per cycle but the first and last (whose edge tick intervals reach
    outside the cycles)."""
    edges = edges[1:-1]
    kinds = {
        "on": np.column_stack((edges[:, 0], edges[:, 1])),
        "off": np.column_stack((edges[:, 1], edges[:, 2])),
        "on, first 0.2 s": np.column_stack((edges[:, 0], edges[:, 0] + 0.2)),
        "on, last 0.2 s": np.column_stack((edges[:, 1] - 0.2, edges[:, 1])),
        "off, first 0.2 s": np.column_stack((edges[:, 1], edges[:, 1] + 0.2)),
    }
    return kinds


def worst_pct(got, truth):
    return float(np.nanmax(np.abs(got / truth - 1.0))) * 100


@pytest.mark.parametrize(
    "rise_s,fall_s,spread,loaded_pct,idle_pct",
    [
        (0.0, 0.0, 0.0, 0.01, 0.01),  # identical clean steps: exact
        (0.005, 0.04, 0.0, 0.5, 1.0),
        (0.02, 0.08, 0.0, 0.5, 1.0),
        (0.005, 0.04, 0.03, 1.0, 2.5),  # cycles differing by up to ±3 %
    ],
)
def test_window_truth_matches_the_exact_energy(rise_s, fall_s, spread, loaded_pct, idle_pct):
    edges, ticks, counter, segments, energy = run(
        seed=5, cycles=100, rise_s=rise_s, fall_s=fall_s, spread=spread
    )
    profile = fit_profile(ticks, counter, segments)
    assert profile.intervals > 500
    for kind, w in windows_of(edges).items():
        exact = energy(w[:, 1]) - energy(w[:, 0])
        got = window_truth(profile, ticks, counter, segments, w)
        assert np.all(np.isfinite(got)), kind
        assert worst_pct(got, exact) <= (loaded_pct if kind.startswith("on") else idle_pct), kind


def test_window_truth_follows_each_cycle_not_only_the_mean():
    # cycles whose load differs by up to ±3 %: the mean profile alone is off by that much, the
    # truth takes each window's own counter between ticks
    edges, ticks, counter, segments, energy = run(seed=4, spread=0.03)
    profile = fit_profile(ticks, counter, segments)
    w = windows_of(edges)["on"]
    exact = energy(w[:, 1]) - energy(w[:, 0])
    assert worst_pct(profile_energy(profile, segments, w), exact) > 2.0
    assert worst_pct(window_truth(profile, ticks, counter, segments, w), exact) < 1.0


def test_tick_aligned_windows_are_the_counter_exactly():
    edges, ticks, counter, segments, _ = run(seed=2)
    profile = fit_profile(ticks, counter, segments)
    inside = np.flatnonzero((ticks > segments.starts_s[0]) & (ticks < segments.end_s))
    pairs = [(inside[0], inside[5]), (inside[10], inside[11]), (inside[3], inside[-1])]
    w = np.array([(ticks[i], ticks[j]) for i, j in pairs])
    got = window_truth(profile, ticks, counter, segments, w)
    np.testing.assert_allclose(got, [counter[j] - counter[i] for i, j in pairs], rtol=1e-12)


def test_the_profile_shows_where_the_load_steps():
    # the load falls linearly over 40 ms: half-way 20 ms after the off edge; it rises at once
    edges, ticks, counter, segments, _ = run(seed=5, cycles=80, fall_s=0.04)
    profile = fit_profile(ticks, counter, segments)
    assert profile.crossing_s("off") == pytest.approx(0.02, abs=0.003)
    assert 0.0 <= profile.crossing_s("on") <= profile.bin_s
    assert profile.power_w["on"][50] == pytest.approx(680.0, rel=0.01)  # 0.25 s into the load
    assert profile.power_w["off"][-20] == pytest.approx(110.0, rel=0.03)


def test_the_mean_cycle_energy_is_close_for_identical_cycles():
    edges, ticks, counter, segments, energy = run(seed=6)
    profile = fit_profile(ticks, counter, segments)
    for kind, w in windows_of(edges).items():
        exact = energy(w[:, 1]) - energy(w[:, 0])
        assert worst_pct(profile_energy(profile, segments, w), exact) < 2.0, kind


def test_windows_outside_the_cycles_or_across_a_reset_have_no_truth():
    edges, ticks, counter, segments, _ = run(seed=7, cycles=30)
    profile = fit_profile(ticks, counter, segments)
    reset = int(np.searchsorted(ticks, edges[20, 0]))
    broken = counter.copy()
    broken[reset:] -= 2e6
    w = np.array([(edges[0, 0] - 0.5, edges[0, 1]), (edges[19, 0], edges[21, 0]), (edges[5, 0], edges[5, 1])])
    got = window_truth(profile, ticks, broken, segments, w)
    assert math.isnan(got[0]) and math.isnan(got[1]) and math.isfinite(got[2])
    assert math.isnan(profile_energy(profile, segments, w[:1])[0])


def test_too_few_ticks_for_the_profile_are_refused():
    edges, ticks, counter, segments, _ = run(seed=8, cycles=3)
    with pytest.raises(
        ValueError, match=r"tick intervals cannot determine \d+ profile bins: run more cycles"
    ):
        fit_profile(ticks, counter, segments)


def test_segments_must_be_consistent():
    with pytest.raises(ValueError, match="one kind per segment start"):
        Segments(np.array([0.0, 1.0]), ("on",), 2.0)
    with pytest.raises(ValueError, match="must ascend"):
        Segments(np.array([0.0, 1.0]), ("on", "off"), 0.5)
    with pytest.raises(ValueError, match="2 on edges but 1 off edges"):
        Segments.from_cycles([0.0, 1.0], [0.5], 2.0)


def test_a_profile_from_some_cycles_gives_the_truth_of_the_others():
    # fitted on the first half, laid along every cycle; the last idle segment is longer than any
    # the profile saw, and its extra bins take the profile's last bin
    edges, ticks, counter, segments, energy = run(seed=10, cycles=80, fall_s=0.03)
    half = Segments.from_cycles(edges[:40, 0], edges[:40, 1], float(edges[39, 2]))
    profile = fit_profile(ticks, counter, half)
    longer = Segments.from_cycles(edges[:, 0], edges[:, 1], float(edges[-1, 2]) + 0.4)
    assert profile.power_w["off"].size * profile.bin_s < longer.end_s - longer.starts_s[-1]
    # windows ending around and past the longest idle the profile saw (0.5 s + the gap)
    seen = profile.power_w["off"].size * profile.bin_s
    tails = [[edges[-1, 1], edges[-1, 1] + seen + d] for d in (-0.04, -0.01, 0.01, 0.04, 0.3)]
    w = np.vstack([windows_of(edges[40:])["off"], tails])
    exact = energy(w[:, 1]) - energy(w[:, 0])
    assert worst_pct(window_truth(profile, ticks, counter, longer, w), exact) < 1.0


def test_the_truth_fitted_otherwise_stays_on_the_exact_energy_of_identical_cycles():
    edges, ticks, counter, segments, energy = run(seed=3, cycles=60, fall_s=0.03)
    kinds = windows_of(edges)
    w = np.vstack([kinds["on, first 0.2 s"], kinds["off, first 0.2 s"]])
    cycle_of = np.concatenate([np.arange(1, len(edges) - 1)] * 2)
    exact = energy(w[:, 1]) - energy(w[:, 0])
    others = other_truths(ticks, counter, edges, w, cycle_of)
    assert set(others) == {"other_half", "smoothing x0.25", "smoothing x4"}
    for truth in others.values():
        assert truth.shape == (len(w),)
    # half the cycles determine the profile less well, and smoothing x4 blurs the 30-ms fall a
    # little (0.6 J of a 30-J idle window): how far the truth moves is what the check shows
    assert worst_pct(others["smoothing x0.25"], exact) < 1.0
    assert worst_pct(others["other_half"], exact) < 2.5 and worst_pct(others["smoothing x4"], exact) < 2.5
    # each window's other-half truth comes from the half it is not in: the first half's windows
    # get the second half's profile, and the other way round
    half = len(edges) // 2
    first = Segments.from_cycles(edges[:half, 0], edges[:half, 1], float(edges[half - 1, 2]))
    from_first = window_truth(fit_profile(ticks, counter, first), ticks, counter, segments, w)
    later = cycle_of >= half
    np.testing.assert_allclose(others["other_half"][later], from_first[later])


def test_too_few_cycles_for_half_a_profile_leave_only_the_other_half_unknown():
    edges, ticks, counter, segments, energy = run(seed=4, cycles=30)
    # 30 cycles of ~11 ticks fit a profile of ~220 bins; 15 do not
    w = np.array([[edges[0, 0] + 0.1, edges[0, 1] + 0.1]])
    others = other_truths(ticks, counter, edges, w, np.array([0]))
    assert np.isnan(others["other_half"]).all()
    assert np.isfinite(others["smoothing x4"]).all()


# -- the idle truth ----------------------------------------------------------------------------


def periods_of(edges):
    """Windows from each burst's start to the next one's (the step family's periods), but the
    first cycle's and the last one's."""
    return np.column_stack((edges[1:-2, 0], edges[2:-1, 0] - 1e-4))


def test_the_idle_truth_is_exact_whatever_each_burst_draws():
    # bursts that differ by up to ±30 % from cycle to cycle: the cycle truth splits an edge's
    # tick interval by the mean burst and is off; the idle truth never looks at a burst
    edges, ticks, counter, segments, energy = run(seed=3, cycles=60, rise_s=0.005, fall_s=0.04, spread=0.3)
    w = periods_of(edges)
    exact = energy(w[:, 1]) - energy(w[:, 0])
    got = idle_truth(ticks, counter, segments, w)
    assert np.all(np.isfinite(got))  # every edge's tick lies in the idle before it
    assert worst_pct(got, exact) < 1e-6
    cycle = window_truth(fit_profile(ticks, counter, segments), ticks, counter, segments, w)
    assert worst_pct(cycle, exact) > 0.5  # what the idle truth is for


def test_the_idle_truth_carries_the_idle_powers_drift_only_through_its_own_gaps():
    # the idle power steps from 110 to 130 W halfway through: each edge takes its own gaps' idle
    edges, ticks, counter, segments, energy = run(seed=4, cycles=60)
    half = float(edges[30, 0])
    drift = lambda t: 20.0 * np.maximum(np.atleast_1d(t) - half, 0.0)  # noqa: E731
    w = periods_of(edges)
    got = idle_truth(ticks, counter + drift(ticks), segments, w)
    exact = energy(w[:, 1]) - energy(w[:, 0]) + drift(w[:, 1]) - drift(w[:, 0])
    far = np.abs(w[:, 0] - half) > 4.0  # further than the pooled gaps reach
    assert worst_pct(got[far], exact[far]) < 1e-6
    assert worst_pct(got, exact) < 0.5


def test_the_idle_truth_leaves_out_an_edge_whose_tick_is_not_in_settled_idle():
    edges, ticks, counter, segments, energy = run(seed=6, cycles=30)
    inside_burst = np.column_stack((edges[2:-2, 0] + 0.2, edges[3:-1, 0] - 1e-4))  # opens in a burst
    assert np.all(np.isnan(idle_truth(ticks, counter, segments, inside_burst)))
    # a window opening 80 ms after a burst stopped: the tick before it lies in the burst's last
    # 20 ms, in the first 60 ms of idle (where the power may still fall) or in settled idle
    after_stop = np.column_stack((edges[2:-2, 1] + 0.08, edges[3:-1, 0] - 1e-4))
    got = idle_truth(ticks, counter, segments, after_stop)
    t_before = ticks[np.searchsorted(ticks, after_stop[:, 0], side="right") - 1]
    settled = t_before >= edges[2:-2, 1] + 0.06
    assert settled.any() and (~settled).any()
    assert np.all(np.isnan(got[~settled])) and np.all(np.isfinite(got[settled]))
    exact = energy(after_stop[:, 1]) - energy(after_stop[:, 0])
    assert worst_pct(got[settled], exact[settled]) < 1e-6
