"""Counter ticks stamped off the counter's own update grid: a poller that saw a change late.

An energy counter that updates on a clock of its own (NVML's, every ~100 ms on H100/H200) is
stamped midway between the poll that last saw the old value and the first that sees the new one
(``kit/polling.py``). Polled every ~1 ms, those stamps lie on a regular grid: on 15,381 H100 and
2,499 H200 ticks their robust spread about it was 0.4-2.1 ms per run and the farthest lay 11.6 ms
off (docs/validation.md). A poller the host starves of CPU polls late: the change lies anywhere in
the stall, the tick is stamped in its middle, and a window edge interpolated beside it moves by
the power times the error (16 ms at 700 W is 11 J). Nothing else in the record shows it.

So each tick's distance from the grid fitted through its neighbours (robust: median period and
phase) is checked, where enough ticks come at a period long enough that a tick ``OFF_GRID_S``
off is still nearest its own place on the grid:

- on a regular grid (a robust spread of at most ``REGULAR_SD_S``), a tick farther than
  ``WIDEN_S`` counts its distance as one sd of its stamp's error in the bound of a window with
  that tick beside an edge; farther than ``OFF_GRID_S``, the window is also flagged
  ``tick_off_grid``;
- on an irregular one (a poller late at most ticks, or a counter without an update clock of its
  own), every stamp's error is its distance and the spread in quadrature, and every window is
  flagged ``irregular_ticks``.

The energy itself is not moved: the check says that a stamp is off, not by exactly how much.
A window's error term from it is ``edge.errors.grid_error``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: a tick farther than this from the grid was stamped late; above the farthest of 17,880 H100 and
#: H200 ticks polled normally (11.6 ms). Units: s.
OFF_GRID_S = 0.015
#: ticks whose robust spread about their grid is at most this lie on it (per run polled freely,
#: H100: 0.4-1.8 ms, H200: 0.7-2.1 ms); beyond it, no tick's own distance can be told from the
#: rest (a poller late at most ticks, or a counter without an update clock of its own), and the
#: spread joins every stamp's error. Units: s.
REGULAR_SD_S = 0.003
#: ticks either side of a tick that its local grid is fitted through
NEIGHBOURS = 5
#: the fewest ticks the check needs (a run of about a second at 100 ms)
MIN_TICKS = 8
#: a tick ``OFF_GRID_S`` off must stay nearest its own place: the period is at least this many
#: times ``OFF_GRID_S``
MIN_PERIODS_OFF = 2.5
#: on a regular grid, a tick farther than this counts its distance as its stamp's error in the
#: bound (flagged only beyond ``OFF_GRID_S``): the 99th percentile of the ticks' distance from the
#: grid on an H100 polled freely under load steps was 2.9-5.1 ms (docs/validation.md). Units: s.
WIDEN_S = 0.005


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
        spread_s: the ticks' robust sd about the grid. Units: s.
        period_s: the grid's median period. Units: s.
    """

    residual_s: np.ndarray
    spread_s: float
    period_s: float

    @property
    def regular(self) -> bool:
        """Whether the ticks lie on a grid (a spread of at most ``REGULAR_SD_S``): then each
        tick's distance from it is its stamp's error; otherwise the spread is every tick's."""
        return self.spread_s <= REGULAR_SD_S

    @cached_property
    def off(self) -> np.ndarray:
        """Per tick, whether it lies off a regular grid (more than ``OFF_GRID_S``)."""
        return (
            (np.abs(self.residual_s) > OFF_GRID_S) if self.regular else np.zeros(self.residual_s.size, bool)
        )

    @cached_property
    def error_s(self) -> np.ndarray:
        """Per tick, the stamp error its distance from the grid shows beyond what the bound's
        stamp term holds: on a regular grid, the distance where it exceeds ``WIDEN_S`` (else 0);
        on an irregular one, the distance and the spread in quadrature (the grid itself is
        uncertain by about the spread there, and the spread alone missed the stamps that a
        poller stopped on a cycle moves together). Units: s."""
        r = np.abs(self.residual_s)
        if not self.regular:
            return np.hypot(r, self.spread_s)
        return np.where(r > WIDEN_S, r, 0.0)

    @cached_property
    def counts(self) -> bool:
        """Whether any tick's error counts."""
        return bool(self.error_s.any())

    @classmethod
    def check(cls, times_s: np.ndarray) -> TickGrid | None:
        """The grid of a counter's ticks, or ``None`` where the check cannot tell: too few ticks,
        or a period too short to show a tick ``OFF_GRID_S`` off."""
        t = np.asarray(times_s, dtype=float)
        if t.size < MIN_TICKS:
            return None
        period = float(np.median(np.diff(t)))
        if not period > MIN_PERIODS_OFF * OFF_GRID_S:
            return None
        r = grid_residual_s(t)
        return cls(r, robust_sd(r), period)
