"""The WattsUp? PRO / .NET serial protocol: commands, packets, records (no I/O here).

Commands are ``#<cmd>,<R|W>,<argc>[,args];``. The meter answers a header request with the names
of the 18 record fields, and while external logging runs it sends one ``#d`` record per
interval with the fields in that order, ``_`` for fields not chosen. Values are integers: watts,
volts, watt-hours, cost, hertz and volt-amperes in tenths, amperes in milliamperes, power factor
and duty cycle in percent. Records carry no timestamp: they are stamped on arrival.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FIELDS = (
    "W",
    "V",
    "A",
    "WH",
    "Cost",
    "WH/Mo",
    "Cost/Mo",
    "Wmax",
    "Vmax",
    "Amax",
    "Wmin",
    "Vmin",
    "Amin",
    "PF",
    "DC",
    "PC",
    "Hz",
    "VA",
)
#: divide a raw field by this to get SI units (W, V, A, Wh, Hz, VA) or percent (PF, DC)
SCALES = {"A": 1000.0, "Amax": 1000.0, "Amin": 1000.0, "PF": 1.0, "DC": 1.0, "PC": 1.0}
DEFAULT_SCALE = 10.0
#: a packet longer than this without its ';' is garbage
MAX_PACKET = 512


def command(cmd: str, sub: str, *args: str) -> bytes:
    text = f"#{cmd},{sub},{len(args)}" + "".join(f",{a}" for a in args) + ";"
    return text.encode("ascii")


def start_logging(interval_s: int = 1) -> bytes:
    """External logging (records sent over the port) every ``interval_s`` seconds."""
    return command("L", "W", "E", "", str(interval_s))


STOP_LOGGING = command("L", "R")
REQUEST_HEADER = command("H", "R")
REQUEST_VERSION = command("V", "R")
CLEAR_MEMORY = command("R", "W")


@dataclass(frozen=True)
class Packet:
    """One ``#cmd,sub,count,fields...;`` packet."""

    cmd: str
    sub: str
    fields: tuple[str, ...]

    def encode(self) -> bytes:
        return command(self.cmd, self.sub, *self.fields)


def parse_packet(text: str) -> Packet:
    """Parse the text between ``#`` and ``;``. Raises ValueError when it is not a packet."""
    parts = text.split(",")
    if len(parts) < 3 or len(parts[0]) != 1 or len(parts[1]) != 1:
        raise ValueError(f"not a WattsUp packet: {text[:60]!r}")
    count = int(parts[2])
    fields = tuple(p.strip() for p in parts[3:])
    if len(fields) != count and not (count == 0 and fields == ("",)):
        raise ValueError(f"packet says {count} fields but has {len(fields)}: {text[:60]!r}")
    return Packet(parts[0], parts[1], fields if count else ())


class PacketReader:
    """Splits a byte stream into packets; counts the bytes that belong to none (garbage)."""

    def __init__(self) -> None:
        self._buffer = ""
        self.garbage_bytes = 0
        self.bad_packets: list[str] = []
        #: the last bytes that belonged to no packet (what line noise looks like), for messages
        self.garbage_sample = ""

    def _garbage(self, text: str) -> None:
        if text.strip():
            self.garbage_bytes += len(text.strip())
            self.garbage_sample = text.strip()[-40:]

    def feed(self, data: bytes) -> list[Packet]:
        self._buffer += data.decode("ascii", errors="replace")
        packets = []
        while True:
            start = self._buffer.find("#")
            if start < 0:
                self._garbage(self._buffer)
                self._buffer = ""
                break
            if start:
                self._garbage(self._buffer[:start])
                self._buffer = self._buffer[start:]
            end = self._buffer.find(";")
            nested = self._buffer.find("#", 1)
            if 0 < nested < (end if end >= 0 else len(self._buffer)):
                # a packet cut short by a new one: drop the fragment
                self._garbage(self._buffer[:nested])
                self._buffer = self._buffer[nested:]
                continue
            if end < 0:
                if len(self._buffer) > MAX_PACKET:
                    self._garbage(self._buffer)
                    self._buffer = ""
                break
            body, self._buffer = self._buffer[1:end], self._buffer[end + 1 :]
            try:
                packets.append(parse_packet(body))
            except ValueError:
                self.bad_packets.append(body[:80])
        return packets


def header_fields(packet: Packet) -> tuple[str, ...]:
    """The field order from an ``#h`` packet."""
    if packet.cmd != "h":
        raise ValueError(f"expected a header packet '#h', got '#{packet.cmd}'")
    return packet.fields


def parse_record(packet: Packet, header: tuple[str, ...]) -> dict[str, float | None]:
    """A ``#d`` record as {field: value in SI units or percent}, ``None`` for ``_`` fields."""
    if packet.cmd != "d":
        raise ValueError(f"expected a data record '#d', got '#{packet.cmd}'")
    if len(packet.fields) != len(header):
        raise ValueError(f"record has {len(packet.fields)} fields, the header {len(header)}")
    out: dict[str, float | None] = {}
    for name, raw in zip(header, packet.fields):
        if raw in ("_", ""):
            out[name] = None
            continue
        out[name] = int(raw) / SCALES.get(name, DEFAULT_SCALE)
    return out


def format_record(values: Mapping[str, float | None], header: tuple[str, ...] = FIELDS) -> bytes:
    """Encode a record the way the meter does (integers, ``_`` for missing)."""
    fields = []
    for name in header:
        value = values.get(name)
        fields.append("_" if value is None else str(int(round(value * SCALES.get(name, DEFAULT_SCALE)))))
    return command("d", "-", *fields)
