"""Each channel's live state: its power over the last second, its energy since it was first
seen, its last reading. What the terminal view and the Prometheus exporter show.

Power is an average, never one reading: over the readings of the last ``span_s`` (1 s), the
counter's difference over their time for an energy channel (NVML's counter moves every ~100 ms,
so two neighbouring readings say 0 W or a spike), the trapezoid integral over their time for a
power channel (one reading alone: its value). Energy since the start is the counter's sum of
increments (a decrease is a reset, as after a driver reload: never negative energy, that
interval is left out) or the trapezoid integral of power, the same piecewise-linear signal a
run's windows integrate.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..model import Channel, Quantity, Scope
from .listener import LiveListener, WindowEnergy

#: power is averaged over the readings of this span. Units: s.
POWER_SPAN_S = 1.0


def gpu_label(channel: Channel) -> str:
    """The GPU a channel measures, from its name (``gpu0``, ``gpu0.power_instant``,
    ``smi.gpu1``), for a channel of GPU scope; ``""`` for any other."""
    if channel.scope != Scope.GPU:
        return ""
    for part in channel.name.split("."):
        if part.startswith("gpu") and part[3:].isdigit():
            return part[3:]
    return ""


@dataclass
class _State:
    channel: Channel
    source: str
    recent: deque = field(default_factory=deque)  # (t, value) of the last span
    energy_j: float = 0.0
    samples: int = 0
    last: tuple[float, float] | None = None

    def add(self, t: float, value: float, span_s: float) -> None:
        if self.last is not None and t > self.last[0]:
            t0, v0 = self.last
            if self.channel.quantity == Quantity.ENERGY:
                self.energy_j += value - v0 if value >= v0 else 0.0  # a decrease is a reset
            else:
                self.energy_j += 0.5 * (v0 + value) * (t - t0)
        if (
            self.last is None or t >= self.last[0]
        ):  # a reading out of order counts, but does not move time back
            self.last = (t, value)
        self.samples += 1
        self.recent.append((t, value))
        while self.recent and self.recent[0][0] < t - span_s:
            self.recent.popleft()

    def power_w(self) -> float:
        points = sorted(self.recent)
        if not points:
            return math.nan
        if self.channel.quantity == Quantity.POWER and len(points) == 1:
            return points[0][1]
        (t0, v0), (t1, v1) = points[0], points[-1]
        if t1 <= t0:
            return math.nan
        if self.channel.quantity == Quantity.ENERGY:
            return (v1 - v0) / (t1 - t0) if v1 >= v0 else math.nan
        area = sum(0.5 * (a[1] + b[1]) * (b[0] - a[0]) for a, b in zip(points, points[1:]))
        return area / (t1 - t0)


@dataclass(frozen=True)
class ChannelReading:
    """One channel's live figures. Units: W, J, s (``last_time_s`` monotonic)."""

    channel: str
    source: str
    scope: str
    primary: bool
    gpu: str
    power_w: float
    energy_j: float
    samples: int
    last_time_s: float


class PowerTracker(LiveListener):
    """Keeps every integrable channel's live state; thread-safe (the drain thread writes, the
    exporter's and the terminal's threads read).

    Args:
        rank: this process's rank (the exporter's ``rank`` label).
        host: the machine's name (the ``host`` label; default: this one's).
        span_s: power is averaged over this much of the latest readings. Units: s.
        now: the monotonic clock (injected by tests).
    """

    def __init__(
        self,
        rank: int = 0,
        host: str | None = None,
        span_s: float = POWER_SPAN_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rank = rank
        self.host = host or socket.gethostname()
        self.span_s = span_s
        self.now = now
        self._lock = threading.Lock()
        self._states: dict[str, _State] = {}
        self._windows: dict[tuple[str, str], WindowEnergy] = {}

    def on_channels(self, source: str, channels: Sequence[Channel]) -> None:
        with self._lock:
            for channel in channels:
                if channel.integrable:
                    self._states.setdefault(channel.name, _State(channel, source))

    def on_samples(
        self, source: str, channel: Channel, times_s: Sequence[float], values: Sequence[float]
    ) -> None:
        if not channel.integrable:
            return
        with self._lock:
            state = self._states.setdefault(channel.name, _State(channel, source))
            for t, value in zip(times_s, values):
                state.add(float(t), float(value), self.span_s)

    def on_window(self, window: WindowEnergy) -> None:
        with self._lock:
            self._windows[(window.phase, window.channel)] = window

    def readings(self) -> list[ChannelReading]:
        """Every channel's figures, primary channels first, then by name."""
        with self._lock:
            states = list(self._states.values())
            out = [
                ChannelReading(
                    s.channel.name,
                    s.source,
                    s.channel.scope.value,
                    s.channel.primary,
                    gpu_label(s.channel),
                    s.power_w(),
                    s.energy_j,
                    s.samples,
                    s.last[0] if s.last else math.nan,
                )
                for s in states
            ]
        return sorted(out, key=lambda r: (not r.primary, r.channel))

    def windows(self) -> list[WindowEnergy]:
        """The last closed window of each phase on each channel."""
        with self._lock:
            return sorted(self._windows.values(), key=lambda w: (w.phase, w.channel))

    def channel_of(self, name: str) -> Channel | None:
        with self._lock:
            state = self._states.get(name)
            return state.channel if state else None
