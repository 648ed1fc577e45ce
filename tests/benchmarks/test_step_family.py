"""The step-family benchmark's analysis of a recorded run, on a simulated one (no GPU): the run
is saved and read back in the real run format, with its "period" and "on" windows."""

import math

import numpy as np
import pandas as pd
import pytest

from energyframe.core.clock import ClockModel, ClockPair
from energyframe.core.edge import Evidence
from energyframe.core.fusion import fused_channels
from energyframe.core.windows import compute_windows
from energyframe.results.result import RunResult
from energyframe.results.store import FORMAT_VERSION
from tests.conftest import load_benchmark

UNIX_0 = 1.79e9


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    sim = load_benchmark("step_sim")
    square = sim.square_load(np.random.default_rng(4), 0.1, 0.2, "cap", periods=60)
    channels, series = sim.read(square.trace, np.random.default_rng(5))
    samples = pd.concat(
        [
            pd.DataFrame({"source": "nvml", "channel": n, "time_s": UNIX_0 + s.times_s, "value": s.values, "unit": ""})
            for n, s in series.items()
        ],
        ignore_index=True,
    )
    results = {}
    channels, series = fused_channels(channels, series, results=results)
    evidence = {n: Evidence.of(r) for n, r in results.items()}
    clock = ClockModel(ClockPair(UNIX_0, 0.0, 0.0))
    windows = compute_windows(square.records + square.bursts, channels, series, clock, evidence=evidence)
    meta = {
        "format_version": FORMAT_VERSION,
        "status": "complete",
        "clock": clock.to_json(),
        "sources": [
            {
                "name": "nvml",
                "info": {"driver_version": "0", "gpus": [{"name": "Simulated GPU"}]},
                "channels": [c.to_json() for n, c in channels.items() if not n.endswith(".fused")],
            }
        ],
    }
    directory = tmp_path_factory.mktemp("step-family")
    RunResult(meta, windows, samples).save(directory)
    return directory, square


@pytest.mark.slow
def test_the_analysis_of_a_recorded_run_reads_the_truth_and_every_method(recorded):
    directory, square = recorded
    bench = load_benchmark("step_family")
    zeus = [(r.start_s, r.end_s, 42.0) for r in square.records[1::2]]
    out = bench.analyse_steps(directory, zeus, 0.2)
    truth, energy, bound, estimators, flags = out[bench.DEFAULT]
    exact = np.array([float(square.trace.window_j(r.start_s, r.end_s)) for r in square.records])
    known = np.isfinite(truth)
    assert known.sum() >= len(exact) - 2  # the first and last periods may lack a tick interval
    # the cycle truth from the counter alone, against the simulated load's exact energy
    assert np.median(np.abs(truth[known] / exact[known] - 1)) < 0.005
    row = bench.table_row("100/200 ms cap", out)
    assert row["methods"][bench.DEFAULT]["median_abs_pct"] < 1.0
    assert row["methods"][bench.COUNTER]["n"] == row["methods"][bench.DEFAULT]["n"]
    assert row["methods"][bench.ZEUS]["n"] >= len(zeus) - 1  # the last period may lack its closing tick
    # each edge as its evidence says: near a tick the interpolation is as good, elsewhere fused
    assert set(row["estimators"]) <= {"counter", "fused", "counter/fused", "fused/counter"}
    assert sum(row["estimators"].values()) == len(exact)
    assert 0 < row["bound"]["coverage"] <= 1
    # how far the simulated run's truth moves when fitted otherwise: the unflagged windows, each
    # with a finite move, small on cycles that repeat
    moves = out[bench.TRUTH_MOVES]
    assert moves.shape == truth.shape and np.all(moves[known] >= 0)
    assert row["truth_moves"]["n"] == row["confident"]["n"]
    assert row["truth_moves"]["median_pct"] < 1.0
    # the idle truth of the windows whose edges lie in settled idle (200 ms of idle: most of
    # them), against the exact energy: only the ticks' stamps at idle power (±2 ms) move it
    idle = out[bench.IDLE_TRUTH][bench.DEFAULT]
    settled = np.isfinite(idle)
    assert settled.sum() >= 0.8 * len(exact)
    assert np.max(np.abs(idle[settled] / exact[settled] - 1)) < 0.01
    assert np.median(np.abs(idle[settled] / exact[settled] - 1)) < 0.002
    assert row["idle_truth"][bench.DEFAULT]["n"] == int((settled & ~np.isin(flags, ["short_window"])).sum())
    assert row["idle_truth"][bench.ZEUS]["n"] >= 0.8 * len(zeus)
    assert row["idle_truth"]["cycle_truth"]["median_abs_pct"] < 1.0


def test_the_simulated_table_prints_every_method(tmp_path, capsys):
    bench = load_benchmark("step_family")
    bench.FAMILY = bench.FAMILY[:1]
    bench.STEADY_S = (1.0,)
    assert bench.main(["--simulate", "--seeds", "1", "--out", str(tmp_path / "t.json")]) == 0
    printed = capsys.readouterr().out
    assert "50/100 ms cap" in printed and "steady 1000 ms cap" in printed
    assert "Zeus" in printed and "inside bound" in printed


@pytest.mark.slow
def test_held_out_ticks_judge_the_default_against_the_counter_itself(recorded):
    directory, square = recorded
    bench = load_benchmark("step_family")
    held = load_benchmark("held_out_ticks")
    run, _, placement = bench.placed(RunResult.load(directory))
    windows = held.held_out(run.channels, placement.series)
    ticks = run.series["gpu0"]
    for span, k in held.SPANS.items():
        w = windows[span]
        # every hidden tick of both parities opens a window but the first and the last few
        assert len(w) >= len(ticks) - 2 * (k + 3)
        truth, energy, bound, truth_sd = w.T
        # the truth is the counter between two hidden ticks, k kept ticks apart: a difference
        # of counter values, which is a sum of tick increments of the run's own counter
        increments = np.diff(ticks.values)
        assert set(np.round(truth, 6)) <= {
            round(float(increments[i : i + 2 * k].sum()), 6) for i in range(len(increments) - 2 * k + 1)
        }
        # and the default, from the other ticks and the samples, is close to it
        assert np.median(np.abs(energy / truth - 1)) < 0.02
        assert np.all(bound > 0)
        # the truth's own sd: the ticks' measured stamp spread at the power of two hidden ticks,
        # between idle's and the cap's
        spread_s = held.stamp_sd_s(placement.series["gpu0"].times_s)
        assert 0.0 < spread_s < 0.003
        assert np.all(truth_sd >= spread_s * math.sqrt(2) * 50.0) and np.all(truth_sd <= spread_s * math.sqrt(2) * 760.0)
    stats = held.held_out_stats(windows)
    assert stats["200 ms"]["n"] == len(windows["200 ms"])
    assert 0.0 <= stats["1 s"]["coverage"] <= 1.0 and stats["1 s"]["median_abs_pct"] < stats["200 ms"]["median_abs_pct"]
    row = bench.held_out_row(directory)
    assert row["held_out"] == stats
    # the simulation stamps its ticks within +-2 ms, on a cadence of 100 +- 1.5 ms
    assert row["stamps_ms"]["p95"] < 3.5 and row["stamps_ms"]["max"] < 6.0
    assert row["stamps_ms"]["sd"] == pytest.approx(1e3 * spread_s)


def test_the_ticks_stamp_spread_is_measured_on_the_run_and_widens_the_truth():
    held = load_benchmark("held_out_ticks")
    rng = np.random.default_rng(3)
    # ticks every 100 ms stamped with a 0.5-ms jitter, and a few stamped 20 ms late that a
    # robust spread does not follow
    times = 0.1 * np.arange(2000) + rng.normal(0.0, 0.0005, 2000)
    times[::200] += 0.02
    assert held.stamp_sd_s(times) == pytest.approx(0.0005, rel=0.1)
    assert math.isnan(held.stamp_sd_s(times[:21]))  # too few ticks for a grid
    # windows of truth 100 J: errors of 1, 2 and 3 J, a bound of 1.5 J, the truth's sd 0 or 1 J
    windows = {"200 ms": np.array([[100.0, 101.0, 1.5, 0.0], [100.0, 102.0, 1.5, 1.0], [100.0, 103.0, 1.5, 1.0]])}
    stats = held.held_out_stats(windows)["200 ms"]
    assert stats["coverage"] == pytest.approx(1 / 3)
    # widened by 1.96 J: hypot(1.5, 1.96) = 2.47 J holds the 2-J error, not the 3-J one
    assert stats["coverage_with_truth_stamps"] == pytest.approx(2 / 3)
    windows["200 ms"][:, 3] = np.nan  # a spread that could not be measured leaves the rest
    stats = held.held_out_stats(windows)["200 ms"]
    assert stats["n"] == 3 and math.isnan(stats["coverage_with_truth_stamps"])


def test_a_bound_sized_in_hindsight_reads_the_least_ratio():
    bench = load_benchmark("step_family")
    rng = np.random.default_rng(7)
    truth = np.full(400, 100.0)
    error = rng.standard_t(3, 400)  # heavy tails: the least ratio is well above a Gaussian's 2.91
    energy = truth + error
    least = bench.bound_stats(truth, energy, np.ones(400))["least_ratio"]
    # the narrowest bound of one size that holds 95 % of the windows reads exactly that ratio
    p95 = np.quantile(np.abs(error), 0.95)
    sized = bench.bound_stats(truth, energy, np.full(400, p95))
    assert sized["coverage"] >= 0.95
    assert sized["ratio"] == pytest.approx(least)
    # a narrower bound of one size holds fewer than 95 %
    narrower = bench.bound_stats(truth, energy, np.full(400, 0.97 * p95))
    assert narrower["coverage"] < 0.95 and narrower["ratio"] < least
    assert least > 3.0
    # Gaussian errors read close to 1.96 / 0.674
    many = np.full(20000, 100.0)
    gauss = bench.bound_stats(many, many + rng.standard_normal(20000), np.ones(20000))["least_ratio"]
    assert gauss == pytest.approx(2.91, abs=0.1)


def test_only_a_bound_that_ranks_the_errors_reads_below_the_least_ratio():
    bench = load_benchmark("step_family")
    rng = np.random.default_rng(11)
    # windows of two kinds: most err by ~0.2 J, one in ten by ~3 J (heavy tails, as on load steps)
    scale = np.where(rng.random(2000) < 0.1, 3.0, 0.2)
    truth = np.full(2000, 100.0)
    energy = truth + scale * rng.standard_normal(2000)
    knows = bench.bound_stats(truth, energy, 1.96 * scale)  # a bound that knows each window's scale
    assert knows["rank_correlation"] > 0.4
    assert knows["coverage"] >= 0.94 and knows["ratio"] < knows["least_ratio"]
    blind = bench.bound_stats(truth, energy, 1.96 * rng.permutation(scale))  # the same sizes, shuffled
    assert abs(blind["rank_correlation"]) < 0.1 and blind["coverage"] < 0.9
    # a bound of one size ranks nothing: no correlation to read
    assert math.isnan(bench.bound_stats(truth, energy, np.ones(2000))["rank_correlation"])


def test_the_truth_moves_are_counted_against_each_window_s_own_error():
    bench = load_benchmark("step_family")
    truth = np.array([100.0, 100.0, 100.0, 50.0, 100.0])
    energy = np.array([101.0, 100.2, 97.0, 51.0, 130.0])  # errors 1, 0.2, 3, 2, 30 %
    moves = np.array([0.5, 0.5, 4.0, 0.5, 1.0])  # J: 0.5, 0.5, 4, 1, 1 %
    judged = np.array([True, True, True, True, False])  # the last is flagged short: not judged
    m = bench.truth_moves(truth, energy, moves, judged)
    assert m["n"] == 4
    assert m["beyond"] == 2  # 1 % > 0.5 % and 2 % > 1 %; 0.2 % and 3 % lie within their moves
    assert m["max_pct"] == pytest.approx(4.0) and m["median_pct"] == pytest.approx(0.75)
    assert m["worst_window_pct"] == pytest.approx(4.0)  # the 3-% window's truth moves 4 %


def test_an_unknown_configuration_is_refused_with_the_family_s_names(capsys):
    bench = load_benchmark("step_family")
    with pytest.raises(SystemExit) as stop:
        bench.main(["--out", "x.json", "--only", "200/300 ms cap, 300/300 ms cap"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "'300/300 ms cap'" in err and "200/300 ms cap" in err and "steady 1000 ms cap" in err
