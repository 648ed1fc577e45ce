"""A run's own faults (issue round 3): an interrupted measured program keeps its window, a
workload that exits, a silent incomplete end, bad window counts, two phases of one name."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

import energyframe as ef
from energyframe.errors import UsageError, WorkloadError
from energyframe.results.result import RunResult
from tests.fakes import ListWorkload, SignalSource, busy_phase


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_measured_program_keeps_its_window_flagged(tmp_path, power_csv, sig):
    """`energyframe run -- python train.py` stopped after hours keeps those hours: the window
    the interruption closed is saved, flagged `interrupted`."""
    csv = power_csv(90.0, period_s=0.05, duration_s=120.0)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "energyframe", "-q", "run", "--power", f"replay:file={csv}", "--out", str(out),
         "--", sys.executable, "-c", "import time; time.sleep(60)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    samples = out / "samples.partial.csv"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (samples.exists() and samples.stat().st_size > 2000):
        time.sleep(0.05)
    time.sleep(1.0)  # the program has been measured for a while (no assertion rests on how long)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    result = RunResult.load(out)
    assert result.status == "incomplete"
    (window,) = result.windows.itertuples()
    assert window.phase == "command" and "interrupted" in window.flags.split(";")
    assert window.duration_s > 0.5 and window.energy_j == pytest.approx(90.0 * window.duration_s, rel=0.05)
    assert "interrupted" in result.summary("command").flags


def test_a_workload_calling_sys_exit_ends_the_run_with_its_reason(tmp_path):
    def step():
        sys.exit(3)

    with pytest.raises(WorkloadError, match=r"the workload called sys.exit\(3\)") as e:
        ef.run(ListWorkload([ef.Phase("exits", step=step)]), power="none", reporters=[], out=tmp_path / "r")
    assert e.value.result.status == "incomplete"
    assert RunResult.load(tmp_path / "r").reason == "the workload called sys.exit(3)"


def test_a_source_failing_after_the_last_window_makes_the_run_fail_not_exit_0(tmp_path):
    """A stall or [N/A] in the last seconds: the run is incomplete, so run() raises with the
    reason (the CLI's one line and a non-zero exit), instead of returning as if all was well."""
    source = SignalSource(name="gpu", period_s=0.01)

    class FailsAtTheEnd(ListWorkload):
        def teardown(self):  # after every window closed: the meter is unplugged now
            source.options["fail_after_s"] = 0.0
            deadline = time.monotonic() + 30
            while getattr(source, "failed", None) is None and time.monotonic() < deadline:  # polled since
                time.sleep(0.01)

    with pytest.raises(ef.PowerSourceError, match=r"^power source 'gpu' failed: meter unplugged \(test\)") as e:
        ef.run(FailsAtTheEnd([busy_phase(seconds=0.02)]), power=[source], reporters=[], out=tmp_path / "r",
               settings=ef.RunSettings(trials=2, min_window_s=0.02, warmup=1))
    assert e.value.result.status == "incomplete"
    assert RunResult.load(tmp_path / "r").status == "incomplete"


@pytest.mark.parametrize("iterations", [-1, 0, 1.5, float("nan"), "x", True])
def test_a_window_count_that_is_not_a_whole_number_is_refused(iterations):
    with ef.measure(power="none") as m:
        with pytest.raises(UsageError, match=f"iterations must be a whole number of at least 1, got {iterations!r}"):
            m.begin_window("w", iterations=iterations)


def test_two_phases_of_one_name_are_refused_not_merged():
    workload = ListWorkload([busy_phase(name="same"), busy_phase(name="same")])
    with pytest.raises(WorkloadError, match="the workload has two phases named 'same'; each phase needs its own name"):
        ef.run(workload, power="none", reporters=[], settings=ef.RunSettings(trials=1, min_window_s=0.01))


@pytest.mark.slow
def test_launcher_variables_without_peers_say_what_they_wait_for_and_obey_ctrl_c(tmp_path):
    import os
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "energyframe", "run", "--power", "none", "--workload", "sleep", "--out",
         str(tmp_path / "run")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    line = proc.stderr.readline()  # said at once, before any waiting
    assert "rank 0 of 2" in line and f"waiting for the other ranks at 127.0.0.1:{port}" in line
    assert "Ctrl-C stops" in line
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 130, rest
    assert "Error: interrupted by SIGINT while " in rest and "ranks" in rest.splitlines()[-1]
