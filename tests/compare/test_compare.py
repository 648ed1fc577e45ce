"""The statistics of ``energyframe compare``: the exact rank test against brute force, verdicts,
rows over windows, and the comparability checks on runs through the fake NVML."""

import itertools
import math
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import energyframe as ef
from energyframe.compare import comparability
from energyframe.compare.statistics import (
    EXACT_MAX_TOTAL,
    MIN_TRIALS,
    _exact_p,
    compare_trials,
    factor_text,
    judge,
    mann_whitney,
    midranks,
    smallest_p,
    trials_needed,
)
from energyframe.power.nvml import NVMLPowerSource
from tests.conftest import gpu

# small integers force ties
values = st.lists(st.integers(min_value=0, max_value=6).map(float), min_size=1, max_size=6)


def brute_force_p(a, b):
    """Two-sided p over every way of splitting the pooled values into groups of len(a), len(b)."""
    pooled = np.concatenate([a, b])
    ranks = midranks(pooled)
    n_a = len(a)
    mean = n_a * (len(pooled) + 1) / 2
    observed = abs(ranks[:n_a].sum() - mean)
    splits = list(itertools.combinations(range(len(pooled)), n_a))
    extreme = sum(abs(ranks[list(s)].sum() - mean) >= observed - 1e-9 for s in splits)
    return extreme / len(splits)


@given(values, values)
@settings(max_examples=200, deadline=None)
def test_exact_p_equals_enumerating_every_split_ties_included(a, b):
    test = mann_whitney(a, b)
    assert test.method == "exact"
    assert test.p_value == pytest.approx(brute_force_p(np.array(a), np.array(b)), abs=1e-12)
    assert 0 < test.p_value <= 1


@given(values, values)
@settings(max_examples=100, deadline=None)
def test_p_is_symmetric_and_invariant_under_increasing_maps(a, b):
    p = mann_whitney(a, b).p_value
    assert mann_whitney(b, a).p_value == pytest.approx(p)
    assert mann_whitney([3 * x + 7 for x in a], [3 * x + 7 for x in b]).p_value == pytest.approx(p)
    assert mann_whitney(np.exp(a), np.exp(b)).p_value == pytest.approx(p)


def test_u_counts_pairs_and_known_values():
    test = mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert test.u == 0 and test.p_value == pytest.approx(2 / math.comb(10, 5))
    assert mann_whitney([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]).u == 25
    assert mann_whitney([1, 3], [2]).u == 1  # (3 > 2)
    assert mann_whitney([2, 2, 2], [2, 2, 2]).p_value == 1.0  # all tied: no evidence
    assert math.isnan(mann_whitney([], [1.0]).p_value)
    assert mann_whitney([1.0, math.nan, 2.0], [3.0]).n_a == 2  # NaN windows are left out


def test_normal_approximation_is_close_to_exact_where_they_meet():
    rng = np.random.default_rng(1)
    for shift in (0.0, 0.3, 0.6):
        a = np.round(rng.normal(0, 1, 31), 1)  # rounding makes ties
        b = np.round(rng.normal(shift, 1, 31), 1)
        approx = mann_whitney(a, b)
        assert approx.method == "normal" and len(a) + len(b) > EXACT_MAX_TOTAL
        ranks = midranks(np.concatenate([a, b]))
        doubled = np.rint(2 * ranks).astype(int)
        exact = _exact_p(doubled, len(a), int(doubled[: len(a)].sum()))
        assert approx.p_value == pytest.approx(exact, abs=0.01)


def test_smallest_attainable_p_and_trials_needed():
    assert smallest_p(3, 3) == pytest.approx(0.1)
    assert smallest_p(4, 4) == pytest.approx(2 / 70)
    assert trials_needed(0.05) == 4 and trials_needed(0.01) == 5


@given(
    st.lists(st.floats(0.5, 2.0), min_size=1, max_size=MIN_TRIALS - 1),
    st.lists(st.floats(5.0, 9.0), min_size=1, max_size=8),
)
def test_fewer_than_three_trials_are_never_significant(few, many):
    for a, b in ((few, many), (many, few)):
        change = judge("energy", a, b, alpha=0.99, min_change_pct=0)
        assert not change.significant
        assert f"need at least {MIN_TRIALS} per run" in change.verdict


def test_verdicts():
    a = [20.00, 20.01, 20.02, 20.03, 20.04]
    more = judge("energy", a, [x * 1.1 for x in a])
    assert more.significant and more.ratio == pytest.approx(1.1)
    assert more.verdict == "1.10× more energy, significant (p=0.0079)"
    faster = judge("time", a, [x / 2 for x in a])
    assert faster.verdict.startswith("2.00× faster, significant") and faster.change_pct == pytest.approx(-50)
    tiny = judge("energy", a, [x * 1.005 for x in a], min_change_pct=1.0)
    assert not tiny.significant and "under the 1 % minimum change (p=0.0079)" in tiny.verdict
    assert judge("energy", a, [x * 1.005 for x in a], min_change_pct=0).significant
    three = judge("energy", a[:3], [x * 2 for x in a[:3]])
    assert not three.significant
    assert three.verdict == (
        "2.00× more energy, not significant: with 3 and 3 trials no difference can reach p<0.05 "
        "(the smallest p is 0.1); measure at least 4 trials per run"
    )
    mixed = judge("energy", [1, 3, 5, 7, 9], [2, 4, 6, 8, 10])
    assert not mixed.significant and mixed.verdict.endswith("not significant (p=0.69)")
    assert judge("power", [math.nan] * 3, [1.0] * 3).verdict == "not measured in the reference"
    assert factor_text(1.0005, "time") == "0.05% slower"


def windows(phase_values, channels=("gpu0",), start=0.0):
    """A windows.csv-like frame: per phase a list of (time_per_iter_s, energy_per_iter_j)."""
    rows = []
    for phase, trials in phase_values.items():
        for trial, (t, e) in enumerate(trials):
            for channel in channels:
                rows.append(
                    {
                        "phase": phase,
                        "trial": trial,
                        "channel": channel,
                        "time_per_iter_s": t,
                        "energy_per_iter_j": e,
                        "mean_power_w": e / t,
                        "flags": "",
                    }
                )
    return pd.DataFrame(rows)


def test_rows_per_phase_channel_and_figure():
    a = windows({"conv1": [(1.0, 10.0), (1.1, 11.0), (0.9, 9.0)], "fc": [(2.0, 20.0)] * 3}, ("gpu0", "gpu1"))
    b = windows({"conv1": [(1.0, 12.0), (1.1, 13.0), (0.9, 11.0)], "new": [(1.0, 1.0)] * 3}, ("gpu0", "gpu1"))
    c = compare_trials(
        ["a", "b"],
        [a, b],
        channels=[{"gpu0"}, {"gpu0"}],
        kinds=[{"conv1": "layer"}, {}],
        derived=[{"summary.sum_energy_j": 30.0}, {"summary.sum_energy_j": 36.0}],
    )
    names = [(r.kind, r.name, r.channel, r.figure) for r in c.rows]
    # latency once per phase (channel ""), energy per selected channel; fc is only in a
    assert names == [
        ("layer", "conv1", "", "time"),
        ("layer", "conv1", "gpu0", "energy"),
        ("derived", "summary.sum_energy_j", "", "sum_energy_j"),
    ]
    energy = c.rows[1]
    assert energy.values == (10.0, 12.0) and energy.spreads[1].n == 3
    assert energy.changes[0] is None and energy.changes[1].ratio == pytest.approx(1.2)
    assert c.rows[0].changes[1].ratio == pytest.approx(1.0)
    derived = c.rows[2].changes[1]
    assert derived.ratio == pytest.approx(1.2) and derived.test is None and not derived.significant
    assert c.only_in == {"a": ("fc", "fc [gpu0]"), "b": ("new", "new [gpu0]")}


def test_three_runs_each_against_the_first():
    base = [(1.0, 10.0 + 0.01 * i) for i in range(5)]
    c = compare_trials(
        ["a", "b", "c"],
        [windows({"p": base}), windows({"p": [(t, e * 1.2) for t, e in base]}), windows({"p": base})],
        figures=("energy",),
    )
    (row,) = c.rows
    assert [ch.significant for ch in row.changes[1:]] == [True, False]
    with pytest.raises(ValueError, match="unknown figure"):
        compare_trials(["a", "b"], [windows({"p": base})] * 2, figures=("speed",))


def run_on(fake, **scenario):
    fake([gpu(**scenario.pop("gpu", {}))], **scenario)
    with ef.measure(power=[NVMLPowerSource(name="nvml", mode="thread")], sync=None) as m:
        for _ in range(3):
            with m.window("steady"):
                time.sleep(0.25)
    return m.result


def test_comparability_warnings_name_what_differs(fake_nvml):  # noqa: F811
    a = run_on(fake_nvml)
    b = run_on(
        fake_nvml,
        driver="570.86.15",
        gpu={
            "name": "NVIDIA H100 80GB HBM3",
            "power_limit_w": 500,
            "sm_clock_mhz": 1410,
            "clock_events": 0x4,
        },
    )
    warnings = comparability.check(["a", "b"], [a, b])
    text = "\n".join(warnings)
    assert "different GPU models: a: NVIDIA H200; b: NVIDIA H100 80GB HBM3" in text
    assert "different GPU drivers: a: 580.159.04; b: 570.86.15" in text
    assert "different GPU power limits: a: 700 W; b: 500 W" in text
    assert "SM clocks differ by more than 5% (median per phase, a, b): steady (1980, 1410 MHz)" in text
    assert (
        "throttled windows in some runs and not others (windows throttled, a, b): steady (0/3, 3/3: " in text
    )
    assert comparability.check(["a", "a2"], [a, a]) == []


def test_comparability_of_workloads_sources_and_status(tmp_path, power_csv):
    csv = power_csv(100.0, duration_s=5.0)
    config = ef.RunSettings(trials=3, min_window_s=0.02)
    a = ef.run("sleep:seconds=0.02", power=[f"replay:file={csv}"], reporters=[], settings=config)
    b = ef.run("sleep:seconds=0.03", power="none", reporters=[], settings=config)
    text = "\n".join(comparability.check(["a", "b"], [a, b]))
    assert "workload options differ, a vs b: seconds=0.02 vs 0.03" in text
    assert "different power sources: a: replay; b: none (timing only)" in text
    incomplete = type(b)(
        {**b.meta, "status": "incomplete", "reason": "interrupted by SIGINT"}, b.windows, b.samples
    )
    assert "run b is incomplete (interrupted by SIGINT)" in "\n".join(
        comparability.check(["a", "b"], [a, incomplete])
    )


def test_the_cli_defaults_are_the_comparisons():
    from energyframe.cli import compare as compare_cli
    from energyframe.compare import statistics as compare

    assert (compare_cli.ALPHA, compare_cli.MIN_CHANGE_PCT) == (compare.DEFAULT_ALPHA, compare.DEFAULT_MIN_CHANGE_PCT)
