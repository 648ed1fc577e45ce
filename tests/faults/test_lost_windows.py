"""Finished windows must never be lost or hidden, and output never lands where it should not:
every command sees what ``show`` sees (one loader), a save that was cut short keeps its
windows, a damaged journal keeps its whole rows, an empty --out is refused, a symbolic-link loop
is named, and a device or FIFO given as output is written to, never replaced."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import StoreError, UsageError
from energyframe.results import store
from energyframe.results.load import REBUILT, RESUMMARIZED
from energyframe.results.result import RunResult, load_run

FAST = {"trials": 3, "min_window_s": 0.05, "warmup_s": 0.0}


def measured(out: Path, power_csv) -> RunResult:
    csv = power_csv(75.0, period_s=0.01, duration_s=60.0)
    return ef.run(
        "sleep:seconds=0.02", power=f"replay:file={csv}", reporters=[], out=out, settings=ef.RunSettings(**FAST)
    )


def cli(*argv: str):
    return CliRunner().invoke(main, list(argv))


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def every_command_sees_the_windows(run: Path, good: Path, tmp_path: Path, trials: int) -> None:
    """show, compare and report each show the phase with its windows, never "no window finished"."""
    shown = cli("show", str(run))
    assert shown.exit_code == 0, shown.output
    assert "no window finished" not in shown.output
    assert "sleep" in shown.output
    compared = cli("compare", str(good), str(run), "--table", "json")
    assert compared.exit_code == 0, compared.output
    rows = [r for r in json.loads(compared.output)["rows"] if r["name"] == "sleep" and r["run"] == run.name]
    assert rows and {r["n"] for r in rows if r["figure"] == "time"} == {trials}
    html = tmp_path / "report.html"
    reported = cli("report", str(run), "--out", str(html))
    assert reported.exit_code == 0, reported.output
    page = html.read_text()
    assert "No phase summaries (no window finished)" not in page and "sleep" in page


# -- a save that was cut short ------------------------------------------------------------------
def test_a_disk_full_during_the_save_keeps_the_windows_for_every_command(tmp_path, power_csv, monkeypatch):
    good = tmp_path / "good"
    measured(good, power_csv)

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)  # windows.csv fits, samples.parquet does not
    run = tmp_path / "full"
    with pytest.raises(StoreError, match="no space left on the device"):
        measured(run, power_csv)
    monkeypatch.undo()
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "incomplete" and "could not be saved" in meta["reason"]
    assert (run / "windows.csv").exists() and not (run / "samples.parquet").exists()
    result = load_run(run)
    assert result.samples_origin == "samples.partial.csv"
    assert result.summary("sleep").trials == 3 and RESUMMARIZED in result.warnings
    every_command_sees_the_windows(run, good, tmp_path, trials=3)


def test_one_interrupt_during_the_save_leaves_the_true_status_and_the_windows(tmp_path, power_csv, monkeypatch):
    good = tmp_path / "good"
    measured(good, power_csv)

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C, or SIGTERM (raised as one), while samples.parquet is written

    monkeypatch.setattr(pd.DataFrame, "to_parquet", interrupted)
    run = tmp_path / "cut"
    with pytest.raises(ef.RunInterrupted, match="while saving"):
        measured(run, power_csv)
    monkeypatch.undo()
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "incomplete"
    assert meta["reason"] == "interrupted while saving"  # not "running (pid N)" for ever
    every_command_sees_the_windows(run, good, tmp_path, trials=3)


def test_a_save_that_lost_windows_csv_is_rebuilt_from_the_journal_by_every_command(tmp_path, power_csv, monkeypatch):
    good = tmp_path / "good"
    measured(good, power_csv)

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)  # not even windows.csv: the journals stay
    run = tmp_path / "full"
    with pytest.raises(StoreError):
        measured(run, power_csv)
    monkeypatch.undo()
    assert not (run / "windows.csv").exists() and (run / "windows.partial.csv").exists()
    result = load_run(run)
    assert result.windows_origin == "windows.partial.csv" and REBUILT in result.warnings
    assert len(result.windows) == 3
    every_command_sees_the_windows(run, good, tmp_path, trials=3)


def test_the_public_loader_is_the_one_loader(tmp_path, power_csv, monkeypatch):
    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    run = tmp_path / "full"
    with pytest.raises(StoreError):
        measured(run, power_csv)
    monkeypatch.undo()
    public, shown = ef.RunResult.load(run), ef.load_run(run)
    assert public.windows.equals(shown.windows) and public.meta == shown.meta and len(public.windows) == 3


# -- the window journal -------------------------------------------------------------------------
HEADER = "event,phase,trial,start_s,end_s,iterations\r\n"
WHOLE = "closed,a,0,1000.5,1001.0,10\r\nclosed,a,1,1001.5,1002.0,10\r\n"


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param('closed,"a, b",2,1002.5', id="inside-a-quoted-field"),
        pytest.param("closed,a,2,1002.5,1003.0,1", id="a-row-without-its-line-end"),
        pytest.param("\0\0\0\0\0\0\0\0", id="zeros-after-a-crash"),
        pytest.param("closed,a,2,1002.5,10\xe9", id="half-a-character"),
    ],
)
def test_a_torn_journal_tail_keeps_every_whole_row(tmp_path, tail):
    from energyframe.core.clock import ClockModel
    from energyframe.results.load import journal_records

    path = tmp_path / "windows.partial.csv"
    path.write_bytes((HEADER + WHOLE).encode() + tail.encode("utf-8")[:-1])
    clock = ClockModel.from_json({"anchor_wall_s": 1000.0, "anchor_monotonic_s": 0.0})
    records = journal_records(path, clock)
    assert [(r.phase, r.trial, r.start_s, r.end_s) for r in records] == [("a", 0, 0.5, 1.0), ("a", 1, 1.5, 2.0)]


def dead_run(tmp_path: Path, journal_rows: str) -> Path:
    """A run directory as a process killed while measuring leaves it."""
    finished = subprocess.Popen(["true"])
    finished.wait()
    pid = finished.pid  # a process that has exited
    run = tmp_path / "dead"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({
        "format_version": 1,
        "status": "incomplete",
        "reason": f"running (pid {pid}); if this stays, the process died",
        "clock": {"anchor_wall_s": 1000.0, "anchor_monotonic_s": 0.0},
        "sources": [{"name": "replay", "channels": [{"name": "wall", "quantity": "power", "resolution_s": 0.1}]}],
        "primary_channels": ["wall"],
    }))
    times = [1000.0 + 0.1 * i for i in range(60)]
    pd.DataFrame({"source": "replay", "channel": "wall", "time_s": times, "value": 50.0, "unit": "W"}).to_csv(
        run / "samples.partial.csv", index=False
    )
    (run / "windows.partial.csv").write_text(HEADER + journal_rows)
    return run


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param("replay,wall,1006.0,50.0,µ", id="half-a-character"),  # the µ of a unit cut in two
        pytest.param("replay,wall,1006.0,50", id="a-row-without-its-line-end"),
        pytest.param("\0\0\0\0\0\0\0\0\0", id="zeros-after-a-crash"),
        pytest.param("replay,wall,1006.0,\xff\xfe", id="bytes-that-are-not-text"),
    ],
)
def test_a_torn_samples_journal_tail_is_left_out_and_the_run_read(tmp_path, tail):
    """Once "the file is damaged; delete it to see the run" (a UnicodeDecodeError of pandas)."""
    run = dead_run(tmp_path, "closed,a,0,1000.5,1001.0,10\r\nclosed,a,1,1001.5,1002.0,10\r\n")
    journal = run / "samples.partial.csv"
    raw = tail.encode("latin-1") if "\xff" in tail else tail.encode()
    journal.write_bytes(journal.read_bytes() + raw[:-1])
    result = load_run(run)
    assert len(result.samples) == 60  # every whole row, none of the torn one
    assert list(result.windows["trial"]) == [0, 1]
    assert result.windows["mean_power_w"].round(6).eq(50.0).all()
    shown = cli("show", str(run))
    assert shown.exit_code == 0 and "damaged" not in shown.output, shown.output


def test_a_samples_journal_row_that_is_not_text_is_left_out_and_the_rest_kept(tmp_path):
    run = dead_run(tmp_path, "closed,a,0,1000.5,1001.0,10\r\n")
    journal = run / "samples.partial.csv"
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[5] = b"replay,wall,1000.4,50.0,\xb5W\n"  # latin-1 where UTF-8 belongs, mid-file
    journal.write_bytes(b"".join(lines))
    result = load_run(run)
    assert len(result.samples) == 59 and result.windows["mean_power_w"].round(6).eq(50.0).all()


@pytest.mark.parametrize(
    "bad,why",
    [
        ("closed,a,1,nan,1002.0,10", "start_s 'nan' and end_s '1002.0' should be finite times"),
        ("closed,a,1,1001.5,inf,10", "start_s '1001.5' and end_s 'inf' should be finite times"),
        ("closed,a,1,1002.0,1001.5,10", "its window ends (end_s 1001.5) before it starts (start_s 1002.0)"),
        ("closed,a,1,1001.5,1002.0,x", "trial '1' and iterations 'x' should be whole numbers"),
    ],
)
def test_a_journal_row_that_cannot_be_a_window_is_refused_and_the_rest_kept(tmp_path, bad, why):
    run = dead_run(tmp_path, f"closed,a,0,1000.5,1001.0,10\r\n{bad}\r\nclosed,a,2,1002.5,1003.0,10\r\n")
    result = load_run(run)
    assert list(result.windows["trial"]) == [0, 2]
    assert result.windows["mean_power_w"].round(6).eq(50.0).all()
    assert f"windows.partial.csv row 3 was left out: {why}" in result.warnings
    assert "died before the run finished" in str(result.reason)
    shown = cli("show", str(run))
    assert shown.exit_code == 0 and "Traceback" not in shown.output, shown.output
    assert "row 3 was left out" in shown.output


def test_compare_and_report_see_a_dead_run_as_show_does(tmp_path):
    run = dead_run(tmp_path, "closed,sleep,0,1000.5,1001.0,10\r\nclosed,sleep,1,1001.5,1002.0,10\r\n")
    good = tmp_path / "good"
    shutil.copytree(run, good)
    every_command_sees_the_windows(run, good, tmp_path, trials=2)


# -- where output goes ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["run", "--power", "none", "--workload", "sleep:seconds=0.01", "--out", ""], id="run"),
        pytest.param(["analyze", "--power-log", "p.csv", "--window", "1,2", "--out", ""], id="analyze"),
        pytest.param(["trace", "import", "t.json", "--out", ""], id="trace-import"),
        pytest.param(["merge", "a", "--out", ""], id="merge"),
        pytest.param(["report", "a", "--out", " "], id="report"),
        pytest.param(["plot", "a", "--out", ""], id="plot"),
    ],
)
def test_an_empty_out_is_refused_and_the_current_directory_untouched(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    for name in ("p.csv", "t.json", "a"):
        (tmp_path / name).write_text("x")
    (tmp_path / "windows.csv").write_text("a user's own file\n")
    result = cli(*argv)
    assert result.exit_code == 2, result.output
    assert "--out is empty; give a path (use . for the current directory)" in result.output
    assert (tmp_path / "windows.csv").read_text() == "a user's own file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "p.csv", "t.json", "windows.csv"]


@pytest.mark.parametrize("api", ["run", "measure"])
def test_an_empty_out_is_refused_by_the_api(tmp_path, monkeypatch, api):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"^--out is empty; give a path"):
        if api == "run":
            ef.run("sleep:seconds=0.01", power="none", reporters=[], out="")
        else:
            with ef.measure(power="none", out=""):
                pass
    assert list(tmp_path.iterdir()) == []


def test_a_symbolic_link_loop_is_named(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    for out in (tmp_path / "a", tmp_path / "a" / "run"):
        result = cli("run", "--power", "none", "--workload", "sleep:seconds=0.01", "--out", str(out))
        error = one_line_error(result, 2)
        assert error == (
            f"Error: --out {out} is a loop of symbolic links ({tmp_path}/a -> {tmp_path}/b -> {tmp_path}/a); "
            "choose another --out directory"
        )
        assert "already holds a run" not in error


@pytest.fixture
def guarded_replace(monkeypatch):
    """os.replace that refuses to put anything in place of what is not a regular file: a
    regression here must fail the test, never replace this machine's /dev/null (tests run as root)."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if os.path.exists(dst) and not stat.S_ISREG(os.stat(dst).st_mode):
            raise AssertionError(f"os.replace onto {dst}, which is not a regular file")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.usefixtures("guarded_replace")
def test_dev_null_is_written_to_never_replaced(tmp_path):
    before = os.stat("/dev/null")
    store.write_json(Path("/dev/null"), {"a": 1})
    store.write_bytes(Path("/dev/null"), b"report")
    store.write_csv(Path("/dev/null"), pd.DataFrame({"a": [1]}))
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    assert not list(Path("/dev").glob(".null.*.tmp"))


@pytest.mark.usefixtures("guarded_replace")
def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a process reading, as `>(cat)` gives one
    try:
        store.write_bytes(fifo, b"<html>the report</html>")
        got = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert got == b"<html>the report</html>"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.usefixtures("guarded_replace")
def test_a_fifo_nobody_reads_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "nobody.fifo"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match=r"it is a FIFO that no process reads$"):
        store.write_json(fifo, {"a": 1})
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.usefixtures("guarded_replace")
def test_report_and_the_json_reporter_write_to_dev_null_without_replacing_it(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent.parent / "fixtures" / "run-json" / "v1-2026-11-23-timings", run)
    inode = os.stat("/dev/null").st_ino
    result = cli("report", str(run), "--out", "/dev/null")
    assert result.exit_code == 0, result.output
    from energyframe.reporters.files import JSONReporter

    JSONReporter(path="/dev/null").report(load_run(run), run)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and os.stat("/dev/null").st_ino == inode


def test_a_symbolic_link_to_a_file_stays_a_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    os.symlink(target, link)
    store.write_json(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}


def test_a_rebuilt_run_gives_the_live_runs_numbers(tmp_path, fake_nvml):
    # a run whose windows.csv is lost is rebuilt from its journal and samples: each counter
    # edge's estimator, the fused channel and the bounds are the live run's, not a plainer sum
    import time

    import numpy as np

    from energyframe.power.nvml import NVMLPowerSource

    fake_nvml()
    run = tmp_path / "run"
    with ef.measure(power=[NVMLPowerSource(name="nvml")], sync=None, out=run) as m:
        for _ in range(3):
            with m.window("steady"):
                time.sleep(0.3)
        journal = (run / store.WINDOWS_PARTIAL).read_bytes()  # what a crash would leave
    live = m.result.windows
    (run / "windows.csv").unlink()
    (run / store.WINDOWS_PARTIAL).write_bytes(journal)
    rebuilt = load_run(run)
    assert rebuilt.windows_origin == store.WINDOWS_PARTIAL
    assert set(rebuilt.windows["channel"]) == set(live["channel"])  # gpu0.fused included
    for channel in ("gpu0", "gpu0.fused"):
        a = live[live["channel"] == channel].sort_values("trial")
        b = rebuilt.windows[rebuilt.windows["channel"] == channel].sort_values("trial")
        assert list(a["estimator"].fillna("")) == list(b["estimator"].fillna("")), channel
        # the journal keeps edges to the microsecond, which moves a 200-J window's energy and
        # bound by up to about 1e-5 of themselves
        for column in ("energy_j", "energy_random_j"):
            assert np.allclose(a[column].to_numpy(float), b[column].to_numpy(float), rtol=1e-4, equal_nan=True), (
                channel,
                column,
            )


# -- a real process killed: run.json is the claim's, the sources are only in their journal ---------
KILLED_RUN = """
import os, sys
import energyframe as ef
from energyframe.results import store

if sys.argv[3] == "save":  # killed while saving: windows.csv written, samples.parquet not
    def killed(*args, **kwargs):
        os._exit(9)
    store.write_samples = killed
ef.run("sleep:seconds=0.05", power="replay:file=" + sys.argv[1], reporters=[], out=sys.argv[2],
       settings=ef.RunSettings(trials=int(sys.argv[4]), min_window_s=0.05, warmup_s=0.0))
"""


def closed_rows(journal: Path) -> int:
    if not journal.exists():
        return 0
    return sum(1 for line in journal.read_text().splitlines() if line.startswith("closed,"))


@pytest.mark.slow
@pytest.mark.parametrize("when", ["measuring", "save"])
def test_a_killed_run_shows_its_windows_in_every_command(tmp_path, power_csv, when):
    # SIGKILL while measuring (or os._exit while saving) leaves run.json as the claim wrote it,
    # without channels: the windows are still every command's, with the journal's channels
    csv = power_csv(75.0, period_s=0.01, duration_s=600.0)
    run = tmp_path / "killed"
    script = tmp_path / "killed.py"
    script.write_text(KILLED_RUN)
    trials = "400" if when == "measuring" else "3"
    process = subprocess.Popen([sys.executable, str(script), str(csv), str(run), when, trials])
    try:
        if when == "measuring":
            journal = run / store.WINDOWS_PARTIAL
            for _ in range(6000):  # up to 300 s of 50-ms looks for three closed windows
                if closed_rows(journal) >= 3 or process.poll() is not None:
                    break
                time.sleep(0.05)
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=300)
    finally:
        process.kill()
    assert process.returncode in (-signal.SIGKILL, 9), process.returncode
    claimed = json.loads((run / "run.json").read_text())
    assert claimed["primary_channels"] == [] and claimed["sources"][0]["channels"] == []  # as the claim left it
    result = load_run(run)
    assert list(result.run_meta.primary_channels) == ["replay"]
    assert "died before the run finished" in str(result.reason)
    trials_seen = len(result.windows)
    assert trials_seen >= 3
    shown = cli("show", str(run), "--windows")
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("│ sleep │") >= 1 + trials_seen, shown.output  # the summary and every window
    good = tmp_path / "good"
    shutil.copytree(run, good)
    every_command_sees_the_windows(run, good, tmp_path, trials=trials_seen)


def test_a_measured_function_interrupted_by_ctrl_c_saves_the_run_incomplete(tmp_path, power_csv):
    csv = power_csv(75.0, period_s=0.01, duration_s=60.0)
    calls = []

    @ef.measured(power=f"replay:file={csv}", out=tmp_path, sync=None)
    def step():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        time.sleep(0.05)

    step()
    step()
    with pytest.raises(KeyboardInterrupt):
        step()
    result = step.last_result
    assert result is not None and not result.complete
    assert "interrupted by SIGINT" in str(result.reason) and "call 3 of step" in str(result.reason)
    (saved,) = tmp_path.glob("*-measured")
    meta = json.loads((saved / "run.json").read_text())
    assert meta["status"] == "incomplete" and "interrupted by SIGINT" in meta["reason"]
    assert load_run(saved).summary("step").trials == 2  # the calls that finished


def test_a_killed_process_not_yet_reaped_counts_as_dead(tmp_path):
    # a zombie (killed, its parent has not waited for it) still answers kill(pid, 0)
    child = subprocess.Popen(["sleep", "60"])
    child.kill()
    for _ in range(200):  # until the kernel has made it a zombie: up to 10 s of 50-ms looks
        state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            break
        time.sleep(0.05)
    try:
        run = dead_run(tmp_path, "closed,sleep,0,1000.5,1001.0,10\r\n")
        meta = json.loads((run / "run.json").read_text())
        meta["reason"] = f"running (pid {child.pid}); if this stays, the process died"
        (run / "run.json").write_text(json.dumps(meta))
        assert f"the run's process (pid {child.pid}) died" in str(load_run(run).reason)
    finally:
        child.wait()
