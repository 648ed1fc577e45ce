"""The wattsup source driven by the emulator over real pseudo-terminals, and the protocol.

Tests about logic run the emulator's clock ``FAST`` times faster than real time (the source is
told with ``time_scale``); one test, marked slow, runs a meter at its real 1-s pace."""

import os
import subprocess
import sys
import time

import pytest

import energyframe as ef
from energyframe.core.vocabulary import SHORT_FOR_METER
from energyframe.errors import PowerSourceError
from energyframe.plugin import Scope, SourceContext
from energyframe.power import wattsup_protocol as proto
from energyframe.power.wattsup import WattsUpPowerSource
from energyframe.power.wattsup_emulator import Faults, WattsUpEmulator, constant, square_wave
from tests.fakes import ProfileSource, read_until

pytest.importorskip("serial")

#: how much faster than real time the emulated meters of the logic tests run
FAST = 10.0


# -- protocol -----------------------------------------------------------------------------------


def test_commands_are_the_meters():
    assert proto.start_logging(1) == b"#L,W,3,E,,1;"
    assert proto.STOP_LOGGING == b"#L,R,0;"
    assert proto.REQUEST_HEADER == b"#H,R,0;"
    assert proto.CLEAR_MEMORY == b"#R,W,0;"


def test_reader_splits_packets_and_skips_garbage():
    reader = proto.PacketReader()
    packets = reader.feed(b"\x00\xffjunk#h,-,3,W,V,A;#d,-,3,12")
    assert [p.cmd for p in packets] == ["h"]
    assert reader.garbage_bytes > 0
    packets = reader.feed(b"34,1201,_;#d,-,3,1;#d,-,3,5,6,7;")
    assert [p.fields for p in packets] == [("1234", "1201", "_"), ("5", "6", "7")]
    assert reader.bad_packets == ["d,-,3,1"]  # says 3 fields, has 1


def test_records_are_read_by_the_headers_field_order():
    header = ("V", "W", "PF", "A")
    record = proto.parse_record(proto.Packet("d", "-", ("1201", "2345", "86", "_")), header)
    assert record == {"V": 120.1, "W": 234.5, "PF": 86.0, "A": None}
    encoded = proto.format_record({"W": 99.9, "V": 120.0, "A": 0.8326}, proto.FIELDS)
    packet = proto.PacketReader().feed(encoded)[0]
    values = proto.parse_record(packet, proto.FIELDS)
    assert values["W"] == 99.9 and values["A"] == 0.833 and values["WH"] is None


# -- the source against the emulator ------------------------------------------------------------


def measure_for(ports, seconds, **options):
    with ef.measure(power=[WattsUpPowerSource(name="wattsup", ports=ports, **options)], sync=None) as m:
        with m.window("w"):
            time.sleep(seconds)
    return m.result


@pytest.mark.slow
def test_one_meter_at_constant_power_at_its_real_pace():
    with WattsUpEmulator(constant(200.0), faults=Faults(garbage_on_open=b"\x00\x13#d,-,18,99")) as meter:
        result = measure_for(meter.port, 3.0)
        for _ in range(200):  # the emulator reads the port on a thread of its own: up to 10 s of looks
            if meter.commands and meter.commands[-1] == "#L,R,0;":
                break
            time.sleep(0.05)
        commands = list(meter.commands)
    (row,) = result.windows.itertuples()
    assert row.channel == "wall" and row.mean_power_w == pytest.approx(200.0)
    assert SHORT_FOR_METER in row.flags
    assert commands[:3] == ["#L,R,0;", "#H,R,0;", "#L,W,3,E,,1;"]
    assert commands[-1] == "#L,R,0;"  # logging stopped on exit
    info = result.meta["sources"][0]["info"]["meters"][0]
    assert info["records"] >= 3 and info["header"][0] == "W"
    assert result.meta["sources"][0]["channels"][0]["scope"] == Scope.SYSTEM_WALL.value


def test_two_meters_are_channels_and_their_sum_is_wall(tmp_path):
    a = WattsUpEmulator(constant(150.0), time_scale=FAST)
    b = WattsUpEmulator(constant(50.0), seed=1, time_scale=FAST)
    with a, b:
        with ef.measure(
            power=[f"wattsup:ports={a.port},{b.port},log={tmp_path}/power.csv,time_scale={FAST}"],
            sync=None,
            out=tmp_path / "run",
        ) as m:
            with m.window("w"):
                time.sleep(0.4)
    powers = {r.channel: r.mean_power_w for r in m.result.windows.itertuples()}
    assert powers == pytest.approx({"meter0": 150.0, "meter1": 50.0, "wall": 200.0})
    assert m.result.meta["primary_channels"] == ["wall"]
    lines = (tmp_path / "power.csv").read_text().splitlines()
    assert lines[0] == "time,id,pm1,pm2,sum"
    assert lines[-1].endswith(",150.0,50.0,200.0")
    assert (tmp_path / "run" / "raw" / "wattsup" / "wattsup.csv").read_text() == (
        tmp_path / "power.csv"
    ).read_text()


def test_noise_and_quantisation():
    with WattsUpEmulator(constant(123.456), noise_w=0.0, time_scale=FAST) as meter:
        source = WattsUpPowerSource(name="w", ports=meter.port, time_scale=FAST)
        source.start(SourceContext())
        values = [s.value for s in read_until(source, lambda got: len(got) >= 3)]
        source.stop()
    assert all(v == 123.5 for v in values)  # 0.1-W resolution


@pytest.mark.parametrize(
    "faults,message",
    [
        (Faults(silence_after_s=3.0), "went silent: no record for"),
        (Faults(disconnect_after_s=3.0), "was disconnected or failed"),
    ],
)
def test_a_meter_that_is_lost_stops_the_run_and_keeps_its_samples(faults, message, tmp_path):
    with WattsUpEmulator(constant(80.0), faults=faults, time_scale=FAST) as meter:
        with pytest.raises(ef.PowerSourceError, match=message):
            ef.run(
                "sleep:seconds=0.1",
                power=[f"wattsup:ports={meter.port},silence_s=1.5,time_scale={FAST}"],
                reporters=[],
                out=tmp_path / "run",
                settings=ef.RunSettings(trials=300, min_window_s=0.05),
            )
    result = ef.RunResult.load(tmp_path / "run")
    assert result.status == "incomplete" and message.split(":")[0] in result.reason
    assert len(result.samples) >= 1


def test_garbage_and_bad_records_are_skipped_with_a_warning():
    warnings = []
    with WattsUpEmulator(constant(60.0), faults=Faults(garbage_after_s=1.2), time_scale=FAST) as meter:
        source = WattsUpPowerSource(name="w", ports=meter.port, time_scale=FAST)
        source.start(SourceContext(warn=warnings.append))
        # garbage comes before every record from 1.2 s (meter time) on: the records still parse
        read_until(source, lambda got: len(got) >= 3 and any("not packets" in w for w in warnings))
        source.stop()
    assert any("bytes that are not packets" in w for w in warnings)
    warnings = []
    with WattsUpEmulator(constant(60.0), faults=Faults(bad_record_after_s=1.2), time_scale=FAST) as meter:
        source = WattsUpPowerSource(name="w", ports=meter.port, time_scale=FAST)
        source.start(SourceContext(warn=warnings.append))
        read_until(source, lambda _: any("does not parse" in w for w in warnings))
        source.stop()


def test_a_port_that_does_not_exist():
    with pytest.raises(PowerSourceError) as e:
        WattsUpPowerSource(name="w", ports="/dev/ttyUSB-no-such-port").start(SourceContext())
    assert str(e.value) == (
        "serial port /dev/ttyUSB-no-such-port does not exist (is the meter plugged in? ls /dev/ttyUSB*)"
    )


def test_a_port_nobody_answers_on():
    import pty

    master, slave = pty.openpty()
    try:
        with pytest.raises(PowerSourceError, match="no answer from a WattsUp\\? meter on /dev/pts/"):
            WattsUpPowerSource(name="w", ports=os.ttyname(slave), time_scale=FAST).start(SourceContext())
    finally:
        os.close(master)
        os.close(slave)


def test_a_port_that_is_not_readable(monkeypatch):
    import serial

    def refuse(port, **kwargs):  # what pyserial raises when open() fails with EACCES
        raise serial.SerialException(
            13, f"could not open port {port}: [Errno 13] Permission denied: {port!r}"
        )

    monkeypatch.setattr(serial, "Serial", refuse)
    with pytest.raises(PowerSourceError) as e:
        WattsUpPowerSource(name="w", ports="/dev/ttyUSB0").start(SourceContext())
    assert str(e.value) == (
        "no permission to open /dev/ttyUSB0; add yourself to its group (often: sudo usermod -a -G dialout $USER)"
    )


# -- alignment end to end -----------------------------------------------------------------------


def test_a_lagging_meter_is_aligned_to_within_one_sample():
    # 3 s of lag and a 7-s square wave on the meter's clock, 16 s of it: at FAST, in real seconds
    t0 = time.monotonic()
    profile = square_wave(100.0, 400.0, 7.0 / FAST, start_s=t0)
    with WattsUpEmulator(profile, lag_s=3.0, noise_w=1.0, time_scale=FAST) as meter:
        spec = f"wattsup:ports={meter.port},time_scale={FAST}"
        with ef.measure(power=[ProfileSource(profile=profile), spec], sync=None) as m:
            with m.window("w"):
                time.sleep(16.0 / FAST)
        record = m.records[0]
        truth = meter.true_energy_j(record.start_s, record.end_s)
    alignment = m.result.meta["alignment"]["wall"]
    assert alignment["reference"] == "gpu0" and alignment["applied"]
    assert abs(alignment["lag_s"] - 3.0 / FAST) <= 1.0 / FAST  # within one sample period of the lag
    assert alignment["correlation"] > 0.9
    assert m.result.meta["time_maps"]["wall"]["lag_s"] == pytest.approx(alignment["lag_s"] + 0.5 / FAST)
    wall = m.result.windows[m.result.windows["channel"] == "wall"].iloc[0]
    # 16 meter records in the window: on a loaded machine the emulator's records leave a few ms
    # late, which moves ~2 % of a 300-W step's energy across the edges (seen: 2.2 %)
    assert wall["energy_j"] == pytest.approx(truth, rel=0.03)


def test_a_flat_load_cannot_be_aligned_and_the_run_says_so():
    with WattsUpEmulator(constant(300.0), time_scale=FAST) as meter:
        spec = f"wattsup:ports={meter.port},time_scale={FAST}"
        with ef.measure(power=[ProfileSource(profile=constant(250.0)), spec], sync=None) as m:
            with m.window("w"):
                time.sleep(0.4)
    assert m.result.meta["alignment"]["wall"]["applied"] is False
    assert any("use --sync-pulse" in w for w in m.result.warnings)


def test_emulator_command_prints_its_port():
    proc = subprocess.run(
        [sys.executable, "-m", "energyframe", "wattsup-emulator", "--meters", "2", "--seconds", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("emulating 2 WattsUp? meter(s) on /dev/pts/")
    assert "energyframe run --power wattsup:ports=/dev/pts/" in proc.stderr
