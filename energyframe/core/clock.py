"""The run's timeline: monotonic seconds, mapped to Unix time by one (wall, monotonic) pair.

Windows are opened and closed on ``time.monotonic()``. Sources stamped in wall time are mapped
onto that timeline with the pair taken when the run starts; a second pair taken at the end
measures how far the wall clock moved against the monotonic one during the run (NTP slewing or
a step), which is reported, because it bounds the error of that mapping.

Per-channel corrections (a wall meter's lag and drift, estimated after the run) are
``ChannelTimeMap`` objects applied on top of the clock mapping.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..model import ClockBase


@dataclass(frozen=True)
class ClockPair:
    """A wall-clock reading and a monotonic reading taken at the same instant. Units: s."""

    wall_s: float
    monotonic_s: float
    uncertainty_s: float

    @classmethod
    def now(cls, tries: int = 5) -> ClockPair:
        """Read both clocks; keep the try whose bracketing monotonic reads were closest."""
        best: ClockPair | None = None
        for _ in range(tries):
            m0 = time.monotonic()
            w = time.time()
            m1 = time.monotonic()
            pair = cls(w, (m0 + m1) / 2, (m1 - m0) / 2)
            if best is None or pair.uncertainty_s < best.uncertainty_s:
                best = pair
        assert best is not None
        return best

    @property
    def offset_s(self) -> float:
        """Unix time minus monotonic time at this instant."""
        return self.wall_s - self.monotonic_s


@dataclass(frozen=True)
class ChannelTimeMap:
    """A correction for a source whose timestamps lag or drift: true = t - lag - drift*(t - t_ref).

    Args:
        lag_s: how late the channel's timestamps are (positive: the reading refers to earlier).
        drift: fractional rate error of the channel's clock (0.003 = 0.3 % fast).
        reference_s: the monotonic time at which ``lag_s`` holds exactly.
    """

    lag_s: float = 0.0
    drift: float = 0.0
    reference_s: float = 0.0

    def apply(self, times_s):  # works on floats and numpy arrays
        return times_s - self.lag_s - self.drift * (times_s - self.reference_s)

    @property
    def is_identity(self) -> bool:
        return self.lag_s == 0.0 and self.drift == 0.0


class ClockModel:
    """Maps source timestamps onto the run's monotonic timeline and back to Unix time."""

    def __init__(self, start: ClockPair | None = None) -> None:
        self.start = start or ClockPair.now()
        self.end: ClockPair | None = None

    def to_monotonic(self, t: float, clock: ClockBase):
        """Convert a timestamp (or array) on ``clock`` to monotonic seconds."""
        if clock == ClockBase.MONOTONIC:
            return t
        return t - self.start.offset_s

    def to_monotonic_from_unix(self, unix_s):
        """Convert Unix seconds (or an array) to monotonic seconds."""
        return unix_s - self.start.offset_s

    def to_unix(self, monotonic_s):
        """Convert monotonic seconds (or an array) to Unix seconds."""
        return monotonic_s + self.start.offset_s

    def finish(self) -> ClockPair:
        self.end = ClockPair.now()
        return self.end

    @property
    def wall_drift_s(self) -> float | None:
        """How far the wall clock moved against the monotonic clock between start and end."""
        if self.end is None:
            return None
        return self.end.offset_s - self.start.offset_s

    def to_json(self) -> dict[str, float]:
        out: dict[str, float] = {
            "anchor_wall_s": self.start.wall_s,
            "anchor_monotonic_s": self.start.monotonic_s,
            "anchor_uncertainty_s": self.start.uncertainty_s,
        }
        if self.end is not None and self.wall_drift_s is not None:
            out.update(
                end_wall_s=self.end.wall_s,
                end_monotonic_s=self.end.monotonic_s,
                wall_minus_monotonic_change_s=self.wall_drift_s,
            )
        return out

    @classmethod
    def from_json(cls, data: dict) -> ClockModel:
        model = cls(
            ClockPair(
                data["anchor_wall_s"], data["anchor_monotonic_s"], data.get("anchor_uncertainty_s", 0.0)
            )
        )
        if "end_wall_s" in data:
            model.end = ClockPair(data["end_wall_s"], data["end_monotonic_s"], 0.0)
        return model
