"""benchmarks/tick_coupling.py: the lag from each counter tick to a cue's next change, the share
of updates a cue repeated its value (on given times), and a recording through the fake NVML
(what it writes, not its timings)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tick_coupling as tc  # noqa: E402


def test_each_tick_is_paired_with_the_cues_first_change_after_it():
    ticks = np.array([1.000, 1.100, 1.200, 1.300])
    cue = np.array([0.912, 0.998, 1.113, 1.350])  # none within 40 ms of 1.2, one 50 ms after 1.3
    lag = tc.lags(ticks, cue)
    # a change stamped 2 ms before the tick's stamp follows it (both within their brackets)
    assert lag[:2] == pytest.approx([-0.002, 0.013])
    assert np.isnan(lag[2]) and np.isnan(lag[3])


def test_a_gap_of_several_periods_counts_the_updates_that_repeated_their_value():
    stamps = np.array([0.0, 0.1, 0.2, 0.4, 0.5, 0.8])  # gaps of 1, 1, 2, 1, 3 periods
    period, repeated = tc.repeated_share(stamps)
    assert period == pytest.approx(0.1)
    assert repeated == pytest.approx(3 / 8)


def test_a_change_is_stamped_between_the_starts_of_the_reads_around_it():
    rows = np.array([[1.0, 1.003, 5.0], [1.004, 1.007, 5.0], [1.008, 1.011, 6.0], [1.012, 1.015, 6.0]])
    assert tc.changes(rows, 2, 0.0, 2.0) == pytest.approx([1.006])
    assert tc.changes(rows, 2, 1.007, 2.0).size == 0


def test_the_lags_own_spread_is_what_the_counters_bracket_does_not_explain():
    rng = np.random.default_rng(3)
    bracket = 0.004
    lag = 0.012 + rng.normal(0, 0.001, 4000) + rng.uniform(-bracket / 2, bracket / 2, 4000)
    assert tc.spread_ms(lag, bracket) == pytest.approx(1.0, rel=0.1)


@pytest.mark.slow
def test_it_records_the_cues_alone_and_beside_the_counter_on_the_fake_nvml(tmp_path):
    # a new power level half-way between two counter updates, so that each update reads a new one
    profile = [[0.1 * i + 0.05, 300 + (i % 7) * 10] for i in range(100)]
    scenario = {"t0_wall": time.time(), "gpus": [{"uuid": "GPU-52dfc441-e9da-23f3-17f9-2b876aae0d10",
                "name": "NVIDIA H200", "profile": profile, "field_cost_s": 0.0005}]}  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps(scenario))
    out = tmp_path / "out"
    code = (
        "import time, tick_coupling as t; from pathlib import Path; "
        f"t.record(Path({str(out)!r}), 1.0, 0.0005, {{'idle': lambda: time.sleep(1.5)}}); "
        f"t.analyse(Path({str(out)!r}))"
    )
    fake = str(Path(__file__).parents[1] / "fake_nvml")
    env = {"FAKE_NVML_SCENARIO": str(tmp_path / "s.json"), "PYTHONPATH": f"{fake}:{BENCH}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (head,) = [line for line in done.stdout.splitlines() if line.startswith("| load")]
    header = [c.strip() for c in head.strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
            for line in done.stdout.splitlines() if line.startswith("| idle")]  # fmt: skip
    # each cue, read alone and beside the counter; only the second pairs ticks with cue changes
    assert [(r["counter read"], r["cue"]) for r in rows] == [
        ("no", "instant"), ("no", "average"), ("yes", "instant"), ("yes", "average")
    ]  # fmt: skip
    assert all(r["ticks"] == "-" and r["lag ms p5/p50/p95"] == "-" for r in rows[:2])
    for r in rows[2:]:
        assert int(r["ticks"]) > 0 and int(r["cue changes"]) > 0
        assert len(r["lag ms p5/p50/p95"].split(" / ")) == 3
    # both processes' raw reads are kept, for --analyse
    assert sorted(p.name for p in out.glob("*.npy")) == ["run0-cues.npy", "run1-counter.npy", "run1-cues.npy"]
