"""The subscriber interface of live power: what a run hands out while it goes.

A ``LiveListener`` is told which channels each source started, then receives every physical
reading of every channel as the recorder drains the sources (about once a second), on the run's
monotonic timeline, and each window's energy once the measurement closes it. Listeners run on
the recorder's drain thread: they must be quick and must not block. A listener that raises is
dropped, with a warning, and the run goes on: a dashboard never costs a measurement.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.clock import ClockModel
from ..core.samples import in_si, invalid_reason
from ..model import Channel, Sample


@dataclass(frozen=True)
class WindowEnergy:
    """One closed window's energy on one channel. Units: J, s."""

    phase: str
    trial: int
    channel: str
    energy_j: float
    duration_s: float


class LiveListener(ABC):
    """Receives channels, readings and window energies while a run goes."""

    def on_channels(self, source: str, channels: Sequence[Channel]) -> None:  # noqa: B027 (optional hook)
        """``source`` started and will deliver ``channels``."""

    @abstractmethod
    def on_samples(
        self, source: str, channel: Channel, times_s: Sequence[float], values: Sequence[float]
    ) -> None:
        """Physical readings of ``channel`` (oldest first, as delivered), ``times_s`` on the
        monotonic clock. Non-physical readings (negative, NaN, infinite) are left out, as the
        run leaves them out of its series. Units: s, and the channel's unit."""

    def on_window(self, window: WindowEnergy) -> None:  # noqa: B027 (optional hook)
        """A window closed and its energy on one channel is known."""


class Fanout:
    """Hands a drained batch to every listener; drops one that raises, with one warning.

    Listeners get what a run integrates: channels in W or J, and readings converted to them
    (a source that declares ``mW`` or ``mJ`` hands over thousands; the run's sample store
    converts them as they arrive, and so does the fan-out)."""

    def __init__(self, listeners: Iterable[LiveListener], warn: Callable[[str], None]) -> None:
        self.listeners = list(listeners)
        self.warn = warn
        self._scale: dict[str, float] = {}  # channel -> what one declared unit is in W or J

    def __bool__(self) -> bool:
        return bool(self.listeners)

    def channels(self, source: str, channels: Sequence[Channel]) -> None:
        converted = []
        for channel in channels:
            si_channel, self._scale[channel.name] = _in_si(channel)
            converted.append(si_channel)
        self._each("on_channels", source, converted)

    def samples(
        self, source: str, batch: Sequence[Sample], channels: Mapping[str, Channel], clock: ClockModel
    ) -> None:
        """``batch`` as each channel's physical readings on the monotonic clock."""
        if not self.listeners:
            return
        grouped: dict[str, tuple[list[float], list[float]]] = {}
        si_channels: dict[str, Channel] = {}
        for sample in batch:
            channel = channels.get(sample.channel)
            if channel is None:
                continue
            if sample.channel not in si_channels:
                si_channels[sample.channel], own_scale = _in_si(channel)
                self._scale.setdefault(sample.channel, own_scale)
            value = float(sample.value) * self._scale[sample.channel]
            if invalid_reason(si_channels[sample.channel], value) is not None:
                continue
            times, values = grouped.setdefault(sample.channel, ([], []))
            times.append(clock.to_monotonic(sample.time_s, channel.clock))
            values.append(value)
        for name, (times, values) in grouped.items():
            self._each("on_samples", source, si_channels[name], times, values)

    def window(self, window: WindowEnergy) -> None:
        self._each("on_window", window)

    def window_rows(self, phase: str, trial: int, rows: Iterable[Mapping[str, Any]]) -> None:
        """A closed window's energy on each channel, from its rows (windows.csv's columns:
        ``channel``, ``energy_j``, ``duration_s``); a channel of no energy (a state) is left out."""
        for row in rows:
            energy = float(row.get("energy_j", float("nan")))
            if energy == energy:  # NaN: no energy on that channel (or none known)
                self.window(WindowEnergy(phase, int(trial), str(row["channel"]), energy, float(row["duration_s"])))

    def _each(self, method: str, *args: Any) -> None:
        for listener in list(self.listeners):
            try:
                getattr(listener, method)(*args)
            except Exception as e:  # a broken dashboard must not stop the measurement
                self.listeners.remove(listener)
                self.warn(
                    f"live listener {type(listener).__name__} failed and was dropped: {type(e).__name__}: {e}"
                )


def _in_si(channel: Channel) -> tuple[Channel, float]:
    """The channel in W or J and its readings' factor; a unit the run refuses stays as it is
    (the run does not start with it)."""
    try:
        return in_si(channel)
    except ValueError:
        return channel, 1.0
