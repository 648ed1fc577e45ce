"""A saved run with known energy for the trackers' reporters: the replay source at a constant
100 W, windows of exact length (``record_window``), two phases of three windows."""

import shutil
import time

import pytest

import energyframe as ef
from tests.conftest import write_power_csv

WATTS = 100.0
#: each phase's windows. Units: s.
DURATIONS_S = {"train-step": (0.10, 0.12, 0.11), "eval <1>": (0.05, 0.06, 0.07)}


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracked")
    csv = write_power_csv(root / "power.csv", WATTS, period_s=0.01, duration_s=10.0)
    with ef.measure(power=[f"replay:file={csv},loop=true"], out=root / "run", sync=None) as m:
        start = time.monotonic()
        total = sum(sum(d) for d in DURATIONS_S.values())
        while time.monotonic() < start + total:
            time.sleep(0.01)
        edge = start
        for phase, durations in DURATIONS_S.items():
            for duration_s in durations:
                m.record_window(phase, edge, edge + duration_s)
                edge += duration_s
    return root / "run"


@pytest.fixture
def saved_run(recorded_run, tmp_path):
    """A copy of the recorded run in ``tmp_path/runs/``, for one test to report on."""
    target = tmp_path / "runs" / recorded_run.name
    shutil.copytree(recorded_run, target)
    return ef.load_run(target), target
