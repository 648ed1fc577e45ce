"""Energy of a time window from a sample stream, exact at the window's edges.

Two kinds of stream (see ``Quantity``):

- a cumulative energy counter, sampled at its tick times: the counter is interpolated linearly
  between ticks at both edges, and the window's energy is the difference. A plain difference
  of two reads would be off by up to one tick of energy at each edge, and read 0 J for a
  window between two ticks.
- power samples: the piecewise-linear signal through the samples is integrated (trapezoid)
  over the window, with its value at each edge interpolated between the neighbouring samples.

Both need a sample at or before the window's start and at or after its end; otherwise the
window is flagged ``uncovered`` and its energy is NaN rather than a confident wrong number. A
counter is trusted only while it behaves like one: a decrease, or a rise faster than any device
could draw (``MAX_POWER_W``: a reset counted as a wraparound), is ``counter_reset``; one value
held for several update periods while its samples kept coming is ``stuck_counter`` (a frozen
``energy_uj`` reads 0 J, not idle). Both give NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..model import Quantity
from .samples import MAX_POWER_W
from .stats import Z95
from .vocabulary import COUNTER, COUNTER_RESET, GAP, POWER, SHORT_WINDOW, STUCK_COUNTER, UNCOVERED

# numpy 2 renamed trapz; keep working with numpy 1.24+
_trapezoid = getattr(np, "trapezoid", None) or getattr(np, "trapz")  # noqa: B009

#: a counter holding one value this many update periods, its samples still coming, is stuck: no
#: device a counter meters draws no power at all (the stall watchdog uses the same count)
STUCK_PERIODS = 5.0


@dataclass(frozen=True)
class WindowEnergy:
    """Energy of one window on one channel. Units: J (NaN when it cannot be known).

    Args:
        estimator: how the energy was read (``counter``, ``power``, or per edge for a counter
            with fine samples beside it: ``fused``, ``counter/fused``...).
        random_j: the 95 % bound of what varies window to window (``uncertainty.py``).
        columns: windows.csv columns the estimate adds (how far a counter's tick beside an edge
            lies from its update grid, ``tickgrid.py``).
    """

    energy_j: float
    flags: tuple[str, ...] = ()
    estimator: str = ""
    random_j: float = math.nan
    columns: Mapping[str, float] = field(default_factory=dict)


def _bracket(times: np.ndarray, start_s: float, end_s: float) -> tuple[int, int] | None:
    """Indices of the last sample at/before start and the first at/after end, or None."""
    if times.size == 0 or times[0] > start_s or times[-1] < end_s:
        return None
    lo = int(np.searchsorted(times, start_s, side="right")) - 1
    hi = int(np.searchsorted(times, end_s, side="left"))
    return lo, hi


def _quality_flags(
    times: np.ndarray, lo: int, hi: int, start_s: float, end_s: float, resolution_s: float
) -> list[str]:
    flags = []
    if resolution_s > 0 and (end_s - start_s) < 2 * resolution_s:
        flags.append(SHORT_WINDOW)
    if resolution_s > 0 and hi > lo and float(np.max(np.diff(times[lo : hi + 1]))) > 3 * resolution_s:
        flags.append(GAP)
    return flags


def counter_energy(
    times_s: np.ndarray, energy_j: np.ndarray, start_s: float, end_s: float, resolution_s: float = 0.0
) -> WindowEnergy:
    """Energy between ``start_s`` and ``end_s`` from a cumulative counter sampled at its ticks,
    and its flags; its bound is its edges' (``edge.counter_window``).

    Args:
        times_s: tick times, ascending. Units: s.
        energy_j: counter value at each tick. Units: J.
        start_s, end_s: the window. Units: s.
        resolution_s: the counter's update period, for the short-window and gap flags. Units: s.
    """
    bracket = _bracket(times_s, start_s, end_s)
    if bracket is None:
        return WindowEnergy(math.nan, (UNCOVERED,))
    lo, hi = bracket
    flags = _quality_flags(times_s, lo, hi, start_s, end_s, resolution_s)
    segment_v = energy_j[lo : hi + 1]
    steps_j, steps_s = np.diff(segment_v), np.diff(times_s[lo : hi + 1])
    if np.any(steps_j < 0) or np.any((steps_s > 0) & (steps_j > MAX_POWER_W * steps_s)):
        return WindowEnergy(math.nan, (*flags, COUNTER_RESET))
    if resolution_s > 0 and _longest_flat_s(times_s, energy_j, start_s, end_s, resolution_s) > (
        STUCK_PERIODS * resolution_s
    ):
        return WindowEnergy(math.nan, (*flags, STUCK_COUNTER))
    # Work relative to the window start and the first bracketing tick: keeps full precision
    # when timestamps are Unix seconds and counters hold megajoules since driver load.
    t = times_s[lo : hi + 1] - start_s
    v = segment_v - segment_v[0]
    e0 = float(np.interp(0.0, t, v))
    e1 = float(np.interp(end_s - start_s, t, v))
    return WindowEnergy(e1 - e0, tuple(flags), COUNTER)


def _longest_flat_s(
    times_s: np.ndarray, energy_j: np.ndarray, start_s: float, end_s: float, resolution_s: float
) -> float:
    """The longest time the counter held one value (from the first sample of it to the last)
    among the values it held around ``[start_s, end_s]``. Units: s."""
    reach = STUCK_PERIODS * resolution_s  # a longer stretch is stuck wherever it ends
    i0 = int(np.searchsorted(times_s, start_s - reach, side="left"))
    i1 = int(np.searchsorted(times_s, end_s + reach, side="right"))
    t, v = times_s[i0:i1], energy_j[i0:i1]
    if t.size < 2:
        return 0.0
    ends = np.flatnonzero(np.diff(v) != 0)  # the last sample of each value but the last
    firsts = np.concatenate(([0], ends + 1))
    lasts = np.concatenate((ends, [t.size - 1]))
    around = (t[lasts] >= start_s - resolution_s) & (t[firsts] <= end_s + resolution_s)
    if not np.any(around):
        return 0.0
    return float(np.max(t[lasts][around] - t[firsts][around]))


def power_energy(
    times_s: np.ndarray, power_w: np.ndarray, start_s: float, end_s: float, resolution_s: float = 0.0
) -> WindowEnergy:
    """Integral of the piecewise-linear power signal over ``[start_s, end_s]``.

    Args:
        times_s: sample times, ascending (two samples at one time describe a step). Units: s.
        power_w: power at each sample. Units: W.
        start_s, end_s: the window. Units: s.
        resolution_s: the reading's update period, for the short-window and gap flags. Units: s.
    """
    bracket = _bracket(times_s, start_s, end_s)
    if bracket is None:
        return WindowEnergy(math.nan, (UNCOVERED,))
    lo, hi = bracket
    flags = _quality_flags(times_s, lo, hi, start_s, end_s, resolution_s)
    t = times_s[lo : hi + 1] - start_s
    p = power_w[lo : hi + 1]
    duration = end_s - start_s
    inside = (t > 0.0) & (t < duration)
    ts = np.concatenate(([0.0], t[inside], [duration]))
    ps = np.concatenate(([_value_at(t, p, 0.0)], p[inside], [_value_at(t, p, duration)]))
    random = sample_coverage_j(t, p, 0.0, duration)
    return WindowEnergy(float(_trapezoid(ps, ts)), tuple(flags), POWER, random)


def _value_at(t: np.ndarray, v: np.ndarray, x: float) -> float:
    """Linear interpolation that, at a step (two samples at one time), takes the side inside
    the window: the later value at the window's start, the earlier at its end."""
    if x <= 0.0:
        i = int(np.searchsorted(t, x, side="right"))
        if i > 0 and t[i - 1] == x:
            return float(v[i - 1])
    else:
        i = int(np.searchsorted(t, x, side="left"))
        if i < t.size and t[i] == x:
            return float(v[i])
    return float(np.interp(x, t, v))


def sample_coverage_j(times_s: np.ndarray, power_w: np.ndarray, start_s: float, end_s: float) -> float:
    """The random bound of power samples integrated over [start, end]: between two samples the
    power may have changed anywhere, not linearly; a change of ``dp`` over ``dt`` then moves the
    integral by up to ``dp dt / 2``, uniformly (sd ``dp dt / sqrt 12``), independently per
    sample interval. Units: J (95 %)."""
    if times_s.size < 2:
        return math.nan
    lo = max(int(np.searchsorted(times_s, start_s, side="right")) - 1, 0)
    hi = min(int(np.searchsorted(times_s, end_s, side="left")), times_s.size - 1)
    t = np.clip(times_s[lo : hi + 1], start_s, end_s)
    dt = np.diff(t)
    dp = np.diff(power_w[lo : hi + 1])
    return Z95 * float(np.sqrt(np.sum((dp * dt) ** 2) / 12.0))



def window_energy(
    quantity: Quantity,
    times_s: np.ndarray,
    values: np.ndarray,
    start_s: float,
    end_s: float,
    resolution_s: float = 0.0,
) -> WindowEnergy:
    """Dispatch on the channel's quantity."""
    if quantity == Quantity.ENERGY:
        return counter_energy(times_s, values, start_s, end_s, resolution_s)
    if quantity == Quantity.POWER:
        return power_energy(times_s, values, start_s, end_s, resolution_s)
    raise ValueError(f"{quantity} samples carry no energy")
