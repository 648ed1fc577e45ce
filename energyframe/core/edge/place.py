"""Where a window edge lies between its counter's ticks: the first stage of a counter window's
edge, computed once and read by every estimator and error term after it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class EdgePlace:
    """A window edge in its counter's tick interval.

    Args:
        t_s: the edge. Units: s.
        index: its tick interval, the one it starts at a tick (the first or the last interval
            for an edge outside the ticks).
        t0_s, t1_s: the ticks either side. Units: s.
        x: where the edge lies in the interval: 0 at ``t0_s``, 1 at ``t1_s`` (clipped).
        increment_j: the counter's increment over the interval. Units: J.
        synced_start_s: the start of a window opened after a device sync at this edge or less
            than a sample period after it, whose reading the edge shares (``None``: none): a
            synced window's own start, or the next one's at its end. Units: s.
    """

    t_s: float
    index: int
    t0_s: float
    t1_s: float
    x: float
    increment_j: float
    synced_start_s: float | None = None

    @property
    def span_s(self) -> float:
        """The tick interval's length. Units: s."""
        return self.t1_s - self.t0_s

    @property
    def power_w(self) -> float:
        """The counter's mean power over the interval. Units: W."""
        return float(np.divide(self.increment_j, self.span_s))


def interval(ticks_s: np.ndarray, t: float) -> int:
    """The tick interval that holds ``t`` (the one it starts, at a tick)."""
    return int(np.clip(np.searchsorted(ticks_s, t, side="right") - 1, 0, ticks_s.size - 2))


def place(ticks_s: np.ndarray, counter_j: np.ndarray, t: float, synced_start_s: float | None = None) -> EdgePlace:
    """Where ``t`` lies between the ticks of a counter (``ticks_s``, ascending; ``counter_j`` at
    each), and the synced start it shares (``EdgePlace.synced_start_s``). Units: s, J."""
    i = interval(ticks_s, t)
    return EdgePlace(
        t_s=t,
        index=i,
        t0_s=float(ticks_s[i]),
        t1_s=float(ticks_s[i + 1]),
        x=float(np.clip((t - ticks_s[i]) / (ticks_s[i + 1] - ticks_s[i]), 0.0, 1.0)),
        increment_j=float(counter_j[i + 1] - counter_j[i]),
        synced_start_s=synced_start_s,
    )
