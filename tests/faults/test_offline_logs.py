"""Power logs read offline on a bad day: units nvidia-smi did not promise, readings of one
instant, a clock that steps back, a meter log of several meters, a stated lag of 0, and input
that could only hang or end in a traceback. Each must give the true number, a flagged NaN, or
one line naming the file and the cause."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from energyframe.cli import main
from energyframe.errors import UsageError
from energyframe.offline import analyze as offline
from energyframe.offline import logs

T0 = dt.datetime(2026, 2, 4, 10, 15, 20)


def unix(seconds: float) -> float:
    return (T0 + dt.timedelta(seconds=seconds)).timestamp()


def smi_stamp(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def analyze_cli(*args):
    return CliRunner().invoke(main, ["analyze", *map(str, args)])


def report_of(out: Path) -> dict:
    return json.loads((out / "energy_report.json").read_text())


def windows_of(out: Path) -> list[dict]:
    import pandas as pd

    frame = pd.read_csv(out / "windows.csv", dtype={"flags": str, "phase": str}).fillna({"flags": ""})
    return frame.to_dict("records")


# -- nvidia-smi units --------------------------------------------------------------------------------


def smi_log(path: Path, header_unit: str, texts: list[str], period_s: float = 0.1) -> Path:
    """An nvidia-smi log of one GPU whose power.draw.instant column prints ``texts`` in turn."""
    unit = f" [{header_unit}]" if header_unit else ""
    lines = [f"timestamp, index, uuid, power.draw.instant{unit}"]
    lines += [f"{smi_stamp(period_s * i)}, 0, GPU-0, {texts[i % len(texts)]}" for i in range(200)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "header_unit,texts,watts,left_out",
    [
        ("W", ["131.60"], 131.6, 0),
        ("W", ["131.60 W"], 131.6, 0),
        ("mW", ["129840"], 129.84, 0),  # the header's unit, converted
        ("mW", ["129840 mW"], 129.84, 0),
        ("", ["129840 mW"], 129.84, 0),  # no unit in the header: the value's own
        ("", ["300"], 300.0, 0),  # nothing anywhere: nvidia-smi's W
        ("W", ["300.00 W", "129840 mW"], 300.0, 100),  # a unit the header does not promise
        ("W", ["300.00 W", "0xFFFF"], 300.0, 100),  # 65535 W if read as a number
        ("W", ["300.00 W", "12 dBm"], 300.0, 100),
    ],
)
def test_nvidia_smi_power_is_read_in_its_unit_or_left_out(tmp_path, header_unit, texts, watts, left_out):
    log = logs.read_log(smi_log(tmp_path / "smi.csv", header_unit, texts))
    assert np.allclose(log.series["gpu0"].values, watts)
    out = tmp_path / "o"
    report = offline.analyze([log], [offline.Window("w", unix(2), unix(18))], out)
    assert report["power_watts"]["average"] == pytest.approx(watts)
    if left_out:
        assert "invalid_reading" in report["energyframe"]["flags"]
        assert report["rejected_rows"] == {"smi.csv": {"gpu0": {"invalid_reading": left_out}}}
        assert any(
            f"{left_out} value(s) of gpu0 were left out ('{texts[1]}' is " in w for w in report["warnings"]
        )
    else:
        assert report["energyframe"]["flags"] == [] and "warnings" not in report


def test_an_nvidia_smi_header_in_a_unit_of_no_power_is_refused(tmp_path):
    path = smi_log(tmp_path / "smi.csv", "dBm", ["12"])
    with pytest.raises(UsageError) as e:
        logs.read_log(path)
    assert str(e.value) == (
        f"{path}: nvidia-smi's header gives power.draw.instant in 'dBm', not a unit of power energyframe "
        "knows (W, mW, kW)"
    )


# -- readings of one instant ---------------------------------------------------------------------------


def test_two_rows_for_one_gpu_at_one_timestamp_flag_the_windows_they_touch(tmp_path):
    lines = ["timestamp, index, uuid, power.draw.instant [W]"]
    for i in range(300):
        lines.append(f"{smi_stamp(0.1 * i)}, 0, GPU-0, 100.00 W")
        if 100 <= i < 110:  # a second row for GPU 0 at the same instant, another value
            lines.append(f"{smi_stamp(0.1 * i)}, 0, GPU-0, 300.00 W")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o"
    result = analyze_cli(
        "--power-log",
        path,
        "--window",
        f"{unix(2)},{unix(8)}",
        "--window",
        f"{unix(9.5)},{unix(12)}",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    clean, touched = report_of(out)["windows"]
    assert clean["energyframe"]["flags"] == [] and clean["energy_joules"]["total"] == pytest.approx(600.0)
    assert touched["energyframe"]["flags"] == ["duplicate_samples"]
    assert touched["energyframe"]["rejected_rows"] == {"duplicate_samples": 10}
    assert (
        "smi.csv: 10 duplicated timestamp(s) in gpu0; their values were averaged"
        in report_of(out)["warnings"]
    )


# -- a clock that steps back ------------------------------------------------------------------------------


def stepped_power_csv(path: Path, step_s: float, period_s: float) -> Path:
    """10 W for 100 s of true time, stamped by a clock that steps back ``step_s`` at 50 s."""
    rows = []
    for i in range(int(round(100 / period_s)) + 1):
        true = i * period_s
        stamp = unix(true) - (step_s if true > 50 else 0.0)
        rows.append(f"{stamp!r},10.0")
    path.write_text("time_s,power_w\n" + "\n".join(rows) + "\n")
    return path


def stepped_smi_log(path: Path, step_s: float, period_s: float) -> Path:
    lines = ["timestamp, index, uuid, power.draw.instant [W]"]
    for i in range(int(round(100 / period_s)) + 1):
        true = i * period_s
        lines.append(f"{smi_stamp(true - (step_s if true > 50 else 0.0))}, 0, GPU-0, 10.00 W")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "make,step_s,period_s",
    [
        (stepped_power_csv, 5.0, 1.0),
        (stepped_power_csv, 0.3, 0.02),
        (stepped_smi_log, 5.0, 0.1),
        (stepped_smi_log, 0.3, 0.02),
    ],
)
def test_a_clock_stepping_back_flags_the_span_it_claims_twice(tmp_path, make, step_s, period_s):
    path = make(tmp_path / "log.csv", step_s, period_s)
    out = tmp_path / "o"
    before, across, after = (10, 40), (45, 55), (60, 90)  # in the log's stamps
    argv = ["--power-log", path, "--out", out]
    for lo, hi in (before, across, after):
        argv += ["--window", f"{unix(lo)},{unix(hi)}"]
    result = analyze_cli(*argv)
    assert result.exit_code == 0, result.output
    report = report_of(out)
    first, middle, last = report["windows"]
    assert first["energy_joules"]["total"] == pytest.approx(10.0 * 30)
    assert last["energy_joules"]["total"] == pytest.approx(10.0 * 30)
    assert first["energyframe"]["flags"] == [] and last["energyframe"]["flags"] == []
    assert "clock_step" in middle["energyframe"]["flags"]
    assert middle["energy_joules"]["total"] is None  # NaN: which rows are true is unknown
    assert any(
        f"steps back about {step_s:.3g} s" in w for w in report["warnings"]
    )  # in the result, not only stderr
    assert f"steps back about {step_s:.3g} s" in result.stderr


def test_rows_a_little_out_of_order_are_sorted_not_flagged(tmp_path):
    rows = [f"{unix(i)!r},10.0" for i in range(100)]
    rows[20], rows[21] = rows[21], rows[20]
    path = tmp_path / "p.csv"
    path.write_text("time_s,power_w\n" + "\n".join(rows) + "\n")
    log = logs.read_log(path)
    assert log.warnings == ("p.csv: rows are not in time order (no two claim one span of time: no clock stepped back); sorted",)
    assert log.flagged == {} and len(log.series["p"]) == 100


@pytest.mark.parametrize("kind", ["power-csv", "wattsup"])
def test_a_shuffled_log_is_sorted_and_analysed_as_the_sorted_one(tmp_path, kind):
    """Once refused as "not covered ... (different time zones? give --tz)": every row behind a
    later one read as a clock stepping back, and every such span left out."""
    import random

    if kind == "power-csv":
        header, rows = "time_s,power_w", [f"{unix(i)!r},{100.0 + i % 7}" for i in range(300)]
        window = f"{unix(50)!r},{unix(250)!r}"
    else:
        header = "time,id,pm1,pm2,sum"
        rows = [f"2026-02-04 10:{15 + i // 60:02d}:{i % 60:02d},{i},{100.0 + i % 7},100.0,{200.0 + i % 7}" for i in range(300)]
        window = "2026-02-04 10:16:00,2026-02-04 10:19:00"
    paths = {}
    for name, order in (("sorted", rows), ("shuffled", random.Random(7).sample(rows, len(rows)))):
        paths[name] = tmp_path / f"{name}.csv"
        paths[name].write_text(header + "\n" + "\n".join(order) + "\n")
    reports = {}
    for name, path in paths.items():
        out = tmp_path / f"o-{name}"
        result = CliRunner().invoke(main, ["analyze", "--power-log", str(path), "--window", window, "--out", str(out)])
        assert result.exit_code == 0, result.output
        reports[name] = json.loads((out / "energy_report.json").read_text())
    assert reports["shuffled"]["energy_joules"] == reports["sorted"]["energy_joules"]
    assert "shuffled.csv: rows are not in time order (no two claim one span of time: no clock stepped back); sorted" in (
        reports["shuffled"]["warnings"]
    )
    assert not [w for w in reports["shuffled"]["warnings"] if "steps back" in w]


# -- a WattsUp? log of several meters -----------------------------------------------------------------------


def per_record_log(path: Path, meters: int, seconds: int = 120) -> Path:
    """energyframe's raw WattsUp? log: a row at every record of any meter (each logging every
    second, at its own phase), stamped to the ms; each meter sees an N-th of a 100/400-W load."""
    rows, latest, row = [], [None] * meters, 0
    events = sorted((k + 0.137 + m / meters * 0.9, m) for k in range(seconds) for m in range(meters))
    for t, m in events:
        load = 400.0 if 40 <= t % 80 < 80 else 100.0
        latest[m] = load / meters
        row += 1
        values = ["" if v is None else f"{v:.1f}" for v in latest]
        total = sum(v for v in latest if v is not None)
        stamp = (T0 + dt.timedelta(seconds=t)).isoformat(sep=" ", timespec="milliseconds")
        rows.append(",".join([stamp, str(row), *values, f"{total:.1f}"]))
    header = ",".join(["time", "id", *[f"pm{m + 1}" for m in range(meters)], "sum"])
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("meters", [1, 2, 3])
def test_a_meter_log_averages_the_meters_own_period_whatever_their_number(tmp_path, meters):
    path = per_record_log(tmp_path / "wattsup.csv", meters)
    log = logs.read_log(path)
    assert [c.averaging_s for c in log.channels.values()] == pytest.approx([1.0] * (meters + 1))
    result = analyze_cli(
        "--power-log", path, "--window", f"{unix(10)},{unix(30)}", "--lag", 0, "--out", tmp_path / "o"
    )
    assert result.exit_code == 0, result.output
    assert report_of(tmp_path / "o")["energyframe"]["shift_s"] == pytest.approx(0.5)  # half the meter's 1 s


def test_a_meter_log_in_a_run_directory_takes_the_period_the_run_declared(tmp_path):
    raw = tmp_path / "run" / "raw" / "wall" / "wattsup.csv"
    raw.parent.mkdir(parents=True)
    per_record_log(raw, 2)
    channel = {"name": "wall", "quantity": "power", "averaging_s": 2.0, "timing": "unknown"}
    (tmp_path / "run" / "run.json").write_text(
        json.dumps({"sources": [{"name": "wall", "channels": [channel]}]})
    )
    assert {c.averaging_s for c in logs.read_log(raw).channels.values()} == {2.0}


# -- a stated lag -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lag,shift", [("0", 0.5), ("2", 2.5), ("-1.5", -1.0)])
def test_a_stated_lag_is_honoured_zero_included(tmp_path, lag, shift):
    path = per_record_log(tmp_path / "p.csv", 1)
    result = analyze_cli(
        "--power-log", path, "--window", f"{unix(10)},{unix(30)}", "--lag", lag, "--out", tmp_path / "o"
    )
    assert result.exit_code == 0, result.output
    report = report_of(tmp_path / "o")["energyframe"]
    assert report["shift_s"] == pytest.approx(shift)
    assert report["placement"].startswith(f"--lag {float(lag):g} s, + 0.5 s")


@pytest.mark.parametrize("lag", ["nan", "inf", "-inf", "1e308", "86401"])
def test_a_lag_that_is_no_time_is_refused(tmp_path, lag):
    path = per_record_log(tmp_path / "p.csv", 1, seconds=20)
    result = analyze_cli(
        "--power-log", path, "--window", f"{unix(2)},{unix(10)}", "--lag", lag, "--out", tmp_path / "o"
    )
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: --lag must be a finite number of seconds, at most 86400 (one day) either way, got {float(lag)!r}\n"
    )
    assert not (tmp_path / "o").exists()


# -- input that could only hang or end in a traceback ------------------------------------------------------


def test_a_device_or_a_pipe_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it would wait for a writer for ever
    for path, kind in (("/dev/zero", "character device"), (fifo, "pipe")):
        result = analyze_cli("--power-log", path, "--window", "1,2", "--out", tmp_path / "o")
        assert result.exit_code == 2
        assert result.stderr == (
            f"Error: power log {path} is not a regular file but a {kind}: a log is read whole, and a device or a "
            "pipe may never end; copy what it holds into a file first\n"
        )


@pytest.mark.parametrize(
    "content,window,message",
    [
        (  # milliseconds in time_s: year 58870
            "time_s,power_w\n" + "".join(f"{1770200123000 + 100 * i},10\n" for i in range(10)),
            "1770200123,1770200124",
            "{path}: column time_s holds 1.7702e+12, which is no time in Unix seconds (milliseconds? times are Unix "
            "seconds): times must lie between 0 (1970) and 253402300799 (the end of 9999)",
        ),
        (
            "time_s,power_w\n1.0,10\n2.0,10\n",
            "0,1e308",
            "window '0,1e308': the time '1e308' holds 1e+308, which is no time in Unix seconds: times must lie "
            "between 0 (1970) and 253402300799 (the end of 9999)",
        ),
    ],
)
def test_times_no_date_can_show_are_one_line(tmp_path, content, window, message):
    path = tmp_path / "p.csv"
    path.write_text(content)
    result = analyze_cli("--power-log", path, "--window", window, "--out", tmp_path / "o")
    assert result.exit_code == 2
    assert result.stderr == f"Error: {message.format(path=path)}\n"


def run_with_limits(argv: list[str], limit_bytes: int | None = None) -> subprocess.Popen:
    def limit():
        if limit_bytes is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "energyframe", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
        env=env,
    )


def resident_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return float(status.split("VmRSS:")[1].split()[0]) / 1024 if "VmRSS:" in status else 0.0


def big_log(path: Path, rows: int) -> Path:
    with open(path, "w") as f:
        f.write("time_s,power_w\n")
        start = unix(0)
        for block in range(0, rows, 100_000):
            f.write(
                "".join(f"{start + 0.01 * i!r},100.0\n" for i in range(block, min(rows, block + 100_000)))
            )
    return path


def analyze_argv(path: Path, out: Path) -> list[str]:
    """analyze of one second of ``path`` into ``out``."""
    return ["analyze", "--power-log", str(path), "--window", f"{unix(1)},{unix(2)}", "--out", str(out)]


@pytest.mark.slow
def test_a_log_larger_than_the_memory_left_is_one_line(tmp_path):
    path = big_log(tmp_path / "big.csv", 2_000_000)
    argv = analyze_argv(path, tmp_path / "o")
    # room for the interpreter and its libraries, not for a log of 2,000,000 rows
    proc = run_with_limits(argv, limit_bytes=1_000 * 2**20)
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith(f"Error: power log {path} holds ")
    assert "of memory and this process has" in lines[0] or "does not fit in the memory" in lines[0]


@pytest.mark.slow
def test_ctrl_c_while_a_long_log_is_read_ends_it_with_130(tmp_path):
    path = big_log(tmp_path / "big.csv", 2_000_000)
    argv = analyze_argv(path, tmp_path / "o")
    proc = run_with_limits(argv)
    deadline = time.monotonic() + 120  # a bound for a stuck child, not a measure of speed
    while time.monotonic() < deadline and proc.poll() is None and resident_mib(proc.pid) < 400:
        time.sleep(0.01)  # the log is read and being split: far past the interpreter's 150 MiB
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip() == f"Error: interrupted by SIGINT; nothing was written into {tmp_path / 'o'}"
    assert not (tmp_path / "o").exists()


def test_analysis_results_are_never_nan_text(tmp_path):
    """A NaN energy is JSON null, never the text NaN (energy_report.json stays valid JSON)."""
    path = stepped_power_csv(tmp_path / "p.csv", 5.0, 1.0)
    result = analyze_cli("--power-log", path, "--window", f"{unix(45)},{unix(55)}", "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "o" / "energy_report.json").read_text()
    assert "NaN" not in text and json.loads(text)["energy_joules"]["total"] is None
    assert math.isnan(windows_of(tmp_path / "o")[0]["energy_j"])
    assert np.isnan(windows_of(tmp_path / "o")[0]["mean_power_w"])


def test_an_unreadable_samples_file_is_named_with_the_systems_reason(tmp_path):
    """Not "corrupt ... delete it": the file may be fine and only unreadable (an I/O error, a
    permission), and deleting it would lose the run's samples."""
    import energyframe as ef
    from tests.fakes import ListWorkload, SignalSource, busy_phase

    run = tmp_path / "run"
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu")],
        reporters=[],
        out=run,
        settings=ef.RunSettings(trials=1, min_window_s=0.05, warmup_s=0.0),
    )
    samples = run / "samples.parquet"
    samples.unlink()
    samples.symlink_to("/proc/self/mem")  # reading it fails with EIO, as a failing disk would
    shown = CliRunner().invoke(main, ["show", str(run)])
    assert shown.exit_code == 1
    assert shown.stderr == f"Error: cannot read {samples}: Input/output error\n"
    analysed = analyze_cli("--power-log", samples, "--run", run, "--out", tmp_path / "o")
    assert analysed.exit_code == 2
    assert analysed.stderr == f"Error: cannot read power log {samples}: Input/output error\n"
