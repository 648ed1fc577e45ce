"""How the wattsup source fails, against the emulator's faults on real pseudo-terminals (at
``FAST`` times real speed): bad options are refused before anything starts; a meter that is
unplugged, stalls, sends line noise or floods the port ends in one clear line after the samples
before it; negative watts are passed on unchanged for the run to flag."""

import os
import re
import subprocess
import sys
import time

import pytest

import energyframe as ef
from energyframe.errors import OptionError, PowerSourceError
from energyframe.plugin import SourceContext
from energyframe.power.wattsup import WattsUpPowerSource
from energyframe.power.wattsup_emulator import Faults, WattsUpEmulator, constant
from tests.fakes import one_line, read_until_error

pytest.importorskip("serial")

FAST = 10.0


def meter(faults=Faults(), watts=80.0):
    return WattsUpEmulator(constant(watts), faults=faults, time_scale=FAST)


def start(port, **options):
    source = WattsUpPowerSource(name="wattsup", ports=port, time_scale=FAST, **options)
    source.start(SourceContext())
    return source


# -- refused before anything starts ---------------------------------------------------------------


def test_a_port_given_twice_is_refused(tmp_path):
    with pytest.raises(OptionError) as e:
        WattsUpPowerSource(name="wattsup", ports="/dev/ttyUSB0,/dev/ttyUSB0")
    assert one_line(e.value) == (
        "option 'ports' of power source 'wattsup' names one port twice (/dev/ttyUSB0 twice): its meter would "
        "be counted twice"
    )
    with meter() as m:
        alias = tmp_path / "by-id-meter"
        alias.symlink_to(m.port)
        with pytest.raises(OptionError) as e:
            WattsUpPowerSource(name="wattsup", ports=f"{m.port},{alias}")
    assert one_line(e.value) == (
        f"option 'ports' of power source 'wattsup' names one port twice ({m.port} and {alias}, both "
        f"{os.path.realpath(m.port)}): its meter would be counted twice"
    )
    assert e.value.exit_code == 2


def test_no_port_is_refused_at_once():
    with pytest.raises(OptionError) as e:
        WattsUpPowerSource(name="wattsup", ports="")
    assert one_line(e.value) == (
        "option 'ports' of power source 'wattsup' is empty; give the meters' serial ports, e.g. ports=/dev/ttyUSB0"
    )


def test_no_port_on_the_command_line_exits_2_before_anything_starts(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "energyframe", "run", "--power", "wattsup:ports=", "--workload", "sleep"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "Error: option 'ports' of power source 'wattsup' is empty; give the meters' serial ports, e.g. "
        "ports=/dev/ttyUSB0"
    )


def test_resources_are_the_real_serial_devices(tmp_path):
    alias = tmp_path / "meter"
    alias.symlink_to("/dev/null")
    source = WattsUpPowerSource(name="wattsup", ports=f"{alias},/dev/zero")
    assert list(source.resources()) == ["serial:/dev/null", "serial:/dev/zero"]


# -- failing while acquiring ----------------------------------------------------------------------


def test_unplugged(tmp_path):
    with meter(Faults(disconnect_after_s=3.0)) as m:
        source = start(m.port)
        samples, error, _ = read_until_error(source)
        source.stop()
    assert type(error) is PowerSourceError
    assert re.fullmatch(rf"the meter on {m.port} was disconnected or failed: .+", one_line(error))
    assert 1 <= len(samples) <= 3 and {s.value for s in samples} == {80.0}


def test_stalled():
    with meter(Faults(silence_after_s=3.0)) as m:
        source = start(m.port, silence_s=1.0)
        samples, error, _ = read_until_error(source)
        source.stop()
    assert re.fullmatch(rf"the meter on {m.port} went silent: no record for 0\.\d s", one_line(error))
    assert 1 <= len(samples) <= 3 and {s.value for s in samples} == {80.0}


def test_line_noise_is_named_as_such_not_as_silence():
    with meter(Faults(noise_after_s=3.0)) as m:
        source = start(m.port, silence_s=1.0)
        samples, error, _ = read_until_error(source)
        source.stop()
    message = one_line(error)
    assert message.startswith(f"the meter on {m.port} sends data that does not parse (no record for 0.")
    assert message.endswith("): check that it is a WattsUp? PRO or .NET at 115200 baud, and its cable")
    assert re.search(r"; e\.g\. '.+'\)", message)  # a sample of what it sends
    assert 1 <= len(samples) <= 3 and {s.value for s in samples} == {80.0}


def test_flooding_the_port():
    with meter(Faults(flood_after_s=3.0)) as m:
        source = start(m.port)
        samples, error, _ = read_until_error(source)
        source.stop()
    assert re.fullmatch(
        rf"the meter on {m.port} sent 10 records in 0\.\d\d s but logs one every 0\.1 s: another program "
        r"drives it, or it is not a WattsUp\? meter",
        one_line(error),
    )
    assert {s.value for s in samples} == {80.0}  # the records before it was noticed


def test_negative_watts_are_passed_on_unchanged():
    with meter(Faults(negative_after_s=2.0)) as m:
        source = start(m.port)
        time.sleep(0.6)
        source.stop()
        samples = source.read()
    values = [s.value for s in samples]
    assert values[0] == 80.0 and values[-1] == -80.0  # not dropped, not clamped: the run flags them
    assert set(values) == {80.0, -80.0}


# -- the run -------------------------------------------------------------------------------------


def test_run_level_a_stalled_meter_ends_the_run_incomplete(tmp_path):
    with meter(Faults(silence_after_s=5.0)) as m:
        with pytest.raises(PowerSourceError) as e:
            ef.run(
                "sleep:seconds=0.1",
                power=[f"wattsup:ports={m.port},silence_s=1.0,time_scale={FAST}"],
                reporters=[],
                out=tmp_path / "run",
                settings=ef.RunSettings(trials=300, min_window_s=0.05),
            )
    assert "went silent" in one_line(e.value)
    saved = ef.RunResult.load(tmp_path / "run")
    assert saved.status == "incomplete" and "went silent" in saved.reason


def test_run_level_negative_watts_are_flagged_by_the_core(tmp_path):
    with meter(Faults(negative_after_s=3.0)) as m:
        with ef.measure(power=[f"wattsup:ports={m.port},time_scale={FAST}"], sync=None) as run:
            for _ in range(6):
                with run.window("w"):
                    time.sleep(0.2)
    windows = run.result.windows
    assert windows["flags"].str.contains("negative_power").any()
    assert (windows["energy_j"].dropna() >= 0).all()
