"""The analysis of the sampler benchmarks (no GPU): the overhead ratio's interval, paired by
round, and the tick-schedule summary against a known truth."""

import random

import numpy as np
import pytest

from tests.conftest import load_benchmark


def runs(slowdown, rounds=8, windows=12, cv=0.02, drift=0.05, seed=0):
    """Windows' times per iteration of 'none' and 'nvml' in each round; each round's level drifts
    by up to ``drift`` (the GPU warming, the host's load), the same for both configurations."""
    rng = random.Random(seed)
    out = []
    for k in range(rounds):
        level = 0.004 * (1 + rng.uniform(-drift, drift))
        for config, factor in (("none", 1.0), ("nvml", 1.0 + slowdown)):
            times = [level * factor * (1 + rng.gauss(0, cv)) for _ in range(windows)]
            out.append({"workload": "resnet50", "config": config, "round": k, "time_per_iter_s": times,
                        "edge_s": [0.001] * windows, "wall_s": 3.0, "tree_cpu_s": 3.3,
                        "sampler_cpu_share": 0.04 if config == "nvml" else None,
                        "polls_per_tick_on_grid": 2.8 if config == "nvml" else None})
    return out


def test_a_one_percent_slowdown_is_resolved_and_none_is_not_invented():
    bench = load_benchmark("sampler_overhead")
    ratio, lo, hi = bench.paired_interval(runs(0.01), "nvml")
    assert ratio == pytest.approx(1.01, abs=0.004)
    assert 1.0 < lo < ratio < hi < 1.02  # 96 windows a configuration tell 1 % from nothing
    ratio, lo, hi = bench.paired_interval(runs(0.0, seed=1), "nvml")
    assert lo < 1.0 < hi
    lines = bench.table(runs(0.01), ["none", "nvml"])
    assert lines[2].startswith("| resnet50 | none | ") and "| 1.0000 [1.0000, 1.0000] |" in lines[2]
    assert lines[3].startswith("| resnet50 | nvml | ") and "| 4.0 % | 2.80 |" in lines[3]


def test_the_tick_schedule_summary_measures_stamps_against_the_fakes_truth():
    bench = load_benchmark("tick_schedule")
    t0, offset = 1000.0, 0.0
    rng = np.random.default_rng(0)
    ticks = t0 + 0.05 + 0.1 * np.arange(1, 101) + rng.uniform(-0.002, 0.002, 100)
    ticks[50] += 0.03  # one stamped across a stall
    run = {
        "ticks_s": list(ticks), "instant_s": list(ticks[::2] + 0.001), "wall_offset_s": offset,
        "acquisition": {"cpu_share": 0.05, "tick_brackets_s": {"gpu0": {"median": 0.004, "p95": 0.005}},
                        "loops": {"nvml-gpu0": {"polls": 300, "polls_per_tick_on_grid": 2.7, "early": 0,
                                                "wide": 1, "grid_found": 1, "grid_lost": 0}}},
    }
    s = bench.summary([run], {"t0_wall": t0 + 0.05})
    assert s["ticks"] == 100 and s["off_grid"] == 1 and s["widening"] == 1
    assert s["error_ms"][2] == pytest.approx(32.0, abs=2.1) and s["error_ms"][0] < 1.5
    assert s["instant_at_ticks"] == 1.0 and s["polls_per_tick"] == 3.0 and s["wide"] == 1
