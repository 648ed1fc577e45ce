"""The error terms of a counter window's energy: each tick's stamp, where its edges lie between
the ticks (``STAMP_S``), and, where the counter's ticks show it, a stamp off the counter's update
grid (``tickgrid.py``); combined into the window's random bound (``uncertainty.py`` holds the
systematic part and the phase's bound)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...model import Channel
from ..stats import Z95
from ..tickgrid import TickGrid
from ..vocabulary import IRREGULAR_TICKS, TICK_OFF_GRID, TICK_OFF_GRID_COLUMN, TICK_SPREAD_COLUMN
from .place import EdgePlace

#: a tick is stamped within ± this of the counter's change: the poller stamps a change midway
#: between the starts of two reads ~4 ms apart (a read of NVML's counter takes ~3-4 ms and reads
#: as it begins; benchmarks/tick_stamps.py). The least half-width the bound takes; a source
#: that measured wider brackets says so (``Channel.stamp_s``). Units: s.
STAMP_S = 0.002
#: standard deviation of a stamp error uniform within ±STAMP_S. Units: s.
STAMP_SD_S = STAMP_S / math.sqrt(3.0)


def stamp_sd_s(channel: Channel) -> float:
    """The standard deviation of ``channel``'s tick stamps: uniform within ± the half-width its
    source measured (``Channel.stamp_s``), ±``STAMP_S`` at least. Units: s."""
    return max(STAMP_S, channel.stamp_s) / math.sqrt(3.0)


def stamps_sd(x: float, p0_w: float, p1_w: float, sd_s: float = STAMP_SD_S) -> float:
    """The energy error at an edge from the two ticks' stamps (each ``sd_s``): the share of each
    tick's error that the estimator carries to the edge (``x`` of the later tick's), at the
    power around that tick. Units: J."""
    return sd_s * math.hypot((1.0 - x) * p0_w, x * p1_w)


@dataclass(frozen=True, kw_only=True)
class GridError:
    """The stamps' errors a counter's update grid shows at the ticks beside a window's edges.

    Args:
        variance_j2: their sum, each tick's error (``TickGrid.error_s``) taken as one sd, at its
            interval's power, in the share the interpolation carries to the edge. Units: J².
        flags: ``tick_off_grid`` where a tick lies more than ``OFF_GRID_S`` off a regular grid,
            ``irregular_ticks`` on an irregular grid.
        columns: the farthest such tick (``TICK_OFF_GRID_COLUMN``, ms), or the irregular grid's
            spread (``TICK_SPREAD_COLUMN``, ms).
    """

    variance_j2: float
    flags: tuple[str, ...] = ()
    columns: dict[str, float] = field(default_factory=dict)


def grid_error(grid: TickGrid, places: Sequence[EdgePlace]) -> GridError | None:
    """The stamps' errors ``grid`` shows at the four ticks beside a window's edges (``places``:
    its start, then its end); ``None`` where none counts."""
    if not grid.counts:
        return None
    variance, farthest = 0.0, 0.0
    for edge in places:
        span = edge.span_s
        if span <= 0:
            continue
        power = edge.increment_j / span
        for k, share in ((edge.index, 1.0 - edge.x), (edge.index + 1, edge.x)):
            if share > 0.0:
                variance += (share * power * float(grid.error_s[k])) ** 2
                if grid.off[k]:
                    farthest = max(farthest, abs(float(grid.residual_s[k])))
    if variance == 0.0:
        return None
    if not grid.regular:
        return GridError(variance_j2=variance, flags=(IRREGULAR_TICKS,), columns={TICK_SPREAD_COLUMN: 1e3 * grid.spread_s})
    if farthest > 0.0:
        return GridError(variance_j2=variance, flags=(TICK_OFF_GRID,), columns={TICK_OFF_GRID_COLUMN: 1e3 * farthest})
    return GridError(variance_j2=variance)


def window_random_j(start_sd_j: float, end_sd_j: float) -> float:
    """A counter window's random bound (95 %) from its two edges' errors (1 sd each, independent).
    Units: J."""
    return Z95 * math.hypot(start_sd_j, end_sd_j)


def with_grid_j(random_j: float, grid: GridError | None) -> float:
    """``random_j`` (a 95 % bound) with the stamps' errors the counter's grid shows (``grid_error``)
    in quadrature. Units: J."""
    if grid is None or not math.isfinite(random_j):
        return random_j
    return math.hypot(random_j, Z95 * math.sqrt(grid.variance_j2))
