"""Counter ticks stamped off the counter's own update grid: a poller that saw a change late.

An energy counter that updates on a clock of its own (NVML's, every ~100 ms on H100/H200) is
stamped midway between the poll that last saw the old value and the first that sees the new one
(``kit/polling.py``). Polled every ~1 ms, those stamps lie on a regular grid: on 15,381 H100 and
2,499 H200 ticks their robust spread about it was 0.4-2.1 ms per run and the farthest lay 11.6 ms
off (docs/validation.md). A poller the host starves of CPU polls late: the change lies anywhere in
the stall, the tick is stamped in its middle, and a window edge interpolated beside it moves by
the power times the error (16 ms at 700 W is 11 J). Nothing else in the record shows it.

So each tick's distance from the grid fitted through its neighbours (robust: median period and
phase) is checked. A tick farther than ``OFF_GRID_S`` is off the grid; a window with such a tick
beside an edge is flagged ``tick_off_grid`` and its bound takes the distance as the stamp's error
(``widen``). The check applies only where it can tell: enough ticks, a grid regular to within
``REGULAR_SD_S``, and a period long enough that a tick ``OFF_GRID_S`` off is still nearest its
own place on the grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .energy import WindowEnergy
from .stats import Z95
from .ticks import interval

#: window flag: a counter tick beside an edge lies off the counter's update grid
TICK_OFF_GRID = "tick_off_grid"
#: a tick farther than this from the grid was stamped late; above the farthest of 17,880 H100 and
#: H200 ticks polled normally (11.6 ms). Units: s.
OFF_GRID_S = 0.015
#: the grid is trusted where the ticks' robust spread about it is below this (per run, H100:
#: 0.4-1.8 ms, H200: 0.7-2.1 ms); a counter that does not update on a clock of its own is not
#: checked. Units: s.
REGULAR_SD_S = 0.003
#: ticks either side of a tick that its local grid is fitted through
NEIGHBOURS = 5
#: the fewest ticks the check needs (a run of about a second at 100 ms)
MIN_TICKS = 8
#: a tick ``OFF_GRID_S`` off must stay nearest its own place: the period is at least this many
#: times ``OFF_GRID_S``
MIN_PERIODS_OFF = 2.5
#: the window column of the farthest off-grid tick beside an edge. Units: ms.
COLUMN = "tick_off_grid_ms"


def robust_sd(r: np.ndarray) -> float:
    """1.4826 times the median absolute deviation: a normal spread's sd, not moved by a few
    outliers (NaN when empty)."""
    r = np.asarray(r, dtype=float)
    if r.size == 0:
        return math.nan
    return float(1.4826 * np.median(np.abs(r - np.median(r))))


def grid_residual_s(times_s: np.ndarray, half: int = NEIGHBOURS) -> np.ndarray:
    """Each tick's signed distance from a regular grid fitted through its ``half`` neighbours
    either side (the median period between them and the median phase). A skipped update counts
    as whole periods. Units: s."""
    t = np.asarray(times_s, dtype=float)
    if t.size < 3:
        return np.zeros(t.size)
    d = np.diff(t)
    n = np.concatenate([[0.0], np.cumsum(np.maximum(np.round(d / np.median(d)), 1.0))])
    r = np.empty(t.size)
    width = 2 * half + 1
    if t.size >= width:  # every full neighbourhood at once
        tw = np.lib.stride_tricks.sliding_window_view(t, width)
        nw = np.lib.stride_tricks.sliding_window_view(n, width)
        period = np.median(np.diff(tw, axis=1) / np.diff(nw, axis=1), axis=1)
        centre = n[half : t.size - half]
        phase = np.median(tw - period[:, None] * (nw - centre[:, None]), axis=1)
        r[half : t.size - half] = t[half : t.size - half] - phase
        rest = [*range(half), *range(t.size - half, t.size)]
    else:
        rest = list(range(t.size))
    for i in rest:  # near the ends, the neighbours there are
        lo, hi = max(0, i - half), min(t.size, i + half + 1)
        period_i = np.median(np.diff(t[lo:hi]) / np.diff(n[lo:hi]))
        r[i] = t[i] - np.median(t[lo:hi] - period_i * (n[lo:hi] - n[i]))
    return r


@dataclass(frozen=True)
class TickGrid:
    """A counter's ticks checked against its update grid.

    Args:
        residual_s: each tick's signed distance from the grid. Units: s.
        off: per tick, whether it lies off the grid (more than ``OFF_GRID_S``).
        spread_s: the ticks' robust sd about the grid. Units: s.
        period_s: the grid's median period. Units: s.
    """

    residual_s: np.ndarray
    off: np.ndarray
    spread_s: float
    period_s: float

    @property
    def any_off(self) -> bool:
        return bool(self.off.any())

    @classmethod
    def check(cls, times_s: np.ndarray) -> TickGrid | None:
        """The grid of a counter's ticks, or ``None`` where the check cannot tell: too few ticks,
        no regular grid, or a period too short to show a tick ``OFF_GRID_S`` off."""
        t = np.asarray(times_s, dtype=float)
        if t.size < MIN_TICKS:
            return None
        d = np.diff(t)
        period = float(np.median(d)) if d.size else math.nan
        if not period > MIN_PERIODS_OFF * OFF_GRID_S:
            return None
        r = grid_residual_s(t)
        spread = robust_sd(r)
        if not spread <= REGULAR_SD_S:
            return None
        return cls(r, np.abs(r) > OFF_GRID_S, spread, period)

    def widen(self, we: WindowEnergy, ticks_s: np.ndarray, counter_j: np.ndarray, start_s: float, end_s: float):
        """``we`` with the flag and the wider bound where a tick beside an edge is off the grid:
        each such tick's distance taken as one sd of its stamp's error, at the interval's power,
        in the share the interpolation carries to the edge. Returns ``(we, farthest_ms)``
        (``farthest_ms`` NaN where no tick is off)."""
        if not self.any_off or ticks_s.size < 2 or not math.isfinite(we.energy_j):
            return we, math.nan
        off = self.off
        extra2, farthest = 0.0, 0.0
        for t in (start_s, end_s):
            i = interval(ticks_s, t)
            span = float(ticks_s[i + 1] - ticks_s[i])
            if span <= 0:
                continue
            x = float(np.clip((t - ticks_s[i]) / span, 0.0, 1.0))
            power = float(counter_j[i + 1] - counter_j[i]) / span
            for k, share in ((i, 1.0 - x), (i + 1, x)):
                if off[k] and share > 0.0:
                    r = abs(float(self.residual_s[k]))
                    farthest = max(farthest, r)
                    extra2 += (share * power * r) ** 2
        if farthest == 0.0:
            return we, math.nan
        random = math.hypot(we.random_j, Z95 * math.sqrt(extra2)) if math.isfinite(we.random_j) else we.random_j
        flags = we.flags if TICK_OFF_GRID in we.flags else (*we.flags, TICK_OFF_GRID)
        return replace(we, flags=flags, random_j=random), 1e3 * farthest
