"""How the nvidia-smi source fails: each fault of the fake nvidia-smi (tests/fake_bin) ends in one
clear line, after the samples taken before it, or, for data problems, passes the values on
unchanged for the run to flag. Run-level tests at the end go through ``energyframe run``."""

import json
import re
import subprocess
import sys
import time

import numpy as np
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
        settings=ef.RunSettings(trials=8),
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


# -- units, duplicate rows, a foreign clock, a chatty standard error ------------------------------


@pytest.mark.parametrize(
    "header,text,watts,refused",
    [
        ("power.draw.instant [mW]", "129840", 129.84, None),  # the header's unit, converted
        ("power.draw.instant [W]", "129840 mW", None, "'129840 mW' is in mW, but the header promises W"),
        ("power.draw.instant [W]", "0xFFFF", None, "'0xFFFF' is a hexadecimal value, not a power"),
    ],
)
def test_power_is_read_in_the_unit_the_header_promises(fake_smi, header, text, watts, refused):
    fake_smi(headers={"power.draw.instant": header}, power_text=text)
    warnings = []
    source = start(warnings)
    time.sleep(0.4)
    source.stop()
    values = [s.value for s in power(source.read())]
    assert values
    if watts is not None:
        assert values == pytest.approx([watts] * len(values)) and warnings == []
    else:  # never read as watts: NaN, which the run keeps out and flags invalid_reading
        assert all(v != v for v in values)
        said = [w for w in warnings if w.startswith("nvidia-smi printed power.draw.instant of GPU 0 as ")]
        assert len(said) == 1 and said[0].startswith(f"nvidia-smi printed power.draw.instant of GPU 0 as {refused} (")
        assert said[0].endswith(
            "); such readings are not read as watts: they are kept out, and the windows around them are flagged "
            "invalid_reading"
        )


def test_a_header_in_a_unit_of_no_power_is_refused(fake_smi):
    fake_smi(headers={"power.draw.instant": "power.draw.instant [dBm]"})
    with pytest.raises(PowerSourceError) as e:
        start()
    assert one_line(e.value).startswith(
        "nvidia-smi's header gives power.draw.instant in 'dBm', not a unit of power energyframe knows (W, mW, kW) "
        "(it printed 'timestamp, index, uuid, power.draw.instant [dBm]"
    )


def test_run_level_a_value_in_another_unit_flags_the_windows(fake_smi, tmp_path):
    fake_smi(power_text="129840 mW", power_text_every=5, watts=250.0)  # every 5th row in mW under [W]
    result = ef.run(
        "sleep:seconds=0.3", power=["nvidia-smi"], reporters=[], out=tmp_path / "run", settings=ef.RunSettings(trials=3)
    )
    gpu = result.windows[result.windows["channel"] == "gpu0"]
    assert gpu["flags"].str.contains("invalid_reading").all()
    assert np.allclose(gpu["mean_power_w"], 250.0)  # never pulled towards 129840 W
    assert result.meta["rejected_samples"]["gpu0"]["not_finite"] > 0


def test_run_level_two_rows_for_one_gpu_at_one_timestamp_flag_the_windows(fake_smi, tmp_path):
    fake_smi(duplicate_rows=200.0)  # 300 W and 500 W, stamped alike
    result = ef.run(
        "sleep:seconds=0.3", power=["nvidia-smi"], reporters=[], out=tmp_path / "run", settings=ef.RunSettings(trials=3)
    )
    gpu = result.windows[result.windows["channel"] == "gpu0"]
    assert gpu["flags"].str.contains("duplicate_samples").all()
    assert any(w.startswith("channel 'gpu0' gave ") and "duplicate_samples" in w for w in result.meta["warnings"])


def test_timestamps_an_hour_ahead_name_the_cause(fake_smi):
    fake_smi(lag_s=-3600.0)  # nvidia-smi in another time zone
    source = start()
    samples, error, _ = read_until_error(source)
    source.stop()
    assert power(samples) == []
    assert re.fullmatch(
        r"nvidia-smi stamps its rows 3600 s ahead of this machine's clock \(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3} at "
        r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\): it runs in another time zone than this process \(check TZ\), or its clock "
        r"is not this machine's; no window could be covered",
        one_line(error),
    )


def test_run_level_timestamps_an_hour_ahead_stop_the_run_with_the_cause(fake_smi, tmp_path):
    fake_smi(lag_s=-3600.0)
    proc, out = run_cli(tmp_path, "nvidia-smi", trials=3)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "nvidia-smi stamps its rows 3600 s ahead of this machine's clock" in last and "Traceback" not in proc.stderr
    assert not (out / "run.json").exists()  # no window was measured: no run directory of nothing


def test_a_standard_error_full_of_warnings_does_not_stop_the_child(fake_smi):
    fake_smi(stderr_line_bytes=4096)  # 64 KiB, a full pipe, after 16 rows
    source = start()
    rows = []
    deadline = time.monotonic() + 30  # a bound for a stuck child, not a measure of speed
    while len(rows) < 100 and time.monotonic() < deadline:
        rows += power(source.read())
        time.sleep(0.05)
    source.stop()
    assert len(rows) >= 100  # 400 KiB of warnings read past


def test_the_last_standard_error_line_explains_an_exit_after_many(fake_smi):
    fake_smi(stderr_line_bytes=4096, die_after_s=1.0, exit_code=15)
    source = start()
    _samples, error, _ = read_until_error(source)
    source.stop()
    assert one_line(error) == (
        "nvidia-smi exited unexpectedly (code 15): Unable to determine the device handle for GPU0000:19:00.0: "
        "Unknown Error"
    )
