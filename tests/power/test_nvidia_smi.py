"""The nvidia-smi source against a fake ``nvidia-smi`` executable on PATH (tests/fake_bin):
the real subprocess, reader thread and header-name parsing run."""

import time

import pytest

import energyframe as ef
from energyframe.errors import PowerSourceError
from energyframe.plugin import ClockBase, Quantity, SourceContext
from energyframe.power.nvidia_smi import NvidiaSmiPowerSource, header_name, parse_number, parse_timestamp
from tests.fakes import read_until, read_until_error, wait_until


def test_parsing_helpers():
    assert header_name(" power.draw.instant [W]") == "power.draw.instant"
    assert header_name("clocks.current.sm [MHz]") == "clocks.sm"
    assert header_name("temperature.gpu") == "temperature.gpu"
    assert parse_number(" 703.50 ") == 703.5
    assert parse_number("[N/A]") is None and parse_number("[Not Supported]") is None
    assert parse_number("0x0000000000000004") == 4.0
    t = time.time()
    text = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1000):03d}"
    assert parse_timestamp(text) == pytest.approx(t, abs=0.002)


@pytest.mark.slow
def test_steady_power_from_the_instant_field(fake_smi, tmp_path):
    fake_smi(gpus=2, watts=300.0, power_capped=True)
    source = NvidiaSmiPowerSource(name="nvidia-smi")
    with ef.measure(power=[source], sync=None, out=tmp_path / "run") as m:
        for _ in range(3):
            with m.window("steady"):
                time.sleep(0.4)
    w = m.result.windows
    assert set(w["channel"]) == {"gpu0", "gpu0.power_average", "gpu1", "gpu1.power_average"}
    for channel, watts in (("gpu0", 300.0), ("gpu1", 310.0)):
        assert w[w["channel"] == channel]["mean_power_w"].to_numpy() == pytest.approx(watts, rel=1e-9)
    info = m.result.meta["sources"][0]["info"]
    assert info["power_field"] == "power.draw.instant"
    assert info["command"][1].startswith("--query-gpu=timestamp,index,uuid,power.draw.instant,")
    assert "-lms" in info["command"]
    raw = (tmp_path / "run" / "raw" / "nvidia-smi" / "nvidia-smi.csv").read_text().splitlines()
    assert raw[0].startswith("timestamp, index, uuid, power.draw.instant [W]")
    assert len(raw) > 50


def test_channels_are_wall_clocked_power_and_state(fake_smi):
    source = NvidiaSmiPowerSource(name="nvidia-smi", gpus="0")
    channels = {c.name: c for c in source.start(SourceContext())}
    source.stop()
    assert channels["gpu0"].quantity == Quantity.POWER and channels["gpu0"].clock == ClockBase.WALL
    assert channels["gpu0.sm_clock"].quantity == Quantity.STATE and channels["gpu0.sm_clock"].unit == "MHz"
    assert not channels["gpu0.power_average"].primary


def test_not_available_values_are_skipped_not_zero(fake_smi):
    fake_smi(watts=200.0, na_fields=["power.draw.average", "clocks.sm"])
    source = NvidiaSmiPowerSource(name="nvidia-smi")
    source.start(SourceContext())
    samples = read_until(source, lambda got: sum(s.channel == "gpu0" for s in got) >= 3)
    source.stop()
    channels = {s.channel for s in samples}
    assert "gpu0" in channels and "gpu0.power_average" not in channels and "gpu0.sm_clock" not in channels
    assert {s.value for s in samples if s.channel == "gpu0"} == {200.0}


def test_old_driver_without_instant_power_falls_back_and_says_so(fake_smi):
    fake_smi(no_instant=True)
    warnings = []
    source = NvidiaSmiPowerSource(name="nvidia-smi")
    channels = [c.name for c in source.start(SourceContext(warn=warnings.append))]
    source.stop()
    assert source.info()["power_field"] == "power.draw"
    assert "gpu0" in channels
    assert warnings == [
        "this nvidia-smi has no power.draw.instant; using power.draw, which on Ampere and newer is a 1-s "
        "average that lags changes of load"
    ]


def test_child_dying_is_an_error_and_samples_so_far_are_kept(fake_smi):
    fake_smi(die_after_s=0.5)
    source = NvidiaSmiPowerSource(name="nvidia-smi")
    source.start(SourceContext())
    kept, error, _ = read_until_error(source)
    assert len(kept) > 10  # the rows of the half second before it died
    assert str(error) == (
        "nvidia-smi exited unexpectedly (code 15): Unable to determine the device handle for "
        "GPU0000:19:00.0: Unknown Error"
    )
    source.stop()


def test_garbage_output_warns_then_fails(fake_smi):
    fake_smi(garbage_after_s=0.3)
    warnings = []
    source = NvidiaSmiPowerSource(name="nvidia-smi", interval_ms=5)
    source.start(SourceContext(warn=warnings.append))
    kept, error, _ = read_until_error(source)
    source.stop()
    assert kept  # the good rows before the garbage
    assert str(error).startswith("nvidia-smi printed 20 lines in a row that do not parse")
    assert warnings[0].startswith("nvidia-smi printed a line that does not parse:")


def test_falling_behind_is_reported(fake_smi):
    fake_smi(lag_s=2.0)
    warnings = []
    source = NvidiaSmiPowerSource(name="nvidia-smi")
    source.start(SourceContext(warn=warnings.append))
    read_until(source, lambda _: any("falling behind" in w for w in warnings))
    source.stop()


def test_raw_log_option_keeps_the_earlier_tools_file(fake_smi, tmp_path):
    log = tmp_path / "power.csv"
    source = NvidiaSmiPowerSource(name="nvidia-smi", log=log)
    source.start(SourceContext())
    wait_until(lambda: log.exists() and log.read_text().count("\n") >= 4, "rows in the log")
    source.stop()
    lines = log.read_text().splitlines()
    assert lines[0].startswith("timestamp, index, uuid, ")
    assert all(line.count(",") == lines[0].count(",") for line in lines)


def test_missing_executable(fake_smi):
    with pytest.raises(PowerSourceError, match="'no-such-smi' is not on PATH"):
        NvidiaSmiPowerSource(name="nvidia-smi", executable="no-such-smi").start(SourceContext())


def test_runs_beside_nvml_with_a_prefix(fake_smi, tmp_path):
    fake_smi(watts=123.0)
    result = ef.run(
        "sleep:seconds=0.3", power=["nvidia-smi:prefix=smi."], reporters=[], settings=ef.RunSettings(trials=2)
    )
    assert set(result.windows["channel"]) == {"smi.gpu0", "smi.gpu0.power_average"}


def test_detect(fake_smi):
    fake_smi(gpus=2)
    found = NvidiaSmiPowerSource.detect()
    assert found.available and found.reason == "2 GPU(s)"
