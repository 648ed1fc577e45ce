"""Offline analysis of power logs recorded elsewhere (the earlier tool's files included)."""

import datetime as dt
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.core.windows import WINDOW_COLUMNS
from energyframe.errors import UsageError
from energyframe.offline import analyze as offline

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
T0 = dt.datetime(2026, 2, 4, 10, 15, 20)


def earlier_log(path, seconds=400, pm1=125.3, pm2=118.7, shuffle=False, duplicate=False, zone=""):
    rows = []
    for i in range(seconds):
        stamp = (T0 + dt.timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S") + zone
        rows.append(f"{stamp},{i},{pm1},{pm2},{pm1 + pm2:.1f}")
    if duplicate:
        rows.insert(10, rows[10])
    if shuffle:
        rows[20], rows[21] = rows[21], rows[20]
    path.write_text("time,id,pm1,pm2,sum\n" + "\n".join(rows) + "\n")
    return path


def timing_json(path, start="2026-02-04 10:15:25.123", end="2026-02-04 10:20:35.456", runs=1000):
    path.write_text(
        json.dumps(
            {
                "full_model_inference_us": 8234500,
                "num_runs": runs,
                "start_timestamp": start,
                "end_timestamp": end,
            }
        )
    )
    return path


def test_the_earlier_tools_files_give_its_report(tmp_path):
    log = earlier_log(tmp_path / "power_bloom.csv")
    timing = timing_json(tmp_path / "full_model_timing.json")
    result = CliRunner().invoke(
        main,
        ["analyze", "--power-log", str(log), "--timing", str(timing), "--out", str(tmp_path / "results")],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "results" / "energy_report.json").read_text())
    duration = 310.333
    assert report["duration_seconds"] == pytest.approx(duration)
    assert report["num_power_samples"] == 310
    assert report["num_runs"] == 1000
    assert report["power_watts"] == pytest.approx({"average": 244.0, "peak": 244.0, "min": 244.0})
    assert report["energy_joules"]["total"] == pytest.approx(244.0 * duration)
    assert report["energy_joules"]["per_run"] == pytest.approx(244.0 * duration / 1000)
    assert report["energy_wh"]["total"] == pytest.approx(244.0 * duration / 3600)
    assert report["energyframe"]["channel"] == "sum"
    windows = (tmp_path / "results" / "windows.csv").read_text().splitlines()
    assert windows[0] == ",".join([*WINDOW_COLUMNS, "log"])  # the run's columns, then the log
    assert len(windows) == 1 + 3  # pm1, pm2, sum


def test_an_nvidia_smi_log_with_a_window_on_the_command_line(tmp_path):
    log = FIXTURES / "nvidia-smi-sample-h200.csv"
    lines = log.read_text().splitlines()
    first, last = lines[1].split(",")[0], lines[-1].split(",")[0]
    start = offline.parse_time(first) + 0.1
    end = offline.parse_time(last) - 0.1
    report = offline.analyze([offline.load_power_log(log)], [offline.Window("w", start, end, 10)], tmp_path)
    assert report["energyframe"]["channel"] == "gpu0"
    assert 100 < report["power_watts"]["average"] < 1000
    assert report["energy_joules"]["per_run"] == pytest.approx(report["energy_joules"]["total"] / 10)


def test_a_runs_own_samples_and_windows(tmp_path, power_csv):
    csv = power_csv(75.0, period_s=0.05, duration_s=5.0)
    ef.run(
        "sleep:seconds=0.3",
        power=[f"replay:file={csv},loop=true"],
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunSettings(trials=2),
    )
    result = CliRunner().invoke(
        main,
        [
            "analyze",
            "--power-log",
            str(tmp_path / "run" / "samples.parquet"),
            "--run",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "again"),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "again" / "energy_report.json").read_text())
    assert len(report["windows"]) == 2
    assert report["windows"][0]["power_watts"]["average"] == pytest.approx(75.0)


def test_a_window_the_log_does_not_cover_is_an_error(tmp_path):
    log = offline.load_power_log(earlier_log(tmp_path / "p.csv", seconds=60))
    late = offline.Window(
        "late", offline.parse_time("2026-02-04 11:00:00"), offline.parse_time("2026-02-04 11:01:00")
    )
    with pytest.raises(UsageError) as e:
        offline.analyze([log], [late], tmp_path / "out")
    assert "window late (2026-02-04 11:00:00.000 to 2026-02-04 11:01:00.000) is not covered by p.csv" in str(
        e.value
    )
    assert "different time zones? give --tz" in str(e.value)


def test_unsorted_and_duplicated_rows_are_fixed_with_warnings(tmp_path):
    log = offline.load_power_log(earlier_log(tmp_path / "p.csv", seconds=60, shuffle=True, duplicate=True))
    assert any("not in time order" in w and w.endswith("; sorted") for w in log.warnings)
    assert any("duplicated timestamp(s) in sum; their values were averaged" in w for w in log.warnings)
    report = offline.analyze(
        [log], [offline.Window("w", log.span[0] + 5, log.span[0] + 50)], tmp_path / "out"
    )
    assert report["power_watts"]["average"] == pytest.approx(244.0)
    assert report["warnings"]


def test_mixed_time_zones_are_refused(tmp_path):
    path = earlier_log(tmp_path / "p.csv", seconds=5, zone="+01:00")
    text = path.read_text().splitlines()
    text[3] = text[3].replace("+01:00", "")
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(UsageError, match="mixes timestamps with and without a time zone"):
        offline.load_power_log(path)


def test_time_zones():
    assert offline.parse_time("2026-02-04 10:15:23Z") == offline.parse_time("2026-02-04 11:15:23+01:00")
    assert offline.parse_time("2026-02-04 10:15:23", tz="UTC") == offline.parse_time(
        "2026-02-04 10:15:23+00:00"
    )
    assert offline.parse_time("1770200123.5") == 1770200123.5
    with pytest.raises(UsageError, match="cannot read the time"):
        offline.parse_time("yesterday")


def test_unknown_log_format(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UsageError, match="not a power log energyframe knows"):
        offline.load_power_log(tmp_path / "x.csv")


def test_cli_needs_exactly_one_source_of_windows(tmp_path):
    log = earlier_log(tmp_path / "p.csv", seconds=10)
    result = CliRunner().invoke(main, ["analyze", "--power-log", str(log), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output.endswith(
        "Error: give the windows one way: --run DIR, --timing FILE or --window START,END\n"
    )


# -- impossible power, placement, a run's own files -----------------------------------------------


def unix(seconds: float) -> float:
    return (T0 + dt.timedelta(seconds=seconds)).timestamp()


def analyze_cli(*args):
    return CliRunner().invoke(main, ["analyze", *map(str, args)])


def test_a_negative_record_is_left_out_flagged_and_counted(tmp_path):
    log = earlier_log(tmp_path / "p.csv", seconds=120)
    lines = log.read_text().splitlines()
    lines[51] = lines[51].rsplit(",", 1)[0] + ",-100.0"  # the record at 50 s: sum -100 W
    log.write_text("\n".join(lines) + "\n")
    clean, dirty = f"{unix(10)},{unix(40)}", f"{unix(45)},{unix(60)}"
    result = analyze_cli("--power-log", log, "--window", clean, "--window", dirty, "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert "p.csv: 1 row(s) of sum with negative power (first: -100 W at " in result.output
    report = json.loads((tmp_path / "o" / "energy_report.json").read_text())
    first, second = report["windows"]
    # the record is left out: the meter's neighbours bridge it, at 244 W throughout
    assert second["energy_joules"]["total"] == pytest.approx(244.0 * 15)
    assert second["power_watts"]["min"] == pytest.approx(244.0)
    assert second["energyframe"]["flags"] == ["negative_power", "meter_window_under_60s"]
    assert second["energyframe"]["rejected_rows"] == {"negative_power": 1}
    assert first["energyframe"]["flags"] == ["meter_window_under_60s"]
    assert first["energyframe"]["rejected_rows"] == {}
    assert report["rejected_rows"] == {"p.csv": {"sum": {"negative_power": 1}}}
    windows = {(r["phase"], r["channel"]): r for r in csv_rows(tmp_path / "o" / "windows.csv")}
    assert "negative_power" in windows[(dirty, "sum")]["flags"]
    assert "negative_power" not in windows[(dirty, "pm1")]["flags"]  # pm1 read 125.3 W all along


def csv_rows(path):
    import pandas as pd

    return pd.read_csv(path, dtype={"flags": str, "phase": str}).fillna({"flags": ""}).to_dict("records")


def smi_csv(path, rows):
    """nvidia-smi's CSV (with units): rows of (seconds, instant, draw)."""
    lines = ["timestamp, index, uuid, power.draw.instant [W], power.draw.average [W]"]
    for t, instant, draw in rows:
        moment = (T0 + dt.timedelta(seconds=t)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines.append(f"{moment}, 0, GPU-0, {instant}, {draw}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_nvidia_smi_error_values_and_na_rows_are_left_out(tmp_path):
    rows = [(0.1 * i, "300.00 W", "300.00 W") for i in range(100)]
    rows[40] = (rows[40][0], "-500.00 W", "300.00 W")  # nvidia-smi printing its error value
    rows[50] = (rows[50][0], "nan", "300.00 W")
    rows[60] = (rows[60][0], "[N/A]", "300.00 W")
    rows[70] = (rows[70][0], "4294967.29 W", "300.00 W")  # 0xFFFFFFFF mW: no power at all
    log = smi_csv(tmp_path / "smi.csv", rows)
    window = f"{unix(2)},{unix(8)}"
    result = analyze_cli("--power-log", log, "--window", window, "--runs", 10, "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "o" / "energy_report.json").read_text())
    assert report["energy_joules"]["total"] == pytest.approx(300.0 * 6)
    assert report["num_power_samples"] == 57  # 61 rows in the window, 4 left out
    assert report["energyframe"]["flags"] == ["negative_power", "invalid_reading", "missing_power"]
    counts = {"negative_power": 1, "invalid_reading": 2, "missing_power": 1}
    assert report["energyframe"]["rejected_rows"] == counts
    assert report["rejected_rows"] == {"smi.csv": {"gpu0": counts}}
    assert "smi.csv: 1 row(s) of gpu0 with no value ([N/A] or empty) (first at " in result.output
    assert (
        "smi.csv: 1 row(s) of gpu0 with power above 1e+06 W (a sensor's error value) (first: 4.29497e+06 W"
        in (result.output)
    )


def test_a_one_second_average_is_placed_at_the_middle_of_its_second(tmp_path):
    """power.draw.average averages the second before its stamp: a load step seen by both readings
    at 10 s is 0.5 s earlier in the average once placed; power.draw.instant stays as stamped."""
    rows = [(0.1 * i, 100 if i < 100 else 300, 100 if i < 100 else 300) for i in range(200)]
    log = offline.load_power_log(smi_csv(tmp_path / "smi.csv", rows))
    offline.analyze([log], [offline.Window("w", unix(9), unix(10))], tmp_path / "o")
    energy = {r["channel"]: r["energy_j"] for r in csv_rows(tmp_path / "o" / "windows.csv")}
    # instant: 100 W to 9.9 s, a ramp to 300 W at 10 s: 0.9 * 100 + 0.1 * 200
    assert energy["gpu0"] == pytest.approx(110.0)
    # average moved by 0.5 s: 100 W to 9.4 s, a ramp to 300 W at 9.5 s, 300 W on: 40 + 20 + 150
    assert energy["gpu0.power_average"] == pytest.approx(210.0)
    report = json.loads((tmp_path / "o" / "energy_report.json").read_text())["energyframe"]
    assert report["timing"] == "exact" and report["shift_s"] == 0.0


def test_a_stated_lag_moves_a_meter_by_it_and_half_its_interval(tmp_path):
    log = earlier_log(tmp_path / "p.csv", seconds=120)
    result = analyze_cli(
        "--power-log", log, "--window", f"{unix(10)},{unix(100)}", "--lag", 2.0, "--out", tmp_path / "o"
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "o" / "energy_report.json").read_text())["energyframe"]
    assert report["shift_s"] == pytest.approx(2.5) and report["timing"] == "unknown"
    assert report["placement"].startswith("--lag 2 s, + 0.5 s")


def test_a_runs_own_samples_give_the_runs_windows(tmp_path):
    from tests.fakes import ListWorkload, SignalSource, busy_phase

    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu", watts=300.0)],
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunConfig(trials=3, min_window_s=0.1, warmup_s=0.0, idle_s=0.3),
    )
    run = tmp_path / "run"
    result = analyze_cli("--power-log", run / "samples.parquet", "--run", run, "--out", tmp_path / "again")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    import pandas as pd

    again = pd.read_csv(tmp_path / "again" / "windows.csv")
    recorded = pd.read_csv(run / "windows.csv")
    assert list(again.columns) == [*WINDOW_COLUMNS, "log"]  # the run's columns, then the log
    assert len(again) == len(recorded) == 6  # 3 windows x (counter, power)
    # Unix seconds hold 0.24 us: the edges and samples, read back, move by that much at most,
    # which at 300 W is well under a millijoule
    for column, tolerance in (("start_s", 1e-6), ("end_s", 1e-6), ("iterations", 0)):
        assert again[column].to_numpy() == pytest.approx(recorded[column].to_numpy(), abs=tolerance)
    for column, tolerance in (("energy_j", 1e-3), ("dynamic_energy_j", 1e-3), ("mean_power_w", 1e-2)):
        assert again[column].to_numpy() == pytest.approx(recorded[column].to_numpy(), abs=tolerance)
    assert recorded["dynamic_energy_j"].notna().all()  # the idle baseline was measured and reused


def test_energyframes_own_nvidia_smi_log_reads_without_warnings(tmp_path, monkeypatch):
    """The raw log the nvidia-smi source keeps (tests/fake_bin/nvidia-smi behind it)."""
    import os
    import time

    fake = tmp_path / "scenario.json"
    fake.write_text(json.dumps({"gpus": 2, "watts": 250.0}))
    monkeypatch.setenv("FAKE_SMI_SCENARIO", str(fake))
    monkeypatch.setenv("PATH", os.pathsep.join([str(FIXTURES.parent / "fake_bin"), os.environ["PATH"]]))
    with ef.measure(power=["nvidia-smi"], sync=None, out=tmp_path / "run") as m:
        for _ in range(2):
            with m.window("steady"):
                time.sleep(0.5)
    raw = tmp_path / "run" / "raw" / "nvidia-smi" / "nvidia-smi.csv"
    result = analyze_cli("--power-log", raw, "--run", tmp_path / "run", "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    rows = csv_rows(tmp_path / "o" / "windows.csv")
    gpu = {(r["trial"], r["channel"]): r["mean_power_w"] for r in rows}
    assert gpu[(0, "gpu0")] == pytest.approx(250.0) and gpu[(1, "gpu1")] == pytest.approx(260.0)


@pytest.mark.slow
def test_energyframes_own_wattsup_log_reads_without_warnings(tmp_path):
    """Two emulated meters: energyframe writes one row per record, two rows per second."""
    import time

    pytest.importorskip("serial")
    from energyframe.power.wattsup_emulator import WattsUpEmulator, constant

    with WattsUpEmulator(constant(150.0)) as a, WattsUpEmulator(constant(50.0), seed=1) as b:
        with ef.measure(power=[f"wattsup:ports={a.port},{b.port}"], sync=None, out=tmp_path / "run") as m:
            with m.window("w"):
                time.sleep(3.0)
    raw = tmp_path / "run" / "raw" / "wattsup" / "wattsup.csv"
    result = analyze_cli(
        "--power-log",
        raw,
        "--window",
        f"{m.result.windows['start_s'][0]},{m.result.windows['end_s'][0]}",
        "--out",
        tmp_path / "o",
    )
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    powers = {r["channel"]: r["mean_power_w"] for r in csv_rows(tmp_path / "o" / "windows.csv")}
    assert powers == pytest.approx({"pm1": 150.0, "pm2": 50.0, "sum": 200.0})


def test_a_wall_meter_log_is_aligned_with_the_runs_gpu_power(tmp_path):
    """A 100/400-W square wave recorded on the run's clock, and a meter log of it stamped 2 s
    late (each record the mean of the second before its lag): the lag is found, the meter moved."""
    import time

    import numpy as np

    start = float(int(time.time()) - 200)

    def gpu(t):
        return np.where((t % 10) < 5, 400.0, 100.0)

    ts = np.arange(0, 120, 0.02)
    (tmp_path / "gpu.csv").write_text(
        "time_s,power_w\n" + "".join(f"{start + float(t)!r},{float(p)!r}\n" for t, p in zip(ts, gpu(ts)))
    )
    ef.run(
        "sleep:seconds=0.05",
        power=[f"replay:file={tmp_path}/gpu.csv,align=absolute,scope=gpu"],
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunConfig(trials=1, warmup_s=0.0),
    )
    rows = []
    for k in range(5, 115):
        mean = float(np.mean(gpu(np.linspace(k - 3.0, k - 2.0, 1001))))
        rows.append(f"{dt.datetime.fromtimestamp(start + k):%Y-%m-%d %H:%M:%S},{k},{mean:.1f},{mean:.1f}")
    (tmp_path / "wall.csv").write_text("time,id,pm1,sum\n" + "\n".join(rows) + "\n")
    log = offline.load_power_log(tmp_path / "wall.csv")
    window = offline.Window("w", start + 20, start + 100)
    report = offline.analyze([log], [window], tmp_path / "o", align_with=tmp_path / "run")
    alignment = report["energyframe"]["alignment"]
    assert alignment["applied"] and alignment["reference"] == "replay"
    assert alignment["lag_s"] == pytest.approx(2.0, abs=0.05)
    assert report["energyframe"]["shift_s"] == pytest.approx(alignment["lag_s"] + 0.5)
    assert report["energy_joules"]["total"] == pytest.approx(250.0 * 80, rel=1e-3)  # 8 whole periods


def test_energyframes_own_nvidia_smi_log_with_garbage_is_read_around_it(tmp_path, monkeypatch):
    """nvidia-smi printed garbage (the run failed on it): the raw log's good rows still count, and
    the garbage is skipped with one warning."""
    import os
    import time

    fake = tmp_path / "scenario.json"
    fake.write_text(json.dumps({"gpus": 1, "watts": 250.0, "garbage_after_s": 1.5}))
    monkeypatch.setenv("FAKE_SMI_SCENARIO", str(fake))
    monkeypatch.setenv("PATH", os.pathsep.join([str(FIXTURES.parent / "fake_bin"), os.environ["PATH"]]))
    with pytest.raises(ef.PowerSourceError, match="lines in a row that do not parse"):
        with ef.measure(power=["nvidia-smi"], sync=None, out=tmp_path / "run") as m:
            while True:
                with m.window("steady"):
                    time.sleep(0.2)
    raw = tmp_path / "run" / "raw" / "nvidia-smi" / "nvidia-smi.csv"
    lines = raw.read_text(errors="replace").splitlines()
    good = [line.split(",")[0] for line in lines[1:] if "garbage" not in line]
    assert len(good) >= 10 and any("garbage" in line for line in lines)
    window = f"{good[1]},{good[-2]}"
    result = analyze_cli("--power-log", raw, "--window", window, "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    assert "line(s) that are not rows of nvidia-smi's log were skipped (first: line " in result.output
    report = json.loads((tmp_path / "o" / "energy_report.json").read_text())
    assert report["power_watts"]["average"] == pytest.approx(250.0)


def test_a_meter_log_over_a_timing_only_run_is_integrated_unaligned(tmp_path):
    import time

    before = time.time()
    ef.run(
        "sleep:seconds=0.01", power="none", reporters=[], out=tmp_path / "run", settings=ef.RunConfig(trials=2)
    )
    rows = [
        f"{dt.datetime.fromtimestamp(int(before) + k):%Y-%m-%d %H:%M:%S},{k},100.0,100.0"
        for k in range(-20, 40)
    ]
    (tmp_path / "wall.csv").write_text("time,id,pm1,sum\n" + "\n".join(rows) + "\n")
    result = analyze_cli(
        "--power-log", tmp_path / "wall.csv", "--run", tmp_path / "run", "--out", tmp_path / "o"
    )
    assert result.exit_code == 0, result.output
    assert "wall.csv: not aligned with" in result.output and "holds no samples" in result.output
    report = json.loads((tmp_path / "o" / "energy_report.json").read_text())
    assert [w["power_watts"]["average"] for w in report["windows"]] == pytest.approx([100.0, 100.0])
    assert report["windows"][0]["energyframe"]["shift_s"] == 0.5  # half its interval, as in a live run


@pytest.mark.slow
def test_a_killed_runs_finished_windows_are_analysed_from_its_journal(tmp_path, power_csv):
    import os
    import signal
    import subprocess
    import sys
    import time

    csv = power_csv(90.0, period_s=0.05, duration_s=60.0)
    out = tmp_path / "r"
    argv = [sys.executable, "-m", "energyframe", "run", "--power", f"replay:file={csv}"]
    argv += ["--workload", "sleep:seconds=0.2", "--trials", "1000", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = out / "windows.partial.csv"
    deadline = time.monotonic() + 60
    # samples are drained once a second: by the 10th window the first ones are covered on disk
    while time.monotonic() < deadline and (not journal.exists() or journal.read_text().count("closed") < 10):
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "windows.csv").exists() and (out / "samples.partial.csv").exists()
    result = analyze_cli("--power-log", out / "samples.partial.csv", "--run", out, "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    rows = csv_rows(tmp_path / "o" / "windows.csv")
    assert len(rows) >= 3 and all(r["phase"] == "sleep" for r in rows)
    # the samples a killed run had not drained yet are lost: its last windows may be uncovered
    covered = [r for r in rows if "uncovered" not in r["flags"]]
    assert len(covered) >= 2
    assert [r["mean_power_w"] for r in covered] == pytest.approx([90.0] * len(covered))
    assert all(r["energy_j"] != r["energy_j"] for r in rows if "uncovered" in r["flags"])  # NaN
