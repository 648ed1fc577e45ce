"""The tick-stamp benchmark's analysis on synthetic polls (no GPU): which stamp of a counter
change lies on the counter's regular update grid when a poll reads first and then blocks."""

import numpy as np

from tests.conftest import load_benchmark


def polls(blocking_every=0):
    """Polls of a counter that ticks every 100 ms: each call reads as it begins and takes 3 ms,
    then 1 ms of pause; every ``blocking_every``-th tick is seen by a call that blocks 20 ms."""
    period, true = 0.1, 0.0335 + np.arange(0, 60) * 0.1
    rows, t, seen = [], 0.0, 0
    while t < true[-1]:
        value = float(np.searchsorted(true, t, side="right"))  # ticks so far, as the counter
        cost = 0.003
        if value != seen:
            seen = value
            if blocking_every and int(value) % blocking_every == 0:
                cost = 0.020
        rows.append((t, t + cost, value * 1000.0, t + 1e9, 1e9))
        t += cost + 0.001
    return np.array(rows), true, period


def test_a_regular_cadence_has_no_residual_and_a_late_tick_shows():
    bench = load_benchmark("tick_stamps")
    grid = 5.0 + 0.1 * np.arange(50)
    assert np.max(np.abs(bench.grid_residual(grid))) < 1e-9
    late = grid.copy()
    late[20] += 0.008
    r = bench.grid_residual(late)
    assert abs(r[20] - 0.008) < 1e-6
    assert np.max(np.abs(np.delete(r, 20))) < 1e-6
    # a missed tick (two periods between stamps) does not move the others
    assert np.max(np.abs(bench.grid_residual(np.delete(grid, 30)))) < 1e-6


def test_stamped_at_the_calls_starts_a_blocking_call_does_not_make_a_tick_late():
    bench = load_benchmark("tick_stamps")
    rows, true, _ = polls(blocking_every=3)
    stamps = bench.ticks(rows, 0.0, rows[-1, 1])
    truth = true[: stamps["starts"].size]
    # the call that saw every third tick blocked 20 ms: midway between the calls' middles that
    # tick comes out 7-10 ms late, midway between their ends 13-19 ms; between their starts
    # within half a poll (2 ms), as the counter ticked
    assert np.max(stamps["middles"] - truth) > 0.007
    assert np.max(stamps["ends"] - truth) > 0.012
    assert np.max(np.abs(stamps["starts"] - truth)) <= 0.0021
    # the blocking calls are the ones that saw those ticks
    assert np.sum(stamps["call_ms"] > 10) == np.sum(np.arange(1, truth.size + 1) % 3 == 0)
