"""One edge of a counter window between two ticks, estimated without fine samples: linear
interpolation, with how far it may be off (the ticks' stamps, and a step the interval may hide).
The base of ``energy.py`` (the interpolated counter's bound) and of ``edges.py`` (the estimator
chosen per edge)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .vocabulary import COUNTER

#: a tick is stamped within ± this of the counter's change: the poller stamps a change midway
#: between the starts of two reads ~4 ms apart (a read of NVML's counter takes ~3-4 ms and reads
#: as it begins; benchmarks/tick_stamps.py). Units: s.
STAMP_S = 0.002
#: standard deviation of a stamp error uniform within ±STAMP_S. Units: s.
STAMP_SD_S = STAMP_S / math.sqrt(3.0)


@dataclass(frozen=True)
class Edge:
    """One window edge: the estimator it took and how far the energy up to it may be off.

    Args:
        estimator: ``counter``, ``fused`` or ``anchored``.
        correction_j: what the estimator adds to the interpolated counter at this edge (D where
            ``fused`` or ``anchored``, 0 where ``counter``). Units: J.
        sd_j: one standard deviation of the error of the energy up to this edge. Units: J.
        step: whether the samples show a step inside the edge's tick interval.
        evidence: whether fine samples shaped the edge's tick interval at all.
    """

    estimator: str
    correction_j: float
    sd_j: float
    step: bool
    evidence: bool


def interval(ticks: np.ndarray, t: float) -> int:
    """The tick interval that holds ``t`` (the one it starts, at a tick)."""
    return int(np.clip(np.searchsorted(ticks, t, side="right") - 1, 0, ticks.size - 2))


def stamp_sd(x: float, p0_w: float, p1_w: float) -> float:
    """The energy error at an edge from the two ticks' stamps: the share of each tick's error
    that the interpolation carries to the edge, at the power around that tick. Units: J."""
    return STAMP_SD_S * math.hypot((1.0 - x) * p0_w, x * p1_w)


def counter_edge(ticks_s: np.ndarray, counter_j: np.ndarray, t: float) -> Edge:
    """An edge of a counter with no fine samples beside it: linear interpolation, with the
    stamps' uncertainty and, since nothing shows the load inside the interval, the quarter of
    the interval's energy a step would misplace at worst."""
    i = interval(ticks_s, t)
    span = ticks_s[i + 1] - ticks_s[i]
    increment = counter_j[i + 1] - counter_j[i]
    x = float(np.clip((t - ticks_s[i]) / span, 0.0, 1.0))
    power = increment / span
    # without evidence a step cannot be excluded: its worst case, x (1 - x) of the increment,
    # taken as a uniform spread (sd = bound / sqrt 3)
    unseen = x * (1.0 - x) * increment / math.sqrt(3.0)
    return Edge(COUNTER, 0.0, math.hypot(stamp_sd(x, power, power), unseen), False, False)
