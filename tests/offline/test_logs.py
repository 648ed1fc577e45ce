"""The one power-log reader: every kind of log into channels and sample series, values as written."""

import datetime as dt
import json

import numpy as np
import pytest

import energyframe as ef
from energyframe.errors import UsageError
from energyframe.offline import logs
from energyframe.plugin import ClockBase, Quantity, Scope, Timing
from tests.fakes import ListWorkload, SignalSource, busy_phase

T0 = dt.datetime(2026, 2, 4, 10, 15, 20)


def stamp(seconds: float, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    moment = T0 + dt.timedelta(seconds=seconds)
    text = moment.strftime(fmt)
    return text[:-3] if fmt.endswith("%f") else text


def smi_log(path, rows, units=True):
    """An nvidia-smi CSV: rows of (seconds, gpu, instant, draw, average)."""
    w = " [W]" if units else ""
    lines = [
        f"timestamp, index, uuid, power.draw.instant{w}, power.draw{w}, power.draw.average{w}, temperature.gpu"
    ]
    for t, gpu, instant, draw, average in rows:
        unit = " W" if units else ""
        values = [f"{v}{unit}" if not str(v).startswith("[") else v for v in (instant, draw, average)]
        lines.append(f"{stamp(t, '%Y/%m/%d %H:%M:%S.%f')}, {gpu}, GPU-{gpu}, {', '.join(values)}, 45")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_nvidia_smi_channels_timing_and_values_as_written(tmp_path):
    rows = [(0.1 * i, gpu, 300 + gpu, 290, 280) for i in range(20) for gpu in (0, 1)]
    rows[20] = (rows[20][0], 0, "-500.00", 290, 280)  # a printed error value stays in the series
    rows[24] = (rows[24][0], 0, "[N/A]", 290, 280)
    log = logs.read_log(smi_log(tmp_path / "smi.csv", rows))
    assert log.kind == logs.NVIDIA_SMI and log.primary == "gpu0"
    # the live nvidia-smi source's channels: the instant reading, and the 1-s average
    assert set(log.channels) == {
        "gpu0",
        "gpu0.power_average",
        "gpu0.temperature",
        "gpu1",
        "gpu1.power_average",
        "gpu1.temperature",
    }
    gpu0, average = log.channels["gpu0"], log.channels["gpu0.power_average"]
    assert (gpu0.timing, gpu0.averaging_s, gpu0.primary) == (Timing.EXACT, 0.0, True)
    assert (average.timing, average.averaging_s, average.primary) == (Timing.PERIOD_END, 1.0, False)
    assert gpu0.scope == Scope.GPU and gpu0.clock == ClockBase.WALL
    assert gpu0.resolution_s == pytest.approx(0.1)
    assert log.channels["gpu0.temperature"].quantity == Quantity.STATE
    assert -500.0 in log.series["gpu0"].values  # the reader does not correct anything
    assert len(log.series["gpu0"]) == 19 and log.missing["gpu0"].size == 1
    assert set(log.series["gpu1"].values) == {301.0}
    assert log.warnings == ()
    kept, rejected = logs.plausible(log, "gpu0")
    assert len(kept) == 18 and rejected.count() == {"negative": 1, "missing": 1}
    assert list(rejected.values["negative"]) == [-500.0]


def test_nvidia_smi_without_units_and_a_field_never_reported(tmp_path):
    rows = [(0.1 * i, 0, 300, 290, "[N/A]") for i in range(10)]
    log = logs.read_log(smi_log(tmp_path / "smi.csv", rows, units=False))
    assert set(log.channels) == {"gpu0", "gpu0.temperature"}  # power.draw.average: never a value, no channel
    assert list(log.series["gpu0"].values) == [300.0] * 10


def earlier_rows(n, pm1=125.3, pm2=118.7):
    return [f"{stamp(i)},{i},{pm1},{pm2},{pm1 + pm2:.1f}" for i in range(n)]


def test_the_earlier_tools_wattsup_csv(tmp_path):
    path = tmp_path / "power_bloom.csv"
    path.write_text("time,id,pm1,pm2,sum\n" + "\n".join(earlier_rows(30)) + "\n")
    log = logs.read_log(path)
    assert (
        log.kind == logs.WATTSUP_CSV and log.primary == "sum" and list(log.channels) == ["pm1", "pm2", "sum"]
    )
    wall = log.channels["sum"]
    assert (wall.timing, wall.averaging_s, wall.resolution_s) == (Timing.UNKNOWN, 1.0, 1.0)
    assert wall.scope == Scope.SYSTEM_WALL and wall.primary and not log.channels["pm1"].primary
    assert np.allclose(log.series["sum"].values, 244.0) and len(log.series["sum"]) == 30
    assert log.warnings == ()


def test_energyframes_own_wattsup_csv_reads_without_warnings(tmp_path):
    """As the wattsup source writes it: one row per meter record, stamps in whole seconds, a
    meter that has not reported yet left empty (and the sum then not the wall's)."""
    rows = [f"{stamp(0)},1,150.0,,150.0"]
    for second in range(6):
        rows.append(f"{stamp(second)},{2 * second + 2},150.0,{50.0 + second},{200.0 + second}")
        rows.append(
            f"{stamp(second + 1)},{2 * second + 3},{150.0 + second},{50.0 + second},{200.0 + 2 * second}"
        )
    path = tmp_path / "wattsup.csv"
    path.write_text("time,id,pm1,pm2,sum\n" + "\n".join(rows) + "\n")
    log = logs.read_log(path)
    assert log.warnings == ()
    # the last row of each second: every meter's state at that second's end
    assert list(log.series["sum"].times_s - log.series["sum"].times_s[0]) == [0, 1, 2, 3, 4, 5, 6]
    assert list(log.series["sum"].values) == [200.0, 201.0, 202.0, 203.0, 204.0, 205.0, 210.0]
    assert log.missing["sum"].size == 0 and log.missing["pm2"].size == 0


def test_a_record_written_twice_is_averaged_with_a_warning(tmp_path):
    rows = earlier_rows(10)
    rows.insert(4, rows[4].replace("244.0", "250.0"))  # same time and id: the same record
    path = tmp_path / "p.csv"
    path.write_text("time,id,pm1,pm2,sum\n" + "\n".join(rows) + "\n")
    log = logs.read_log(path)
    assert "p.csv: 1 duplicated timestamp(s) in sum; their values were averaged" in log.warnings
    assert log.series["sum"].values[4] == pytest.approx(247.0)


def test_a_runs_samples_carry_the_runs_channel_descriptions(tmp_path):
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu", watts=200.0)],
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunConfig(trials=1, min_window_s=0.05, warmup_s=0.0),
    )
    log = logs.read_log(tmp_path / "run" / "samples.parquet")
    assert log.kind == logs.SAMPLES and log.primary == "gpu"
    assert log.channels["gpu"].quantity == Quantity.ENERGY and log.channels["gpu"].scope == Scope.GPU
    assert log.channels["gpu.clock"].quantity == Quantity.STATE
    assert all(c.clock == ClockBase.WALL for c in log.channels.values())  # Unix seconds in the file
    assert log.run_meta["primary_channels"] == ["gpu"]
    times = log.series["gpu"].times_s
    assert np.all(np.diff(times) >= 0) and times[0] > 1.7e9


def test_a_time_s_power_w_csv_and_its_gaps(tmp_path):
    path = tmp_path / "meter.csv"
    path.write_text("time_s,power_w\n1.0,10\n2.0,\n3.0,-100\n4.0,12\n")
    log = logs.read_log(path)
    assert log.kind == logs.POWER_CSV and list(log.channels) == ["meter"]
    assert list(log.series["meter"].values) == [10.0, -100.0, 12.0]
    assert list(log.missing["meter"]) == [2.0]
    assert logs.read_log(path, name="r").primary == "r"


def test_garbage_lines_are_skipped_with_a_warning(tmp_path):
    rows = earlier_rows(10)
    rows.insert(3, "\x00\x1b[0m###### garbage ######")
    rows.insert(6, "garbage,with,commas")
    path = tmp_path / "p.csv"
    path.write_text("time,id,pm1,pm2,sum\n" + "\n".join(rows) + "\n")
    log = logs.read_log(path)
    assert len(log.series["sum"]) == 10 and log.skipped_lines == 2
    assert log.warnings == (
        "p.csv: 2 line(s) that are not rows of the log were skipped (first: line 5: "
        "'\\x00\\x1b[0m###### garbage ######')",
    )


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "is empty: no header and no rows"),
        (b"\x89PNG\r\n\x1a\n\x00\x00binary", "is binary, not a CSV power log"),
        (b"time,id,pm1,pm2,sum\n", "has a header but no rows"),
        (b"a,b\n1,2\n", "is not a power log energyframe knows"),
        (b"time_s,watts\n1,2\n", "needs a power_w or energy_j column; it has ['time_s', 'watts']"),
        (
            b"time,id,pm1,pm2,sum\n2026-02-04 10:15:20,0,1.0,2.0,3.0\n2026-02-04 10:15:21,1,1.0,2.",
            "is truncated: its last line (3: '2026-02-04 10:15:21,1,1.0,2.') ends in the middle of a row",
        ),
        (
            # cut inside the last number: the fields are all there, the sum is not the meters'
            b"time,id,pm1,pm2,sum\n2026-02-04 10:15:20,0,1.0,2.0,3.0\n2026-02-04 10:15:21,1,100.0,200.0,30",
            "is truncated: its last line (3: '2026-02-04 10:15:21,1,100.0,200.0,30')",
        ),
        (b"time,id,pm1,pm2,sum\nyesterday,0,1,2,3\n", "line 2: cannot read the time 'yesterday'"),
        (b"PAR1\x00\x00\x00", "is not a readable parquet file"),
    ],
)
def test_bad_files_are_refused_naming_the_file_and_the_cause(tmp_path, content, message):
    path = tmp_path / "log.csv"
    path.write_bytes(content)
    with pytest.raises(UsageError) as e:
        logs.read_log(path)
    assert str(path) in str(e.value) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_run_json_beside_samples_that_cannot_be_read_is_a_warning(tmp_path):
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu")],
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunConfig(trials=1, min_window_s=0.05, warmup_s=0.0),
    )
    (tmp_path / "run" / "run.json").write_text(json.dumps([1, 2]))
    log = logs.read_log(tmp_path / "run" / "samples.parquet")
    assert log.run_meta is None and log.channels["gpu"].scope == Scope.OTHER  # from its unit alone
    assert any("is not a run description" in w for w in log.warnings)


def test_times_of_a_whole_column_are_those_of_each_text():
    texts = [
        "2026-02-04 10:15:23",
        "2026-02-04 10:15:23.5",
        "2026/11/22 03:41:38.233",
        "2026-07-04T23:59:59.999",
        "1770200123.25",
    ]
    expected = [logs.parse_time(t) for t in texts]
    assert list(logs.unix_times(texts, None, "x")) == pytest.approx(expected, abs=1e-6)
    assert list(logs.unix_times(texts, "+01:00", "x")) == pytest.approx(
        [logs.parse_time(t, "+01:00") for t in texts], abs=1e-6
    )
    zoned = ["2026-02-04 10:15:23Z", "2026-02-04 11:15:24Z"]
    assert list(logs.unix_times(zoned, None, "x")) == pytest.approx([logs.parse_time(t) for t in zoned])
    assert np.isnan(logs.unix_times(["soon", "2026-02-04 10:15:23"], None, "x")[0])
    with pytest.raises(UsageError, match="mixes time zones"):
        logs.unix_times(["2026-02-04 10:15:23+01:00", "2026-02-04 10:15:23+02:00"], None, "x")


def test_an_nvidia_smi_log_without_the_instant_field_is_a_one_second_average(tmp_path):
    lines = ["timestamp, power.draw [W]"] + [
        f"{stamp(0.1 * i, '%Y/%m/%d %H:%M:%S.%f')}, 250.00 W" for i in range(10)
    ]
    (tmp_path / "old.csv").write_text("\n".join(lines) + "\n")
    log = logs.read_log(tmp_path / "old.csv")
    (channel,) = log.channels.values()
    assert channel.name == "gpu0" and (channel.timing, channel.averaging_s) == (Timing.PERIOD_END, 1.0)
