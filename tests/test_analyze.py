"""Offline analysis of power logs recorded elsewhere (the earlier tool's files included)."""

import datetime as dt
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe import analyze as offline
from energyframe.cli import main
from energyframe.errors import UsageError
from energyframe.windows import WINDOW_COLUMNS

FIXTURES = Path(__file__).resolve().parent / "fixtures"
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
        config=ef.RunConfig(trials=2),
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
    assert any("not in time order; sorted" in w for w in log.warnings)
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
