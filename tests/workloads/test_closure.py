"""Per-layer sums against the whole model: the launch-gap correction's arithmetic and the cause
every residual carries."""

import math

import pytest

from energyframe.workloads.closure import (
    ClosureContext,
    UnitFigures,
    WholeFigures,
    close,
    gap_per_kernel_s,
    residual_cause,
    unit_gap_s,
)


def units_matching(busy_s_per_forward):
    """Three single-kernel units (one called twice) whose isolated times add up to
    ``busy_s_per_forward``, at different powers."""
    shares = [(2, 0.4, 200.0), (1, 0.35, 250.0), (1, 0.25, 150.0)]  # calls, share of busy, power
    out = []
    for i, (calls, share, power) in enumerate(shares):
        t = share * busy_s_per_forward / calls
        out.append(UnitFigures(f"u{i}", calls, t, t * power, kernels=1, graph=True))
    return out


def test_gap_is_the_graphs_idle_time_per_kernel():
    whole = WholeFigures(latency_s=1.0e-3, energy_j=0.2, kernels=100, busy_s=0.8e-3)
    assert gap_per_kernel_s(whole) == pytest.approx(2e-6)
    assert math.isnan(gap_per_kernel_s(WholeFigures(1e-3, 0.2)))  # not profiled


def test_units_whose_kernels_match_the_model_close_once_the_gaps_are_added():
    busy = 0.8e-3
    units = units_matching(busy)
    kernels = sum(u.calls for u in units)
    whole = WholeFigures(latency_s=1.0e-3, energy_j=0.21, kernels=kernels, busy_s=busy)
    c = close(units, whole, ClosureContext())
    g = (1.0e-3 - busy) / kernels
    assert c.gap_per_kernel_s == pytest.approx(g)
    assert c.gap_calls == kernels
    assert c.sum_latency_s == pytest.approx(busy)
    assert c.latency_diff_pct == pytest.approx(-20.0)
    assert c.gaps_latency_s == pytest.approx(kernels * g)
    assert c.corrected_latency_diff_pct == pytest.approx(0.0, abs=1e-9)
    # the gaps' energy is at each unit's own power
    assert c.gaps_energy_j == pytest.approx(sum(u.calls * g * u.power_w for u in units))
    assert c.corrected_energy_diff_pct == pytest.approx(100 * ((c.sum_energy_j + c.gaps_energy_j) / 0.21 - 1))
    terms = [r["term"] for r in c.rows]
    assert terms == ["whole model", "sum of units", "launch gaps (measured)", "residual"]
    assert c.rows[-1]["latency_pct"] == c.corrected_latency_diff_pct
    assert c.rows[-1]["latency_s"] == pytest.approx(c.sum_latency_s + c.gaps_latency_s - whole.latency_s)
    assert all(r["cause"] for r in c.rows)
    assert "single-kernel unit calls x g = (T - B)/K" in c.rows[2]["cause"]


def test_only_single_kernel_graphs_get_a_gap():
    single = UnitFigures("conv", 3, 1e-5, 2e-3, kernels=1, graph=True)
    block = UnitFigures("block", 2, 5e-5, 1e-2, kernels=9, graph=True)
    eager = UnitFigures("eager", 1, 1e-5, 2e-3, kernels=1, graph=False)
    assert unit_gap_s(single, 1e-6) == 1e-6
    assert unit_gap_s(block, 1e-6) == 0.0 and unit_gap_s(eager, 1e-6) == 0.0
    whole = WholeFigures(2e-4, 0.05, kernels=22, busy_s=1.5e-4)
    c = close([single, block, eager], whole, ClosureContext())
    assert c.gap_calls == 3
    assert c.gaps_latency_s == pytest.approx(3 * c.gap_per_kernel_s)
    # the profile and the decomposition agree on the kernels per forward: no mismatch reported
    assert "the profile counted 22 kernels per forward, the decomposition 22 ops" not in c.rows[2]["cause"]
    assert "22 kernels per forward" in c.rows[2]["cause"]


def test_without_a_profile_the_residual_says_the_gaps_were_not_measured():
    units = units_matching(0.8e-3)
    c = close(units, WholeFigures(1.0e-3, 0.21), ClosureContext(gaps_note="kernel_gaps=true measures them"))
    assert [r["term"] for r in c.rows] == ["whole model", "sum of units", "residual"]
    assert math.isnan(c.gaps_latency_s) and c.corrected_latency_diff_pct == c.latency_diff_pct
    assert (
        "launch gaps between different kernels, not measured (kernel_gaps=true measures them)"
        in c.residual_cause
    )


def test_residual_within_the_noise():
    assert residual_cause(0.5, -0.8, ClosureContext()).startswith("within the noise")
    # a large spread widens the floor
    assert residual_cause(3.0, 2.0, ClosureContext(spread_pct=2.0)).startswith(
        "within the noise (|diff| <= 4 %"
    )
    assert not residual_cause(3.0, 2.0, ClosureContext(spread_pct=0.5)).startswith("within the noise")


def test_units_faster_alone_point_at_their_cache_state():
    cause = residual_cause(-6.0, -5.5, ClosureContext(activations="reuse", l2="warm"))
    assert "kernels ran faster alone than in the model" in cause
    assert "re-reads its own inputs" in cause and "weights stay in the L2" in cause


def test_units_slower_alone_with_weights_that_fit_in_the_l2():
    cause = residual_cause(
        5.0, 9.6, ClosureContext(l2="rotate", weights_bytes=22_000_000, l2_bytes=60_000_000)
    )
    assert "weights (22 MB) fit in the L2 (60 MB)" in cause
    # energy up more than time: the units drew more power too
    assert "units alone drew 4.38 % higher power" in cause


def test_power_alone_differs_at_the_same_time():
    cause = residual_cause(0.2, -4.0, ClosureContext())
    assert cause == "units alone drew 4.19 % lower power than the model (clocks, power cap)"


def test_timing_only_runs_are_judged_on_latency():
    cause = residual_cause(
        -8.0, math.nan, ClosureContext(eager_units=28, gaps_note="no CUDA graph on the CPU")
    )
    assert cause.startswith("28 unit(s) ran eagerly")
    assert cause.endswith("no energy measured")
    assert residual_cause(math.nan, math.nan, ClosureContext()).startswith("not known")


def test_a_profiled_graph_splits_the_residual_into_gaps_and_kernel_time_without_adding_them():
    # units whose kernels add up to 60 % of the model's 80 % busy time: 20 points of the -40 %
    # are launch gaps (single-kernel units), 20 kernel time the units did not spend
    busy = 0.8e-3
    units = units_matching(0.6e-3)
    kernels = sum(u.calls for u in units)
    whole = WholeFigures(latency_s=1.0e-3, energy_j=0.2, kernels=kernels, busy_s=busy)
    c = close(units, whole, ClosureContext(), add_gaps=False)
    assert c.corrected_latency_diff_pct == c.latency_diff_pct == pytest.approx(-40.0)
    assert [r["term"] for r in c.rows] == ["whole model", "sum of units", "residual"]
    assert c.residual_cause.startswith(
        "measured (the model's graph profiled: 4 kernels, 0.8 ms busy of 1 ms): -20 % are launch gaps "
        "the 4 single-kernel unit calls leave out, -20 % kernel time: the units' kernels ran faster alone"
    )
    assert "not measured" not in c.residual_cause
    # added, the gaps are a row of their own and the split names the kernel time alone
    added = close(units, whole, ClosureContext())
    assert added.corrected_latency_diff_pct == pytest.approx(-20.0)
    assert "-20 % kernel time" in added.residual_cause


def test_more_kernels_in_the_model_than_ops_in_the_units_are_named():
    units = units_matching(0.8e-3)
    whole = WholeFigures(latency_s=1.0e-3, energy_j=0.2, kernels=9, busy_s=0.8e-3)
    c = close(units, whole, ClosureContext(), add_gaps=False)
    assert "the model's graph runs 9 kernels per forward where the units run 4 ops" in c.residual_cause


def test_a_whole_model_that_ran_eagerly_is_the_first_cause():
    cause = residual_cause(-56.0, -46.0, ClosureContext(whole_eager="eager: CUDA graph capture failed (x)"))
    assert cause.startswith(
        "the whole model ran eagerly (eager: CUDA graph capture failed (x)), its time set by the host's "
        "launches, while the units ran as CUDA graphs"
    )


def test_the_sum_row_says_how_the_units_ran():
    whole = WholeFigures(latency_s=1.0e-3, energy_j=0.2)
    graphs = close(units_matching(0.8e-3), whole, ClosureContext())
    assert "(a CUDA graph of its calls)" in graphs.rows[1]["cause"]
    # a CPU run (issue 40: the row said "a CUDA graph of its calls" where none was)
    eager = [UnitFigures(u.name, u.calls, u.latency_s, u.energy_j, u.kernels, graph=False) for u in units_matching(0.8e-3)]
    row = close(eager, whole, ClosureContext(eager_units=3))
    assert row.rows[1]["cause"] == "each unit measured on its own (eagerly), times its calls in the forward"
