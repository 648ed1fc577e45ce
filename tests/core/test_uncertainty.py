"""The 95 % bound's arithmetic, its display, and compare's rule that a difference inside both
runs' bounds is not called real."""

import math

import numpy as np
import pandas as pd
import pytest

from energyframe.compare.statistics import compare_trials, judge
from energyframe.core.energy import sample_coverage_j
from energyframe.core.stats import Spread
from energyframe.core.summary import PhaseSummary, summarize
from energyframe.core.uncertainty import Bound, median_ci_j, summary_bound, systematic_j
from energyframe.model import Channel, Quantity
from energyframe.results.display import render, summary_table, with_bound


def test_a_bound_combines_its_parts_in_quadrature():
    b = Bound(3.0, 4.0)
    assert b.total_j == 5.0
    assert b.pct(250.0) == 2.0
    assert b.scaled(0.5) == Bound(1.5, 2.0)
    assert Bound.from_json(b.to_json(250.0)) == b
    assert math.isnan(b.pct(0.0))


def test_the_systematic_part_is_the_stated_accuracy_over_the_window():
    nvml = Channel("gpu0", Quantity.ENERGY, accuracy_w=5.0)
    meter = Channel("wall", Quantity.POWER, accuracy_pct=1.5)
    assert systematic_j(nvml, 700.0, 2.0) == 10.0  # ±5 W for 2 s
    assert systematic_j(meter, 400.0, 2.0) == pytest.approx(6.0)  # 1.5 % of 400 J
    assert math.isnan(systematic_j(nvml, math.nan, 2.0))
    assert Channel.from_json(nvml.to_json()).accuracy_w == 5.0


def test_sample_coverage_is_zero_for_constant_power_and_grows_with_changes():
    t = np.arange(0.0, 1.0, 0.1)
    assert sample_coverage_j(t, np.full(t.size, 300.0), 0.05, 0.85) == 0.0
    steps = np.where(t < 0.5, 100.0, 700.0)
    # one 600-W change over 0.1 s: anywhere inside it, up to 30 J either way (sd 600*0.1/sqrt 12)
    assert sample_coverage_j(t, steps, 0.05, 0.85) == pytest.approx(1.96 * 60 / math.sqrt(12), rel=1e-3)


def test_the_median_interval_of_normal_trials_covers_the_true_value_95_percent():
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(2000):
        x = rng.normal(10.0, 1.0, 7)
        hits += abs(np.median(x) - 10.0) <= median_ci_j(x)
    assert 0.93 <= hits / 2000 <= 0.985
    assert math.isnan(median_ci_j([1.0]))


def test_a_phase_bound_holds_the_spread_of_trials_and_the_windows_own_bounds():
    windows = [Bound(0.3, 1.0)] * 4
    tight = summary_bound([10.0, 10.0, 10.0, 10.0], windows)
    assert tight.random_j == pytest.approx(0.3 / 2)  # the windows' own, averaged over 4 trials
    assert tight.systematic_j == 1.0  # the same sensor on every window: it does not average
    spread = summary_bound([9.0, 10.0, 11.0, 12.0], windows)
    assert spread.random_j > median_ci_j([9.0, 10.0, 11.0, 12.0])
    one = summary_bound([10.0], [Bound(0.3, 1.0)])
    assert one.random_j == 0.3
    assert summary_bound([10.0], [None]) is None


def window_rows(energies, random_j=0.5, systematic_j=2.0):
    rows = []
    for trial, e in enumerate(energies):
        rows.append(
            {
                "phase": "step",
                "trial": trial,
                "channel": "gpu0",
                "iterations": 10,
                "time_per_iter_s": 0.01,
                "energy_per_iter_j": e / 10,
                "mean_power_w": e,
                "dynamic_energy_per_iter_j": math.nan,
                "estimator": "counter",
                "energy_random_j": random_j,
                "energy_systematic_j": systematic_j,
                "flags": "",
            }
        )
    return pd.DataFrame(rows)


def test_a_summary_carries_its_bound_to_run_json_and_back():
    (summary,) = summarize(window_rows([100.0, 101.0, 99.0, 100.0, 100.5]))
    assert summary.energy_bound is not None
    assert summary.estimators == {"counter": 5}
    again = PhaseSummary.from_json(summary.to_json())
    assert again.energy_bound == summary.energy_bound
    assert summary.to_json()["energy_per_iter_bound"]["bound_pct"] == pytest.approx(summary.energy_bound_pct)


def test_the_console_shows_the_energy_with_its_bound():
    (summary,) = summarize(window_rows([101.1] * 5, random_j=0.5, systematic_j=0.7))
    text = render(summary_table([summary], wide=False))
    pct = summary.energy_bound_pct
    assert f"10.11 J ± {pct:.2g} %" in text
    assert with_bound("1.011 J", 0.91) == "1.011 J ± 0.91 %"
    assert with_bound("-", 0.91) == "-"


def test_a_significant_difference_inside_both_bounds_is_not_called_real():
    a = [100.0, 100.1, 99.9, 100.05, 99.95]
    b = [101.0, 101.1, 100.9, 101.05, 100.95]  # 1 % more: the rank test says significant
    assert judge("energy", a, b).significant
    wide = (Bound(1.0, 0.0), Bound(1.0, 0.0))  # ±1 J each: together ±1.4 J > the 1-J difference
    change = judge("energy", a, b, bounds=wide)
    assert not change.significant
    assert "inside the two runs' 95 % bounds" in change.verdict
    narrow = (Bound(0.2, 5.0), Bound(0.2, 5.0))  # the sensor's ±5 J cancels on one board
    assert judge("energy", a, b, bounds=narrow, same_board=True).significant
    assert not judge("energy", a, b, bounds=narrow, same_board=False).significant


def test_compare_judges_energy_against_the_runs_bounds():
    base = window_rows([1000.0, 1001.0, 999.0, 1000.5, 999.5], random_j=60.0)
    more = window_rows([1020.0, 1021.0, 1019.0, 1020.5, 1019.5], random_j=60.0)
    comparison = compare_trials(["a", "b"], [base, more], figures=("energy",))
    (row,) = comparison.rows
    assert row.bounds[0] is not None and row.bounds[1] is not None
    assert not row.changes[1].significant
    assert "95 % bounds" in row.changes[1].verdict
    precise = compare_trials(
        ["a", "b"], [window_rows(base["mean_power_w"], 0.1), window_rows(more["mean_power_w"], 0.1)]
    )
    energy = next(r for r in precise.rows if r.figure == "energy")
    assert energy.changes[1].significant


def test_a_spread_without_bounds_still_compares():
    assert Spread.of([1.0, 2.0]).n == 2
    old = window_rows([100.0] * 5).drop(columns=["energy_random_j", "energy_systematic_j"])
    comparison = compare_trials(["a", "b"], [old, old], figures=("energy",))
    assert comparison.rows[0].bounds == (None, None)
