"""A WattsUp? meter on a pseudo-terminal: for users without a meter, and for the tests.

It answers header, version, clear and logging commands like the meter, and while logging sends
one ``#d`` record per interval. Each record's power is the average of a *profile* over the
interval, delayed by ``lag_s``, with optional noise and the meter's 0.1-W quantisation; the
meter's clock can run ``drift`` fast or slow. Faults can be injected: garbage bytes when the
port opens or mid-stream, a record that does not parse, silence (a stall), a disconnect (the
cable pulled), a flood of records, line noise instead of records, negative watts.

``time_scale`` runs the meter's clock faster than real time (10: a 1-s interval takes 0.1 s),
for tests about logic rather than timing; the source is told with its ``time_scale`` option.

    with WattsUpEmulator(constant(200.0), lag_s=2.0) as meter:
        energyframe.run(..., power=[f"wattsup:ports={meter.port}"])
        meter.true_energy_j(t0, t1)      # what an exact meter would have read (monotonic times)
"""

from __future__ import annotations

import csv
import math
import os
import pty
import random
import threading
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..offline.simulate import record_window
from . import wattsup_protocol as proto

#: the emulated line voltage (records carry V, A and PF too)
VOLTS = 120.0


def constant(power_w: float) -> Callable[[float], float]:
    """A profile: always ``power_w``. Units: W."""
    return lambda t: power_w


def square_wave(
    low_w: float, high_w: float, period_s: float, start_s: float = 0.0
) -> Callable[[float], float]:
    """A profile that alternates between ``low_w`` and ``high_w`` every half period."""
    return lambda t: high_w if ((t - start_s) % period_s) < period_s / 2 else low_w


def csv_profile(path: str | Path, loop: bool = True) -> Callable[[float], float]:
    """A profile replayed from a CSV of ``time_s`` (any origin) and ``power_w``, starting when
    the emulator starts, linearly interpolated, repeated when ``loop``."""
    with open(path) as f:
        rows = [(float(r["time_s"]), float(r["power_w"])) for r in csv.DictReader(f)]
    bad = next((r for r in rows if not (math.isfinite(r[0]) and math.isfinite(r[1]) and r[1] >= 0)), None)
    if bad is not None:
        raise ValueError(f"{path}: a row has time_s {bad[0]!r}, power_w {bad[1]!r}; both must be finite, power >= 0")
    if len(rows) < 2:
        raise ValueError(f"{path}: a profile needs at least two rows of time_s, power_w")
    t = np.array([r[0] for r in rows]) - rows[0][0]
    p = np.array([r[1] for r in rows])
    span = float(t[-1])
    origin: list[float] = []

    def profile(now: float) -> float:
        if not origin:
            origin.append(now)
        x = now - origin[0]
        if loop and span > 0:
            x %= span
        return float(np.interp(x, t, p))

    return profile


def nvml_profile(baseline_w: float, gpu: int = 0, scale: float = 1.0) -> Callable[[float], float]:
    """A profile of the wall behind a GPU: ``baseline_w`` plus ``scale`` times the GPU's NVML
    power (read live)."""
    from .nvml.device import load_pynvml

    nvml = load_pynvml()
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(gpu)

    def profile(now: float) -> float:
        return baseline_w + scale * nvml.nvmlDeviceGetPowerUsage(handle) / 1e3

    return profile


@dataclass(frozen=True)
class Faults:
    """Faults to inject. Times are seconds of the meter's clock after logging starts.

    Args:
        garbage_on_open: bytes waiting in the port when it opens.
        garbage_after_s: 40 random bytes before every record from then on.
        bad_record_after_s: records that do not parse from then on.
        silence_after_s: no more records (a stall; the port stays open).
        disconnect_after_s: the port closes (the cable is pulled).
        flood_after_s: records as fast as the port takes them, ignoring the interval.
        noise_after_s: only line noise (random bytes) instead of records.
        negative_after_s: records report negative watts.
    """

    garbage_on_open: bytes = b""
    garbage_after_s: float | None = None
    bad_record_after_s: float | None = None
    silence_after_s: float | None = None
    disconnect_after_s: float | None = None
    flood_after_s: float | None = None
    noise_after_s: float | None = None
    negative_after_s: float | None = None


class WattsUpEmulator:
    """An emulated WattsUp? meter behind a pseudo-terminal (``.port``).

    Args:
        profile: power as a function of ``time.monotonic()``. Units: W.
        interval_s: the meter's logging interval on its own clock. Units: s.
        lag_s: records report the average over the interval that ended ``lag_s`` ago. Units: s.
        drift: how fast the meter's clock runs against the host's (0.003: 0.3 % fast): the delay
            of what a record reports grows by this fraction of the time logging has run.
        noise_w: standard deviation of Gaussian noise added to each record. Units: W.
        quantum_w: resolution of the W field (the meter's 0.1 W).
        faults: what to break, and when.
        samples_per_interval: how finely the profile is averaged over an interval.
        time_scale: how much faster than real time the meter's clock runs: its interval, lag and
            fault times take this many times less real time.
    """

    def __init__(
        self,
        profile: Callable[[float], float],
        interval_s: float = 1.0,
        lag_s: float = 0.0,
        drift: float = 0.0,
        noise_w: float = 0.0,
        quantum_w: float = 0.1,
        faults: Faults = Faults(),
        seed: int = 0,
        samples_per_interval: int = 50,
        time_scale: float = 1.0,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.profile = profile
        self.time_scale = time_scale
        self.interval_s = interval_s
        self.lag_s = lag_s
        self.drift = drift
        self.noise_w = noise_w
        self.quantum_w = quantum_w
        self.faults = faults
        self.samples_per_interval = samples_per_interval
        self._rng = random.Random(seed)
        self._master: int | None = None
        self._slave: int | None = None
        self.port: str = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._logging_since: float | None = None
        self._log_interval_s = interval_s / time_scale  # real seconds
        self.records_sent = 0
        self.commands: list[str] = []
        self._history: list[tuple[float, float]] = []  # (monotonic time, profile power) samples
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> WattsUpEmulator:
        self._master, self._slave = pty.openpty()
        tty.setraw(self._slave)  # bytes pass untouched: no echo, no line editing
        self.port = os.ttyname(self._slave)
        os.set_blocking(self._master, False)
        if self.faults.garbage_on_open:
            os.write(self._master, self.faults.garbage_on_open)
        self._thread = threading.Thread(target=self._serve, name="wattsup-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in (self._master, self._slave):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._master = self._slave = None

    def __enter__(self) -> WattsUpEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the truth, for tests and benchmarks ----------------------------------------------------
    def true_energy_j(self, start_s: float, end_s: float) -> float:
        """Energy of the profile between two monotonic times (what a perfect meter reads)."""
        n = max(2, int((end_s - start_s) * 200) + 1)
        t = np.linspace(start_s, end_s, n)
        p = np.array([self.profile(x) for x in t])
        return float(np.sum((p[1:] + p[:-1]) * np.diff(t)) / 2)  # the trapezoidal rule

    # -- the meter ---------------------------------------------------------------------------
    def _serve(self) -> None:
        """The emulated meter's one event loop: sample the profile, answer commands, send
        records; it ends when the emulator stops or its port closes."""
        master = self._master
        assert master is not None  # opened by start before this thread
        reader = proto.PacketReader()
        next_record: float | None = None
        sampler_next = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            sampler_next = self._sample_profile(now, sampler_next)
            data = self._received(master)
            if data is None:
                return
            for packet in reader.feed(data):
                next_record = self._answer(packet, next_record)
            if self._logging_since is not None and next_record is not None and now >= next_record:
                if not self._send_record(now):
                    return
                if not self._after(self.faults.flood_after_s, now):
                    next_record += self._log_interval_s

    def _sample_profile(self, now: float, due: float) -> float:
        """Keep a fine history of the profile for interval averages: sample it when ``due`` has
        come; returns when it is due next."""
        if now < due:
            return due
        with self._lock:
            self._history.append((now, float(self.profile(now))))
            if len(self._history) > 100_000:
                self._history = self._history[-50_000:]
        return now + self.interval_s / self.time_scale / self.samples_per_interval

    @staticmethod
    def _received(master: int) -> bytes | None:
        """What the reader sent within 5 ms (``b""``: nothing); ``None`` once the port is closed."""
        import select

        try:
            ready, _, _ = select.select([master], [], [], 0.005)
        except (OSError, ValueError):
            return None
        if not ready:
            return b""
        try:
            return os.read(master, 4096)
        except BlockingIOError:
            return b""
        except OSError:
            return None

    def _write(self, data: bytes) -> None:
        assert self._master is not None  # written to only while serving
        try:
            os.write(self._master, data)
        except BlockingIOError:  # nobody reads the port and its buffer is full: the bytes are lost
            pass

    def _answer(self, packet: proto.Packet, next_record: float | None) -> float | None:
        """Answer one command; returns when the next record is due (``None``: not logging)."""
        self.commands.append(packet.encode().decode())
        command = _COMMANDS.get((packet.cmd, packet.sub))
        return command(self, packet, next_record) if command is not None else next_record

    def _send_header(self, packet: proto.Packet, next_record: float | None) -> float | None:
        self._write(proto.Packet("h", "-", proto.FIELDS).encode())
        return next_record

    def _send_version(self, packet: proto.Packet, next_record: float | None) -> float | None:
        self._write(proto.Packet("v", "-", ("WattsUp-emulator", "energyframe", "1")).encode())
        return next_record

    def _clear_memory(self, packet: proto.Packet, next_record: float | None) -> float | None:
        return next_record  # nothing is kept in memory

    def _start_logging(self, packet: proto.Packet, next_record: float | None) -> float | None:
        """Log at the interval the command gives (in the meter's seconds; 1 s without one)."""
        interval = float(packet.fields[2]) if len(packet.fields) >= 3 and packet.fields[2] else 1.0
        self._log_interval_s = interval * self.interval_s / self.time_scale
        self._logging_since = time.monotonic()
        return self._logging_since + self._log_interval_s

    def _stop_logging(self, packet: proto.Packet, next_record: float | None) -> float | None:
        """Stop logging, and say the interval it logged at."""
        self._logging_since = None
        interval = int(round(self._log_interval_s * self.time_scale))
        self._write(proto.Packet("l", "-", ("0", str(interval))).encode())
        return None

    def _average_power(self, start_s: float, end_s: float) -> float:
        with self._lock:
            history = [p for t, p in self._history if start_s <= t <= end_s]
        if not history:
            return float(self.profile((start_s + end_s) / 2))
        return float(sum(history) / len(history))

    def _after(self, meter_s: float | None, now: float) -> bool:
        """Whether ``meter_s`` seconds of the meter's clock have passed since logging started."""
        if meter_s is None or self._logging_since is None:
            return False
        return (now - self._logging_since) * self.time_scale >= meter_s

    def _send_record(self, now: float) -> bool:
        """Send the record due at ``now``, or what the faults send instead; ``False`` once the
        port is closed."""
        f = self.faults
        if self._after(f.disconnect_after_s, now):
            assert self._master is not None  # open while serving
            os.close(self._master)  # the reader's next read fails, as when the cable is pulled
            self._master = None
            return False
        if self._after(f.silence_after_s, now):
            return True
        if self._after(f.noise_after_s, now):
            self._write(bytes(self._rng.randrange(256) for _ in range(60)))
            return True
        if self._after(f.garbage_after_s, now):
            self._write(bytes(self._rng.randrange(256) for _ in range(40)))
        if self._after(f.bad_record_after_s, now):
            self._write(b"#d,-,18,12x4,_,_;")
            return True
        self._write(proto.format_record(self._record(now)))
        self.records_sent += 1
        return True

    def _record(self, now: float) -> dict[str, float]:
        """The record due at ``now``: the profile's average over the interval it reports (late by
        the lag and the drift), with noise, in the meter's resolution, negated by that fault."""
        elapsed = now - (self._logging_since or now)
        start, end = record_window(
            now, elapsed, self._log_interval_s, self.lag_s / self.time_scale, self.drift
        )
        watts = self._average_power(start, end)
        if self.noise_w:
            watts += self._rng.gauss(0.0, self.noise_w)
        watts = max(0.0, round(watts / self.quantum_w) * self.quantum_w)
        if self._after(self.faults.negative_after_s, now):
            watts = -watts
        amps = abs(watts) / VOLTS
        return {"W": watts, "V": VOLTS, "A": amps, "WH": 0.0, "PF": 100.0, "Hz": 60.0, "VA": abs(watts)}


#: the commands the emulated meter answers, by (command, subcommand)
_COMMANDS: dict[tuple[str, str], Callable[[WattsUpEmulator, proto.Packet, float | None], float | None]] = {
    ("H", "R"): WattsUpEmulator._send_header,
    ("V", "R"): WattsUpEmulator._send_version,
    ("R", "W"): WattsUpEmulator._clear_memory,
    ("L", "W"): WattsUpEmulator._start_logging,
    ("L", "R"): WattsUpEmulator._stop_logging,
}


def _watts(text: str, what: str) -> float:
    """A power of a profile: a finite number of watts, not negative (a meter reads >= 0)."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number of watts >= 0, got {text.strip()!r}")
    return value


def _square(rest: str) -> Callable[[float], float]:
    parts = rest.split(",")
    if len(parts) != 3:
        raise ValueError(f"expected square:LOW,HIGH,PERIOD (three numbers), got {len(parts)}")
    low, high = _watts(parts[0], "LOW"), _watts(parts[1], "HIGH")
    period = float(parts[2])
    if not math.isfinite(period) or period <= 0:
        raise ValueError(f"PERIOD must be a finite number of seconds > 0, got {parts[2].strip()!r}")
    return square_wave(low, high, period, start_s=time.monotonic())


def parse_profile(text: str) -> Callable[[float], float]:
    """``constant:200``, ``square:100,300,10`` (low, high, period), ``csv:FILE``,
    ``nvml:150[,gpu=0]`` (baseline plus the GPU's power).

    Raises:
        ValueError: an unknown kind, or a value that is not a finite power >= 0 W (a period
            > 0 s), naming it.
    """
    kind, _, rest = text.partition(":")
    try:
        if kind == "constant":
            return constant(_watts(rest, "the power"))
        if kind == "square":
            return _square(rest)
        if kind == "csv":
            return csv_profile(rest)
        if kind == "nvml":
            parts = rest.split(",")
            gpu = int(parts[1].split("=")[1]) if len(parts) > 1 else 0
            return nvml_profile(_watts(parts[0], "BASELINE"), gpu)
    except (ValueError, IndexError, OSError) as e:
        raise ValueError(f"bad profile {text!r}: {e}") from e
    raise ValueError(
        f"unknown profile {text!r}; use constant:W, square:LOW,HIGH,PERIOD, csv:FILE or nvml:BASELINE"
    )


__all__ = [
    "WattsUpEmulator",
    "Faults",
    "constant",
    "square_wave",
    "csv_profile",
    "nvml_profile",
    "parse_profile",
    "record_window",
]
