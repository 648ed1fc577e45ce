"""Faults around the run directory: concurrent runs, failures before the first window, the
umask, a full disk, and a process that dies hard. Each asserts the exit code, a one-line message
naming the cause, no traceback, and what is on disk."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import energyframe as ef
from energyframe.results.result import RunResult, load_run


def energyframe(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "energyframe", *args], capture_output=True, text=True, **kw)


def one_line_error(stderr: str) -> str:
    """The error line; fails the test if a traceback was printed."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_two_runs_into_one_directory_at_the_same_moment(tmp_path, power_csv):
    csv = power_csv(80.0, period_s=0.02, duration_s=120.0)
    out = tmp_path / "shared"
    argv = [sys.executable, "-m", "energyframe", "run", "--power", f"replay:file={csv}", "--workload",
            "sleep:seconds=0.05", "--trials", "2", "--min-window", "0.05", "--warmup-s", "0", "--out", str(out)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2]
    loser = next(err for code, _, err in results if code == 2)
    assert one_line_error(loser) == f"Error: {out} already holds a run; choose another --out directory"
    result = RunResult.load(out)
    assert result.status == "complete" and len(result.windows) == 2  # the winner's run, whole


def test_a_source_failing_to_start_leaves_no_run_directory_of_nothing(tmp_path):
    """Nothing was measured: the error comes before anything starts, and the claim is taken
    back (a directory that existed before stays, without our files)."""
    out = tmp_path / "run"
    proc = energyframe("run", "--power", f"replay:file={tmp_path}/missing.csv", "--workload", "sleep", "--out", str(out))
    assert proc.returncode == 1
    message = one_line_error(proc.stderr)
    assert message == f"Error: power source 'replay' could not start: replay file '{tmp_path}/missing.csv' does not exist"
    assert not out.exists()
    given = tmp_path / "mine"
    given.mkdir()
    (given / "notes.txt").write_text("kept")
    proc = energyframe("run", "--power", f"replay:file={tmp_path}/missing.csv", "--workload", "sleep", "--out", str(given))
    assert proc.returncode == 1 and sorted(p.name for p in given.iterdir()) == ["notes.txt"]


def test_a_workload_failing_in_set_up_leaves_the_real_status(tmp_path):
    from tests.fakes import ListWorkload, busy_phase

    with pytest.raises(ef.WorkloadError, match="no GPU here"):
        ef.run(ListWorkload([busy_phase()], fail_in_setup=True), power="none", reporters=[], out=tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "run.json").read_text())
    assert meta["status"] == "incomplete"
    assert meta["reason"] == "RuntimeError: no GPU here (test)"


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_result_files_follow_the_umask(tmp_path, umask, mode):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "energyframe", "run", "--power", "none", "--workload", "sleep:seconds=0.01",
         "--trials", "1", "--min-window", "0.01", "--warmup-s", "0", "--out", str(out), "--reporter", "csv"],
        capture_output=True, text=True, preexec_fn=lambda: os.umask(umask),
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("run.json", "windows.csv", "samples.parquet", "summary.csv"):
        assert stat.S_IMODE((out / name).stat().st_mode) == mode, name


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_a_full_disk_is_one_line_naming_the_path(tmp_path, power_csv):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "256k"):
        pytest.skip("needs root and a mountable tmpfs to fill a disk for real")
    try:
        (disk / "filler").write_bytes(b"\0" * (256 * 1024 - 24 * 1024))  # ~24 KiB left
        csv = power_csv(80.0, period_s=0.005, duration_s=120.0)
        out = disk / "run"
        proc = energyframe("run", "--power", f"replay:file={csv}", "--workload", "sleep:seconds=0.2",
                           "--trials", "200", "--out", str(out), timeout=300)
        assert proc.returncode == 1
        message = one_line_error(proc.stderr)
        assert message.startswith(f"Error: cannot write {out}/") and "no space left on the device" in message
        meta = json.loads((out / "run.json").read_text())
        assert meta["status"] == "incomplete"  # never left saying "running"
        assert "no space left on the device" in meta["reason"]
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_a_killed_run_keeps_its_finished_windows(tmp_path, power_csv):
    csv = power_csv(90.0, period_s=0.05, duration_s=120.0)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "energyframe", "run", "--power", f"replay:file={csv}", "--workload",
         "sleep:seconds=0.1", "--trials", "1000", "--min-window", "0.1", "--out", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    journal = out / "windows.partial.csv"
    deadline = time.monotonic() + 120
    while not (journal.exists() and journal.read_text().count("\nclosed,") >= 25):
        assert time.monotonic() < deadline, "no window closed"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    result = load_run(out)
    assert result.status == "incomplete" and "died" in str(result.reason)
    assert len(result.windows) >= 25
    # samples reach the disk once a second: the windows they cover are exact, the last ones
    # (after the last drain) are flagged uncovered, never guessed
    covered = result.windows[result.windows["energy_j"].notna()]
    assert len(covered) >= 5 and np.allclose(covered["mean_power_w"], 90.0)
    late = result.windows[result.windows["energy_j"].isna()]
    assert late["flags"].str.contains("uncovered").all()
    summary = result.summary("sleep")
    assert summary.trials == len(result.windows) and summary.energy_per_iter_j.n == len(covered)
    shown = energyframe("show", str(out))
    assert shown.returncode == 0 and "rebuilt from windows.partial.csv" in shown.stdout


def test_a_window_journal_survives_a_discarded_window(tmp_path):
    from energyframe.core.clock import ClockModel
    from energyframe.results.load import journal_records
    from energyframe.results.store import WindowJournal

    journal = WindowJournal(tmp_path / "windows.partial.csv")
    journal.closed("a", 0, 100.0, 100.5, 10)
    journal.discarded("a", 0)  # too short: measured again, longer
    journal.closed("a", 0, 101.0, 102.0, 20)
    journal.closed("b", 0, 103.0, 104.0, 5)
    journal.close()
    with open(tmp_path / "windows.partial.csv", "a") as f:
        f.write("closed,b,1,105.0")  # a process killed mid-line
    clock = ClockModel.from_json({"anchor_wall_s": 1000.0, "anchor_monotonic_s": 900.0})
    records = journal_records(tmp_path / "windows.partial.csv", clock)
    assert [(r.phase, r.trial, r.start_s, r.iterations) for r in records] == [("a", 0, 1.0, 20), ("b", 0, 3.0, 5)]


def test_measure_api_journals_too(tmp_path):
    with ef.measure(power="none", out=tmp_path / "m") as m:
        with m.window("step"):
            pass
        assert (tmp_path / "m" / "windows.partial.csv").read_text().count("\nclosed,step,0,") == 1
    assert not (tmp_path / "m" / "windows.partial.csv").exists()  # safely in windows.csv now
    assert len(RunResult.load(tmp_path / "m").windows) == 1
