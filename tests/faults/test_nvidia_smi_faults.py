"""How the nvidia-smi source fails: each fault of the fake nvidia-smi (tests/fake_bin) ends in one
clear line, after the samples taken before it, or, for data problems, passes the values on
unchanged for the run to flag. Run-level tests at the end go through ``energyframe run``."""

import json
import re
import subprocess
import sys
import time

import pytest

import energyframe as ef
from energyframe.errors import PowerSourceError
from energyframe.plugin import SourceContext
from energyframe.power.nvidia_smi import NvidiaSmiPowerSource
from tests.fakes import one_line, read_until_error


def start(warnings=None, **options):
    source = NvidiaSmiPowerSource(name="nvidia-smi", gpus="0", **options)
    source.start(SourceContext(warn=(warnings.append if warnings is not None else print)))
    return source


def power(samples, channel="gpu0"):
    return [s for s in samples if s.channel == channel]


def test_child_exiting_mid_run(fake_smi):
    fake_smi(die_after_s=0.5, exit_code=15)
    source = start()
    samples, error, raised_at = read_until_error(source)
    source.stop()
    assert type(error) is PowerSourceError
    assert one_line(error) == (
        "nvidia-smi exited unexpectedly (code 15): Unable to determine the device handle for "
        "GPU0000:19:00.0: Unknown Error"
    )
    rows = power(samples)
    assert len(rows) > 5 and {s.value for s in rows} == {300.0}
    assert all(s.time_s < raised_at for s in rows)
    assert source.read() == []  # raised once


def test_exit_1_at_start(fake_smi):
    fake_smi(exit_at_start=1)
    with pytest.raises(PowerSourceError) as e:
        start()
    assert one_line(e.value) == "nvidia-smi exited at once (code 1): No devices were found"


def test_alive_but_silent_mid_run(fake_smi):
    fake_smi(stall_after_s=0.5)
    source = start(silence_s=0.5)
    samples, error, _ = read_until_error(source)
    assert type(error) is PowerSourceError
    assert re.fullmatch(
        r"nvidia-smi is running but printed nothing for 0\.\d s \(a row was due every 20 ms\): the driver "
        r"may be hung; run nvidia-smi by hand and check dmesg",
        one_line(error),
    )
    assert len(power(samples)) > 5
    assert source._proc.poll() is not None  # the hung child was reaped at once
    source.stop()


def test_alive_but_silent_from_the_start(fake_smi):
    fake_smi(stall_at_start=True)
    source = NvidiaSmiPowerSource(name="nvidia-smi", silence_s=0.2)
    with pytest.raises(PowerSourceError) as e:
        source.start(SourceContext())
    assert one_line(e.value) == "nvidia-smi started but printed nothing for 0.6 s: the driver may be hung"
    assert source._proc.poll() is not None


def test_garbage(fake_smi):
    fake_smi(garbage_after_s=0.4)
    warnings = []
    source = start(warnings, interval_ms=5)
    samples, error, _ = read_until_error(source)
    source.stop()
    assert one_line(error) == (
        "nvidia-smi printed 20 lines in a row that do not parse, e.g. '\\x00\\x1b[0m###### garbage ######'"
    )
    assert len(power(samples)) > 5 and {s.value for s in power(samples)} == {300.0}
    assert warnings == ["nvidia-smi printed a line that does not parse: '\\x00\\x1b[0m###### garbage ######'"]


def test_flood(fake_smi):
    fake_smi(flood_after_s=0.4)
    source = start()
    samples, error, _ = read_until_error(source)
    source.stop()
    assert re.fullmatch(
        r"nvidia-smi printed \d+ rows in \d+\.\d s where -lms 20 asks for about 50 a second: its output "
        r"is not what was asked for",
        one_line(error),
    )
    assert {s.value for s in power(samples)} == {300.0}  # the rows before and during are real readings


def test_unknown_header_for_the_power_field(fake_smi):
    fake_smi(headers={"power.draw.instant": "power.draw.now [W]"})
    with pytest.raises(PowerSourceError) as e:
        start()
    message = one_line(e.value)
    assert message.startswith(
        "nvidia-smi's header lacks ['power.draw.instant'] (it printed 'timestamp, index, uuid, power.draw.now [W], "
    )
    assert message.endswith("): this nvidia-smi names its columns differently")


def test_unknown_header_for_a_state_field_drops_that_channel(fake_smi):
    fake_smi(headers={"clocks.sm": "clocks.gr [MHz]"})
    warnings = []
    source = NvidiaSmiPowerSource(name="nvidia-smi", gpus="0")
    channels = [c.name for c in source.start(SourceContext(warn=warnings.append))]
    source.stop()
    assert "gpu0.sm_clock" not in channels and "gpu0.mem_clock" in channels
    assert len(warnings) == 1
    assert warnings[0].startswith("nvidia-smi's header has no column for clocks.sm (it printed 'timestamp, ")
    assert warnings[0].endswith("); those readings are not recorded")


def test_late_timestamps_are_kept_as_stamped_with_a_warning(fake_smi):
    fake_smi(lag_s=2.0)
    warnings = []
    source = start(warnings)
    time.sleep(0.4)
    source.stop()
    rows = power(source.read())
    assert rows and all(s.time_s < time.time() - 1.5 for s in rows)  # nvidia-smi's own times
    assert len(warnings) == 1
    assert re.fullmatch(
        r"nvidia-smi rows arrive 2\.\d s after their timestamps: it is falling behind", warnings[0]
    )


def test_negative_power_is_passed_on_unchanged(fake_smi):
    fake_smi(negative_after_s=0.3)
    warnings = []
    source = start(warnings)
    time.sleep(0.8)
    source.stop()
    values = [s.value for s in power(source.read())]
    assert values[0] == 300.0 and values[-1] == -300.0  # not dropped, not clamped: the run flags them
    assert set(values) == {300.0, -300.0}
    assert warnings == []


def test_not_available_mid_run_is_skipped_with_a_warning(fake_smi):
    fake_smi(na_fields=["power.draw.instant"], na_after_s=0.3)
    warnings = []
    source = start(warnings)

    def after_instant(samples):  # readings of the other field after the last instant one
        last = max((s.time_s for s in power(samples)), default=float("inf"))
        return [s for s in power(samples, "gpu0.power_average") if s.time_s > last]

    samples = []
    deadline = time.monotonic() + 20  # a timeout for a stuck fake, not a measure of speed
    while not (warnings and len(after_instant(samples)) >= 2) and time.monotonic() < deadline:
        time.sleep(0.05)
        samples += source.read()
    source.stop()
    samples += source.read()
    assert {s.value for s in power(samples)} == {300.0}  # never a 0 for [N/A]
    # the field that went [N/A] stops; the others go on after it
    assert len(after_instant(samples)) >= 2
    assert len(warnings) == 1
    assert re.fullmatch(
        r"nvidia-smi reports power.draw.instant of GPU 0 as \[N/A\] since \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}; "
        r"those readings are skipped, not read as 0",
        warnings[0],
    )


# -- the run: exit code and run.json -----------------------------------------------------------


def run_cli(tmp_path, spec, seconds=0.3, trials=30):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "energyframe",
            "run",
            "--power",
            spec,
            "--workload",
            f"sleep:seconds={seconds}",
            "--trials",
            str(trials),
            "--reporter",
            "json",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, out


def test_run_level_a_silent_nvidia_smi_ends_the_run_incomplete(fake_smi, tmp_path):
    fake_smi(stall_after_s=1.5)
    proc, out = run_cli(tmp_path, "nvidia-smi:silence_s=0.5")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert re.fullmatch(
        r"Error: power source 'nvidia-smi' failed: nvidia-smi is running but printed nothing .*", lines[-1]
    )
    assert "Traceback" not in proc.stderr
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "incomplete" and "printed nothing" in meta["reason"]


def test_run_level_negative_power_is_flagged_by_the_core(fake_smi, tmp_path):
    fake_smi(negative_after_s=1.0)
    result = ef.run(
        "sleep:seconds=0.3",
        power=["nvidia-smi"],
        reporters=[],
        out=tmp_path / "run",
        config=ef.RunSettings(trials=8),
    )
    flagged = result.windows[result.windows["flags"].str.contains("negative_power")]
    assert len(flagged) > 0
    assert (result.windows["energy_j"].dropna() >= 0).all()
    assert result.meta["rejected_samples"]["gpu0"]["negative"] > 0  # counted in run.json


def test_run_level_power_going_not_available_ends_the_run_incomplete(fake_smi, tmp_path):
    fake_smi(na_fields=["power.draw.instant", "power.draw.average"], na_after_s=1.0)
    proc, out = run_cli(tmp_path, "nvidia-smi")
    assert proc.returncode == 1
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "incomplete" and "gpu0" in meta["reason"]
