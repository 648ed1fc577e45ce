"""benchmarks/tick_coupling.py's verdicts on a watched tick: which changed first, the counter or a
cue, and by at least how much; and a run through the fake NVML."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tick_coupling as tc  # noqa: E402


def tick(probe, changes, checks, counter=100.0):
    return {"probe": probe, "changes": changes, "checks": checks, "counter": counter}


def test_a_probe_that_saw_the_counter_new_before_the_cue_changed_is_a_lead():
    t = tick(probe=[1.000, 101.0], changes=[(1.010, 1.0103), None], checks=[[1.0104, 101.0]])
    verdict, size_ms = tc.classify(t, 0)
    assert verdict == "lead" and size_ms == pytest.approx(10.0)
    assert tc.classify(t, 1) == ("silent", pytest.approx(float("nan"), nan_ok=True))


def test_a_check_after_the_cue_changed_that_still_saw_the_old_counter_is_a_lag():
    t = tick(probe=[1.000, 100.0], changes=[(1.010, 1.0103), None], checks=[[1.0104, 100.0], [1.0144, 101.0]])
    verdict, size_ms = tc.classify(t, None)
    assert verdict == "lag" and size_ms == pytest.approx(4.1)


def test_the_counter_new_at_the_check_and_old_at_the_probe_is_together_within_the_cue_bracket():
    t = tick(probe=[1.000, 100.0], changes=[(1.010, 1.0103), (1.0098, 1.0101)], checks=[[1.0104, 101.0]])
    assert tc.classify(t, 0) == ("together", pytest.approx(0.3))
    # "either": whichever cue changed first
    assert tc.classify(t, None) == ("together", pytest.approx(0.3))


@pytest.mark.slow
def test_it_watches_ticks_on_the_fake_nvml(tmp_path):
    profile = [[0.1 * i, 300 + (i % 7) * 10] for i in range(100)]
    scenario = {"t0_wall": time.time(), "gpus": [{"uuid": "GPU-52dfc441-e9da-23f3-17f9-2b876aae0d10",
                "name": "NVIDIA H200", "profile": profile, "field_cost_s": 0.001}]}  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps(scenario))
    code = (
        "import threading, tick_coupling as t; "
        f"t.watch(1.5, 0.0002, {str(tmp_path / 'load0.json')!r}, threading.Event())"
    )
    fake = str(Path(__file__).parents[1] / "fake_nvml")
    env = {"FAKE_NVML_SCENARIO": str(tmp_path / "s.json"), "PYTHONPATH": f"{fake}:{BENCH}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    ticks = json.loads((tmp_path / "load0.json").read_text())
    assert len(ticks) >= 5
    # the fake changes instant power and the counter together, so no cue ever comes first
    assert all(tc.classify(t, 0)[0] != "lag" for t in ticks)
    assert any(tc.classify(t, None)[0] == "together" for t in ticks)
