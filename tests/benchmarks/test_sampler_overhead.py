"""The analysis of the sampler benchmarks (no GPU): the overhead ratio's interval, paired by
round, and the tick-schedule summary against a known truth."""

import json
import os
import random
import time
from pathlib import Path

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


def test_the_paired_ratio_resolves_one_percent_and_says_how_many_pairs_it_takes():
    bench = load_benchmark("sampler_overhead")
    rng = random.Random(4)
    levels = [0.014 * (1 + rng.uniform(-0.25, 0.25)) for _ in range(60)]  # the host drifting ±25 %
    off = [lv * (1 + rng.gauss(0, 0.01)) for lv in levels]
    on = [lv * 1.01 * (1 + rng.gauss(0, 0.01)) for lv in levels]
    q = bench.paired_ratio(on, off)
    # each pair ran seconds apart: the drift between pairs cancels, the 1 % stands out
    assert q["ratio"] == pytest.approx(1.01, abs=0.004) and 1.0 < q["lo"] < q["hi"] < 1.02
    assert q["pairs"] == 60 and q["pairs_for_1pct"] < 60
    same = bench.paired_ratio(off[1:] + off[:1], off)  # no effect, but pairs taken apart in time
    assert same["lo"] < 1.0 < same["hi"] and same["pairs_for_1pct"] > 60
    assert bench.paired_ratio([1.0], [1.0])["pairs_for_1pct"] is None


@pytest.mark.slow
def test_the_paired_design_stops_the_sampler_in_its_off_windows(fake_nvml, tmp_path, capsys):
    fake_nvml()
    bench = load_benchmark("sampler_overhead")
    partial = tmp_path / "paired-launch.partial.json"
    kept = []
    checkpoint = bench.Checkpoint(partial, {"workload": "launch", "iterations": 150, "sampler": "grid"})

    def on_group(times):
        checkpoint(times)
        kept.append(json.loads(partial.read_text()))

    # windows of ~0.2 s, each after 0.1 s in its state
    row = bench.paired_run(
        lambda: time.sleep(0.001), lambda: None, iterations=150, pairs=3, settle_s=0.1, on_group=on_group
    )
    assert len(row["on"]) == len(row["off"]) == 3
    # what a run cut short keeps: every group so far, written as each ends
    assert [len(k["off"]) for k in kept] == [1, 2, 3] and kept[-1]["on"] == row["on"]
    capsys.readouterr()
    assert bench.pool([partial, partial]) == 0  # two runs' pairs pooled
    line = capsys.readouterr().out.splitlines()[2]
    assert line.startswith("| launch | 6 | 2 runs pooled |")
    samples = row["result"].samples  # Unix seconds; the spans are monotonic
    clocks = samples[samples["channel"] == "gpu0.sm_clock"]["time_s"].to_numpy()
    mono = clocks - (time.time() - time.monotonic())

    def inside(span, margin=0.02):
        return int(((mono > span[0] + margin) & (mono < span[1] - margin)).sum())

    # the sampler read the clocks while it ran (its first read comes as it starts), and nothing
    # while it was stopped
    assert mono.size > 0
    assert all(inside(span) == 0 for span in row["spans"]["off"])
    assert row["result"].complete


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_the_paired_design_can_keep_the_sampler_off_the_workloads_cpus(fake_nvml):
    fake_nvml()
    bench = load_benchmark("sampler_overhead")
    allowed = sorted(os.sched_getaffinity(0))
    row = bench.paired_run(lambda: time.sleep(0.001), lambda: None, iterations=50, pairs=1, settle_s=0.05, pin=True)
    # every thread of the sampler process on the last CPU, every thread here on the others
    assert row["bound"]["sampler"] and all(c == allowed[-1:] for c in row["bound"]["sampler"])
    assert row["bound"]["workload"] and all(c == allowed[:-1] for c in row["bound"]["workload"])
    assert sorted(os.sched_getaffinity(0)) == allowed  # given back afterwards
    assert len(row["on"]) == len(row["off"]) == 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_pinned_windows_are_bound_for_their_window_only_and_paired_with_the_same_stopped_ones(fake_nvml):
    fake_nvml()
    bench = load_benchmark("sampler_overhead")
    allowed = sorted(os.sched_getaffinity(0))
    seen: list[tuple[float, list[int]]] = []

    def step():
        seen.append((time.monotonic(), sorted(os.sched_getaffinity(0))))
        time.sleep(0.001)

    states = ("on", "pinned", "off")
    row = bench.paired_run(step, lambda: None, iterations=20, pairs=2, settle_s=0.02, states=states)
    assert row["states"] == list(states) and all(len(row[s]) == 2 for s in states)

    def bound_in(span):
        return {tuple(a) for t, a in seen if span[0] <= t <= span[1]}

    # the workload ran on all but the last CPU in its pinned windows, on all of them in the others
    assert all(bound_in(span) == {tuple(allowed[:-1])} for span in row["spans"]["pinned"])
    assert all(bound_in(span) == {tuple(allowed)} for span in row["spans"]["on"] + row["spans"]["off"])
    assert sorted(os.sched_getaffinity(0)) == allowed
    lines = bench.paired_table([{**row, "workload": "launch", "iterations": 20}])
    assert [line.split(" |")[0] for line in lines[2:]] == ["| launch", "| launch (pinned)"]
    with pytest.raises(SystemExit):
        bench.paired_states("on,pinned")


def test_a_paired_run_with_a_deadline_ends_on_a_whole_group(fake_nvml):
    fake_nvml()
    bench = load_benchmark("sampler_overhead")
    row = bench.paired_run(
        lambda: time.sleep(0.001), lambda: None, iterations=20, pairs=1000, settle_s=0.02,
        until_s=time.monotonic() + 2.5,
    )
    # the deadline came long before 1000 groups of ~0.1 s; every group it began ended whole
    assert len(row["on"]) == len(row["off"]) < 1000
    assert row["result"].complete


@pytest.mark.slow
def test_two_stopped_windows_in_a_row_lose_no_power_samples(fake_nvml):
    fake_nvml()
    bench = load_benchmark("sampler_overhead")
    # seed 0 draws (off, on), (on, off), (off, on): the second and third groups stop the sampler
    # twice in a row, ~2.6 s in all: beyond the fake driver's 2.38-s buffer, as on an H200
    row = bench.paired_run(lambda: time.sleep(0.01), lambda: None, iterations=120, pairs=3, settle_s=0.1)
    assert len(row["off"]) == 3
    warnings = row["result"].meta.get("warnings") or []
    assert not [w for w in warnings if "lost" in str(w)], warnings


def test_the_h200_pairs_pool_to_the_figures_in_the_docs(capsys):
    # the paired runs of docs/validation.md ("2026-11-29 (evening)"), kept so that later runs can
    # be pooled with them: one cut short by its time box, one with pinned windows, resnet50
    bench = load_benchmark("sampler_overhead")
    recorded = Path(__file__).parents[1] / "fixtures" / "sampler-overhead-h200"
    names = ["launch-cut-short.partial.json", "launch-on-pinned-off.json", "resnet50.json"]
    assert bench.pool([recorded / n for n in names]) == 0
    rows = {line.split(" | ")[0]: line.split(" | ")[1:4] for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["| launch"] == ["179", "2 runs pooled", "0.9989 [0.9811, 1.0176]"]
    assert rows["| launch (pinned)"] == ["100", "1 run pooled", "0.9853 [0.9627, 1.0078]"]
    assert rows["| resnet50"] == ["90", "1 run pooled", "0.9948 [0.9709, 1.0195]"]
