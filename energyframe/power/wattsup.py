"""``wattsup``: WattsUp? PRO / .NET wall meters over USB serial (pyserial, 115200 8N1).

Each meter is initialised (logging stopped, input flushed, header requested so records are read
by the meter's own field order), then logs externally once per interval; every ``#d`` record is
stamped on arrival (monotonic) and becomes a power sample. With several ports, each meter is a
channel (``meter0``, ``meter1``, ...) and ``wall`` is their sum. Records report the average of
the last interval and arrive late by an unknown amount (``Timing.UNKNOWN``): ``energyframe.core.align``
estimates that lag after the run against a GPU's power and moves the meter's samples before
integrating. Each port is read as a ``Stream`` of the polling base.

Faults end in one clear message: a port given twice or no port at all (refused before anything
starts), a meter that is unplugged, one that goes silent, one that sends only line noise (data
that does not parse, with a sample of it), one that floods the port. Values are not repaired:
a negative reading is passed on for the run to flag.
"""

from __future__ import annotations

import collections
import datetime as dt
import errno
import functools
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.vocabulary import MLPERF_MIN_WINDOW_S, SHORT_FOR_METER
from ..errors import OptionError, PowerSourceError
from ..kit.polling import PollingSource, Stream
from ..model import Channel, ClockBase, Quantity, Sample, Scope, Timing, WindowAnnotation
from ..options import Option
from . import wattsup_protocol as proto

#: the meter's stated accuracy (WattsUp? PRO manual, PHYSICS.md): ±1.5 % of the reading. Units: %.
ACCURACY_PCT = 1.5
#: this many records within one logging interval is a flood (10 times the meter's rate)
FLOOD_RECORDS = 10


def open_port(port: str, baudrate: int = 115200):
    """Open a serial port 8N1, translating failures into what to do about them."""
    import serial

    try:
        return serial.Serial(port, baudrate=baudrate, bytesize=8, parity="N", stopbits=1, timeout=0.1)
    except serial.SerialException as e:
        code = getattr(e, "errno", None)
        text = str(e)
        if code == errno.ENOENT or "No such file" in text:
            raise PowerSourceError(
                f"serial port {port} does not exist (is the meter plugged in? ls /dev/ttyUSB*)"
            ) from e
        if code == errno.EACCES or "Permission denied" in text:
            raise PowerSourceError(
                f"no permission to open {port}; add yourself to its group (often: sudo usermod -a -G dialout $USER)"
            ) from e
        raise PowerSourceError(f"cannot open serial port {port}: {text}") from e


class _Meter:
    """One meter: its port, header, reader and what it sent."""

    def __init__(self, index: int, port: str, channel: str) -> None:
        self.index = index
        self.port = port
        self.channel = channel
        self.serial: Any = None  # a serial.Serial once opened (pyserial has no type information)
        self.header: tuple[str, ...] = proto.FIELDS
        self.reader = proto.PacketReader()
        self.latest_w: float | None = None
        self.records = 0
        self.arrivals: collections.deque[float] = collections.deque(maxlen=FLOOD_RECORDS)
        #: garbage bytes counted when the last record arrived (line noise since then is news)
        self.garbage_at_record = 0
        self.bad_at_record = 0
        self.bad_sample = ""


class WattsUpPowerSource(PollingSource):
    """System power from one or more WattsUp? meters."""

    DESCRIPTION = "WattsUp? PRO/.NET wall meters over USB serial (1 Hz), several summed into 'wall'"
    OPTIONS = (
        Option("ports", "list", required=True, help="serial ports, e.g. /dev/ttyUSB0,/dev/ttyUSB1"),
        Option("interval_s", "int", 1, "the meters' logging interval. Units: s", minimum=1),
        Option(
            "silence_s",
            "float",
            3.0,
            "a meter that sends no record for this long has failed. Units: s",
            minimum=0.5,
        ),
        Option("log", "path", None, "also write the earlier tool's CSV (time,id,pm1,pm2,sum) here"),
        Option("prefix", "str", "", "prepended to channel names"),
        Option(
            "time_scale",
            "float",
            1.0,
            "emulated meters only: the emulator's clock runs this many times faster than real time",
            minimum=1.0,
        ),
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        ports = list(self.options["ports"])
        if not ports:
            raise OptionError(
                f"option 'ports' of power source {self.name!r} is empty; give the meters' serial ports, "
                "e.g. ports=/dev/ttyUSB0"
            )
        seen: dict[str, str] = {}
        for port in ports:
            real = os.path.realpath(port)
            if real in seen:
                same = f"{port} twice" if seen[real] == port else f"{seen[real]} and {port}, both {real}"
                raise OptionError(
                    f"option 'ports' of power source {self.name!r} names one port twice ({same}): its meter "
                    "would be counted twice"
                )
            seen[real] = port
        self._meters: list[_Meter] = []
        self._meter_lock = threading.Lock()
        self._warned: set[str] = set()
        self._logs: list = []
        self._row = 0

    def resources(self) -> Sequence[str]:
        return [f"serial:{os.path.realpath(port)}" for port in self.options["ports"]]

    def _real_s(self, meter_s: float) -> float:
        """A duration on the meter's clock in real seconds (the emulator may run faster)."""
        return meter_s / self.options["time_scale"]

    # -- start -------------------------------------------------------------------------------
    def open(self) -> Sequence[Channel]:
        ports = list(self.options["ports"])
        prefix = self.options["prefix"]
        single = len(ports) == 1
        self._meters = [
            _Meter(i, port, f"{prefix}wall" if single else f"{prefix}meter{i}")
            for i, port in enumerate(ports)
        ]
        for meter in self._meters:
            meter.serial = open_port(meter.port)
            self._initialise(meter)
        self._open_logs(self.context.raw_dir)
        period = self._real_s(float(self.options["interval_s"]))
        channels = [
            Channel(
                m.channel,
                Quantity.POWER,
                Scope.SYSTEM_WALL,
                period,
                ClockBase.MONOTONIC,
                primary=single,
                description=f"WattsUp? meter on {m.port} ({period:g}-s averages, stamped on arrival)",
                timing=Timing.UNKNOWN,
                averaging_s=period,
                accuracy_pct=ACCURACY_PCT,
            )
            for m in self._meters
        ]
        if not single:
            channels.append(
                Channel(
                    f"{prefix}wall",
                    Quantity.POWER,
                    Scope.SYSTEM_WALL,
                    period,
                    ClockBase.MONOTONIC,
                    description="sum of the meters (each meter's latest record at every record)",
                    timing=Timing.UNKNOWN,
                    averaging_s=period,
                    accuracy_pct=ACCURACY_PCT,
                )
            )
        return channels

    def _initialise(self, meter: _Meter) -> None:
        ser = meter.serial
        ser.write(proto.STOP_LOGGING)  # it may still be logging from an earlier session
        time.sleep(self._real_s(0.2))
        ser.reset_input_buffer()  # garbage and partial bytes after opening are expected
        header = None
        for _ in range(3):
            ser.write(proto.REQUEST_HEADER)
            deadline = time.monotonic() + self._real_s(1.5)
            while time.monotonic() < deadline and header is None:
                for packet in meter.reader.feed(ser.read(ser.in_waiting or 1)):
                    if packet.cmd == "h":
                        header = packet
            if header is not None:
                break
        if header is None:
            raise PowerSourceError(
                f"no answer from a WattsUp? meter on {meter.port} (asked for its header 3 times): is it a "
                "WattsUp? PRO or .NET, switched on, at 115200 baud?"
            )
        meter.header = proto.header_fields(header)
        if "W" not in meter.header:
            raise PowerSourceError(
                f"the meter on {meter.port} reports no W field (its header: {','.join(meter.header)})"
            )
        meter.reader.garbage_bytes = 0
        meter.reader.bad_packets.clear()
        ser.write(proto.start_logging(self.options["interval_s"]))

    def _open_logs(self, raw_dir: Path | None) -> None:
        paths = []
        if raw_dir is not None:
            raw_dir.mkdir(parents=True, exist_ok=True)
            paths.append(raw_dir / "wattsup.csv")
        if self.options["log"]:
            paths.append(Path(self.options["log"]))
        columns = ["time", "id"] + [f"pm{m.index + 1}" for m in self._meters] + ["sum"]
        for path in paths:
            f = open(path, "w")
            f.write(",".join(columns) + "\n")
            f.flush()
            self._logs.append(f)

    # -- acquisition -----------------------------------------------------------------------
    def tasks(self) -> Sequence[Stream]:
        quiet_s = self._real_s(self.options["silence_s"] + self.options["interval_s"])
        return [
            Stream(
                functools.partial(self._records, meter),
                name=f"wattsup-{meter.index}",
                silent_after_s=quiet_s,
                on_silence=functools.partial(self._silence, meter),
            )
            for meter in self._meters
        ]

    def _silence(self, meter: _Meter, quiet_s: float) -> str:
        reader = meter.reader
        if reader.garbage_bytes > meter.garbage_at_record or len(reader.bad_packets) > meter.bad_at_record:
            sample = meter.bad_sample or reader.garbage_sample
            return (
                f"the meter on {meter.port} sends data that does not parse (no record for {quiet_s:.1f} s; "
                f"e.g. {sample!r}): check that it is a WattsUp? PRO or .NET at 115200 baud, and its cable"
            )
        return f"the meter on {meter.port} went silent: no record for {quiet_s:.1f} s"

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warn(message)

    def _records(self, meter: _Meter) -> Iterator[list[Sample]]:
        """Samples from each record the meter sends, until the source stops."""
        import serial

        while not self.stopping:
            try:
                data = meter.serial.read(meter.serial.in_waiting or 1)
            except (serial.SerialException, OSError) as e:
                if self.stopping:
                    return
                raise PowerSourceError(f"the meter on {meter.port} was disconnected or failed: {e}") from e
            now = time.monotonic()
            for packet in meter.reader.feed(data):
                if packet.cmd == "d":
                    batch = self._record(meter, packet, now)
                    if batch:
                        yield batch
                elif packet.cmd == "h":
                    meter.header = packet.fields
            self._warn_of_junk(meter)

    def _warn_of_junk(self, meter: _Meter) -> None:
        """Say once per meter that it sent bytes that are not packets, and once that it sent a
        packet that does not parse (kept as the example a silence's message shows)."""
        reader = meter.reader
        if reader.garbage_bytes:
            self._warn_once(
                f"garbage{meter.index}",
                f"the meter on {meter.port} sent bytes that are not packets (skipped)",
            )
        if reader.bad_packets:
            meter.bad_sample = reader.bad_packets[-1]
            self._warn_once(
                f"bad{meter.index}",
                f"the meter on {meter.port} sent a packet that does not parse: {meter.bad_sample!r} (skipped)",
            )

    def _record(self, meter: _Meter, packet: proto.Packet, now: float) -> list[Sample]:
        try:
            values = proto.parse_record(packet, meter.header)
        except ValueError as e:
            meter.bad_sample = "#" + ",".join([packet.cmd, packet.sub, *packet.fields])[:80]
            self._warn_once(
                f"record{meter.index}", f"a record from {meter.port} does not parse ({e}); skipped"
            )
            return []
        watts = values.get("W")
        if watts is None:
            self._warn_once(f"now{meter.index}", f"records from {meter.port} carry no W value; skipped")
            return []
        meter.arrivals.append(now)
        span = now - meter.arrivals[0]
        if len(meter.arrivals) == FLOOD_RECORDS and span < self._real_s(self.options["interval_s"]):
            raise PowerSourceError(
                f"the meter on {meter.port} sent {FLOOD_RECORDS} records in {span:.2f} s but logs one every "
                f"{self._real_s(self.options['interval_s']):g} s: another program drives it, or it is not a "
                "WattsUp? meter"
            )
        meter.garbage_at_record = meter.reader.garbage_bytes
        meter.bad_at_record = len(meter.reader.bad_packets)
        with self._meter_lock:
            meter.latest_w = watts
            meter.records += 1
            batch = [Sample(meter.channel, now, watts)]
            latest = [m.latest_w for m in self._meters]
            known = [v for v in latest if v is not None]
            if len(self._meters) > 1 and len(known) == len(latest):
                batch.append(Sample(f"{self.options['prefix']}wall", now, float(sum(known))))
            self._write_log(latest)
        return batch

    def _write_log(self, latest: list[float | None]) -> None:
        if not self._logs:
            return
        self._row += 1
        stamp = dt.datetime.now().isoformat(sep=" ", timespec="milliseconds")  # the earlier tool's column, to the ms
        values = ["" if v is None else f"{v:.1f}" for v in latest]
        total = f"{sum(v for v in latest if v is not None):.1f}"
        line = ",".join([stamp, str(self._row), *values, total]) + "\n"
        for f in self._logs:
            f.write(line)
            f.flush()

    # -- stop --------------------------------------------------------------------------------
    def close(self) -> None:
        for meter in self._meters:
            try:
                if meter.serial is not None and meter.serial.is_open:
                    meter.serial.write(proto.STOP_LOGGING)
            except Exception:  # an unplugged meter cannot be told to stop; nothing to do
                pass
            try:
                if meter.serial is not None:
                    meter.serial.close()
            except Exception:
                pass
        with self._meter_lock:
            for f in self._logs:
                f.close()
            self._logs = []

    def describe(self) -> Mapping[str, Any]:
        return {
            "meters": [
                {
                    "port": m.port,
                    "channel": m.channel,
                    "header": list(m.header),
                    "records": m.records,
                    "garbage_bytes": m.reader.garbage_bytes,
                }
                for m in self._meters
            ]
        }

    def annotate(self, channel, start_s, end_s, series) -> WindowAnnotation:
        if end_s - start_s < MLPERF_MIN_WINDOW_S:
            return WindowAnnotation(flags=(SHORT_FOR_METER,))
        return WindowAnnotation()
