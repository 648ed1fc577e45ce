"""``wattsup``: WattsUp? PRO / .NET wall meters over USB serial (pyserial, 115200 8N1).

Each meter is initialised (logging stopped, input flushed, header requested so records are read
by the meter's own field order), then logs externally once per interval; every ``#d`` record is
stamped on arrival (monotonic) and becomes a power sample. With several ports, each meter is a
channel (``meter0``, ``meter1``, ...) and ``wall`` is their sum. Records report the average of
the last interval and arrive late by an unknown amount: ``energyframe.align`` estimates that lag
after the run against a GPU's power and moves the meter's samples before integrating.
"""

from __future__ import annotations

import datetime as dt
import errno
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import PowerSourceError
from ..interfaces import (
    Channel,
    ClockBase,
    PowerSource,
    Quantity,
    Sample,
    Scope,
    SourceContext,
    Timing,
    WindowAnnotation,
)
from ..options import Option
from . import wattsup_protocol as proto

#: MLPerf Power's guidance: wall-meter windows shorter than this are not trustworthy. Units: s.
MLPERF_MIN_WINDOW_S = 60.0
SHORT_FOR_METER = "meter_window_under_60s"


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
    """One meter: its port, header and reader thread."""

    def __init__(self, index: int, port: str, channel: str) -> None:
        self.index = index
        self.port = port
        self.channel = channel
        self.serial = None
        self.header: tuple[str, ...] = proto.FIELDS
        self.reader = proto.PacketReader()
        self.last_record_s: float | None = None
        self.latest_w: float | None = None
        self.records = 0
        self.version: tuple[str, ...] = ()


class WattsUpPowerSource(PowerSource):
    """System power from one or more WattsUp? meters."""

    DESCRIPTION = "WattsUp? PRO/.NET wall meters over USB serial (1 Hz), several summed into 'wall'"
    OPTIONS = (
        Option("ports", "list", required=True, help="serial ports, e.g. /dev/ttyUSB0,/dev/ttyUSB1"),
        Option("interval_s", "int", 1, "the meters' logging interval. Units: s", minimum=1),
        Option(
            "silence_s",
            "float",
            3.0,
            "a meter that sends nothing for this long has failed. Units: s",
            minimum=0.5,
        ),
        Option("log", "path", None, "also write the earlier tool's CSV (time,id,pm1,pm2,sum) here"),
        Option("prefix", "str", "", "prepended to channel names"),
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self._meters: list[_Meter] = []
        self._pending: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._error: str | None = None
        self._warned: set[str] = set()
        self._warn = print
        self._logs: list = []
        self._row = 0

    # -- start -------------------------------------------------------------------------------
    def start(self, context: SourceContext) -> Sequence[Channel]:
        self._warn = context.warn
        ports = list(self.options["ports"])
        prefix = self.options["prefix"]
        single = len(ports) == 1
        self._meters = [
            _Meter(i, port, f"{prefix}wall" if single else f"{prefix}meter{i}")
            for i, port in enumerate(ports)
        ]
        try:
            for meter in self._meters:
                meter.serial = open_port(meter.port)
                self._initialise(meter)
        except BaseException:
            self._close_all()
            raise
        self._open_logs(context.raw_dir)
        for meter in self._meters:
            thread = threading.Thread(
                target=self._read_loop, args=(meter,), name=f"wattsup-{meter.index}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        period = float(self.options["interval_s"])
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
                )
            )
        return channels

    def _initialise(self, meter: _Meter) -> None:
        ser = meter.serial
        ser.write(proto.STOP_LOGGING)  # it may still be logging from an earlier session
        time.sleep(0.2)
        ser.reset_input_buffer()  # garbage and partial bytes after opening are expected
        header = None
        for _ in range(3):
            ser.write(proto.REQUEST_HEADER)
            deadline = time.monotonic() + 1.5
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
    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._warn(message)

    def _read_loop(self, meter: _Meter) -> None:
        import serial

        silence = self.options["silence_s"]
        started = time.monotonic()
        while not self._stop.is_set():
            try:
                data = meter.serial.read(meter.serial.in_waiting or 1)
            except (serial.SerialException, OSError) as e:
                if not self._stop.is_set():
                    self._fail(f"the meter on {meter.port} was disconnected or failed: {e}")
                return
            now = time.monotonic()
            for packet in meter.reader.feed(data):
                if packet.cmd == "d":
                    self._record(meter, packet, now)
                elif packet.cmd == "h":
                    meter.header = packet.fields
            if meter.reader.garbage_bytes:
                self._warn_once(
                    f"garbage{meter.index}",
                    f"the meter on {meter.port} sent bytes that are not packets (skipped)",
                )
            if meter.reader.bad_packets:
                bad = meter.reader.bad_packets.pop()
                self._warn_once(
                    f"bad{meter.index}",
                    f"the meter on {meter.port} sent a packet that does not parse: {bad!r} (skipped)",
                )
            last = meter.last_record_s or started
            if now - last > silence + self.options["interval_s"]:
                self._fail(f"the meter on {meter.port} went silent: no record for {now - last:.1f} s")
                return

    def _record(self, meter: _Meter, packet: proto.Packet, now: float) -> None:
        try:
            values = proto.parse_record(packet, meter.header)
        except ValueError as e:
            self._warn_once(
                f"record{meter.index}", f"a record from {meter.port} does not parse ({e}); skipped"
            )
            return
        watts = values.get("W")
        if watts is None:
            self._warn_once(f"now{meter.index}", f"records from {meter.port} carry no W value; skipped")
            return
        meter.last_record_s = now
        meter.latest_w = watts
        meter.records += 1
        batch = [Sample(meter.channel, now, watts)]
        latest = [m.latest_w for m in self._meters]
        if len(self._meters) > 1 and all(v is not None for v in latest):
            batch.append(Sample(f"{self.options['prefix']}wall", now, float(sum(latest))))
        with self._lock:
            self._pending.extend(batch)
            self._write_log(latest)

    def _write_log(self, latest: list[float | None]) -> None:
        if not self._logs:
            return
        self._row += 1
        stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        values = ["" if v is None else f"{v:.1f}" for v in latest]
        total = f"{sum(v for v in latest if v is not None):.1f}"
        line = ",".join([stamp, str(self._row), *values, total]) + "\n"
        for f in self._logs:
            f.write(line)
            f.flush()

    def _fail(self, message: str) -> None:
        if self._error is None:
            self._error = message

    def read(self) -> list[Sample]:
        with self._lock:
            out, self._pending = self._pending, []
        if not out and self._error is not None:
            raise PowerSourceError(self._error)
        return out

    # -- stop --------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        for meter in self._meters:
            try:
                if meter.serial is not None and meter.serial.is_open:
                    meter.serial.write(proto.STOP_LOGGING)
            except Exception:  # an unplugged meter cannot be told to stop; nothing to do
                pass
        for thread in self._threads:
            thread.join(timeout=2)
        self._close_all()

    def _close_all(self) -> None:
        for meter in self._meters:
            try:
                if meter.serial is not None:
                    meter.serial.close()
            except Exception:
                pass
        for f in self._logs:
            f.close()
        self._logs = []

    def info(self) -> Mapping[str, Any]:
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
