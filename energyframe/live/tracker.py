"""Each channel's live state: its power over the last second, its energy since it was first
seen, its last reading. What the terminal view and the Prometheus exporter show.

Power is an average, never one reading: over the readings of the last ``span_s`` (1 s), the
counter's increments over their time for an energy channel (NVML's counter moves every ~100 ms,
so two neighbouring readings say 0 W or a spike), the trapezoid integral over their time for a
power channel (one reading alone: its value). Energy since the start is the counter's sum of
increments or the trapezoid integral of power, the same piecewise-linear signal a run's windows
integrate, under a run's rules:

- a reading stamped ahead of now (more than ``AHEAD_SLACK_S``) is refused: a window integrates
  only readings up to its end, which is never later than now, so a source whose clock runs
  ahead would otherwise claim the time between now and its stamp at once;
- a reading older than the last one integrated is refused (late): energy already counted up to
  that instant is never counted twice; a batch is put in time order first;
- a counter that goes down (a driver reload) or rises faster than ``MAX_POWER_W`` (a reset read
  as a wraparound) skips that one interval (a run's ``counter_reset``): the increments after it
  count again, never negative energy, never a jump of kilojoules.

Refused readings and skipped intervals are counted per channel (``ChannelReading.refused``,
``ChannelReading.resets``) and served, so a dashboard sees them.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..core.samples import MAX_POWER_W
from ..model import Channel, Quantity, Scope
from .listener import LiveListener, WindowEnergy

#: power is averaged over the readings of this span. Units: s.
POWER_SPAN_S = 1.0
#: a reading stamped up to this far ahead of now still counts (a stamp rounded up, a source's
#: clock a few milliseconds off the run's); one further ahead is refused. Units: s.
AHEAD_SLACK_S = 0.5
#: why a reading was refused
AHEAD, LATE = "ahead", "late"


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
    recent: deque = field(default_factory=deque)  # (t, value) of the last span, integrated ones only
    energy_j: float = 0.0
    samples: int = 0
    last: tuple[float, float] | None = None
    refused: dict[str, int] = field(default_factory=dict)
    resets: int = 0

    def add(self, t: float, value: float, now_s: float, span_s: float) -> None:
        """One reading, in time order within its batch (``PowerTracker.on_samples`` sorts it)."""
        self.samples += 1
        if t > now_s + AHEAD_SLACK_S:
            self._refuse(AHEAD)
            return
        if self.last is not None and t < self.last[0]:
            self._refuse(LATE)
            return
        if self.last is not None and t > self.last[0]:
            increment = self._increment(self.last, (t, value))
            if increment is None:
                self.resets += 1
            else:
                self.energy_j += increment
        self.last = (t, value)
        self.recent.append((t, value))
        while self.recent and self.recent[0][0] < t - span_s:
            self.recent.popleft()

    def _refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def _increment(self, a: tuple[float, float], b: tuple[float, float]) -> float | None:
        """The energy between two readings; ``None`` for a counter's interval a run calls
        ``counter_reset`` (it went down, or rose faster than ``MAX_POWER_W``). Units: J."""
        (t0, v0), (t1, v1) = a, b
        if self.channel.quantity != Quantity.ENERGY:
            return 0.5 * (v0 + v1) * (t1 - t0)
        if v1 < v0 or v1 - v0 > MAX_POWER_W * (t1 - t0):
            return None
        return v1 - v0

    def power_w(self) -> float:
        points = list(self.recent)
        if not points:
            return math.nan
        if self.channel.quantity == Quantity.POWER and len(points) == 1:
            return points[0][1]
        energy_j = duration_s = 0.0
        for a, b in zip(points, points[1:]):
            increment = self._increment(a, b) if b[0] > a[0] else None
            if increment is not None:  # a reset's interval says nothing of the power
                energy_j += increment
                duration_s += b[0] - a[0]
        return energy_j / duration_s if duration_s > 0 else math.nan


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
    #: readings refused, by reason (``ahead``: stamped ahead of now; ``late``: older than the
    #: last one integrated)
    refused: Mapping[str, int] = field(default_factory=dict)
    #: counter intervals left out (the counter went down, or rose faster than ``MAX_POWER_W``)
    resets: int = 0


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
        now_s = self.now()
        readings = sorted(zip(map(float, times_s), map(float, values)), key=lambda r: r[0])
        with self._lock:
            state = self._states.setdefault(channel.name, _State(channel, source))
            for t, value in readings:
                state.add(t, value, now_s, self.span_s)

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
                    dict(s.refused),
                    s.resets,
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
