"""What a counter's fused power says about each of its tick intervals (``fusion.py``), and the
readings of that power the estimators take: its integral up to an edge, at the interval's own
scale or at the run's gain, a rise and its level in 1-ms bins, the power at a tick, its noise."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..energy import power_energy
from ..fusion import FusionResult
from ..shapes import Signal
from .errors import STAMP_SD_S
from .place import interval

#: how far a step the samples show may still be misplaced inside a tick interval, 1 sigma: the
#: 20-ms samples' stamp jitter and the offset between them and the counter. Units: s.
PLACEMENT_SD_S = 0.0001
#: the share of an interval's unexplained mismatch, per watt of step, that lands at an edge: the
#: interval's own scale takes the rest back (calibrated on the step simulation, tests/core/test_edges.py)
PLACEMENT_SHARE = 0.6
#: the fused power is read in bins this long to find a rise (``Evidence.rise_near``). Units: s.
RISE_BIN_S = 0.001


@dataclass(frozen=True)
class Evidence:
    """What a fused counter says about every tick interval, for choosing and bounding edges.

    Args:
        fusion: the fused power and its per-interval mismatch (``fusion.fuse``).
        jump_w: per tick interval, the range of the fused power inside it (a step's size).
        placement_sd_s: how far the samples place a step from where the counter says it is,
            1 sigma: from the run's mismatches beyond what the tick stamps explain, per watt
            of step (``PLACEMENT_SD_S`` at least). Units: s.
        stamp_sd_s: the counter's tick stamps' standard deviation (``errors.stamp_sd_s``). Units: s.
    """

    fusion: FusionResult
    jump_w: np.ndarray
    placement_sd_s: float
    stamp_sd_s: float = STAMP_SD_S

    @classmethod
    def of(cls, fusion: FusionResult, stamp_sd_s: float = STAMP_SD_S) -> Evidence:
        ticks, series = fusion.ticks_s, fusion.series
        n = max(ticks.size - 1, 0)
        jump = np.zeros(n)
        if n and len(series):
            lo = np.searchsorted(series.times_s, ticks[:-1], side="left")
            hi = np.searchsorted(series.times_s, ticks[1:], side="right")
            for i in np.flatnonzero(hi - lo > 1):  # only ticks where the series has knots
                inside = series.values[lo[i] : hi[i]]
                jump[i] = float(np.nanmax(inside) - np.nanmin(inside))
        mismatch = fusion.mismatch_j[:n]
        shaped = np.isfinite(mismatch)
        placement = PLACEMENT_SD_S
        if np.any(shaped) and len(series):
            p = np.interp(ticks, series.times_s, series.values)
            stamp2 = stamp_sd_s**2 * (p[:-1] ** 2 + p[1:] ** 2)
            # how far the shapes missed the counter beyond what the stamps explain, per watt of
            # step, over every shaped interval (summed before the root: not biased upwards)
            excess = float((mismatch[shaped] ** 2 - stamp2[shaped]).sum())
            steps = float((jump[shaped] ** 2).sum())
            if steps > 0 and excess > 0:
                placement = max(placement, PLACEMENT_SHARE * math.sqrt(excess / steps))
        return cls(fusion, jump, placement, stamp_sd_s)

    def covers(self, start_s: float, end_s: float) -> bool:
        """Whether the fused power spans ``[start_s, end_s]`` (it runs from the first tick to the
        last)."""
        ticks = self.fusion.ticks_s
        return ticks.size >= 2 and not (start_s < ticks[0] or end_s > ticks[-1])

    def mismatch_j(self, index: int) -> float:
        """How far the shape missed the counter in tick interval ``index`` (NaN where no series
        shaped it). Units: J."""
        mismatch = self.fusion.mismatch_j
        return float(mismatch[index]) if index < mismatch.size else math.nan

    def power_w(self, t: float) -> float:
        """The fused power at ``t`` (at a tick: a tick's stamp error moves the energy by the power
        there, whichever estimator reads the interval). Units: W."""
        series = self.fusion.series
        return float(np.interp(t, series.times_s, series.values))

    def share_j(self, t0: float, t: float) -> float:
        """The fused power's integral over [t0, t] (power knots at every tick). Units: J."""
        series = self.fusion.series
        return power_energy(series.times_s, series.values, t0, t).energy_j if t > t0 else 0.0

    def level_share_j(self, t0: float, t: float) -> float:
        """The fused power's integral over [t0, t] at the run's gain: each tick interval's own
        scale taken out (``FusionResult.scale``), so that the counter's disagreement with the
        shape in an interval does not move energy into the part before a rise. Units: J."""
        result = self.fusion
        ticks = result.ticks_s
        if not t > t0:
            return 0.0
        total = 0.0
        for j in range(interval(ticks, t0), interval(ticks, t) + 1):
            a, b = max(t0, float(ticks[j])), min(t, float(ticks[j + 1]))
            if b > a:
                own = float(result.scale[j]) if j < result.scale.size else 1.0
                total += self.share_j(a, b) / own
        return total

    def noise_j(self, x: float) -> float:
        """What |D| at an edge at fraction ``x`` of its interval reaches from the samples' noise
        alone: the run's typical disagreement of shape and counter per interval, split at x.
        Units: J."""
        residual = self.fusion.residual_j
        if not math.isfinite(residual):
            residual = 0.0
        return residual * math.sqrt(x * (1.0 - x))

    def rise_near(self, t: float, reach_s: float) -> tuple[float, float, float]:
        """The rise of the fused power around ``t``, read as mean power over ``RISE_BIN_S`` bins
        (a zero-width knot carries no energy and is no level): from the first bin at
        ``t - reach_s`` to the highest bin within ``reach_s`` of ``t``. Returns where the bins
        first reach halfway up (NaN where they do not rise), the rise's size, and the highest
        level. Units: s, W, W."""
        edges = t - reach_s + RISE_BIN_S * np.arange(int(round(2 * reach_s / RISE_BIN_S)) + 1)
        level = self.levels(edges)
        if level is None:
            return math.nan, 0.0, math.nan
        base, top = float(level[0]), float(np.max(level))
        rise = top - base
        if not rise > 0:
            return math.nan, 0.0, top
        k = int(np.argmax(level >= base + rise / 2))  # the first bin at or above halfway
        return float(edges[k]), rise, top

    def settled(self, t0: float, t: float, within_w: float) -> bool:
        """Whether the fused power over [t0, t] stays within ``within_w``, read in ``RISE_BIN_S``
        bins (where the series does not reach back that far, what it covers is judged)."""
        series = self.fusion.series
        t0 = max(t0, float(series.times_s[0])) if len(series) else t0
        if not t - t0 >= 2 * RISE_BIN_S:
            return True
        level = self.levels(t0 + RISE_BIN_S * np.arange(int((t - t0) / RISE_BIN_S) + 1))
        return level is None or bool(np.ptp(level) <= within_w)

    def levels(self, edges: np.ndarray) -> np.ndarray | None:
        """The fused power's mean in the ``RISE_BIN_S`` bins between consecutive ``edges`` (a
        zero-width knot carries no energy and is no level); ``None`` where the series does not
        cover them. Units: W."""
        series = self.fusion.series
        # only the knots around the edges: a run of hours has millions
        lo = max(int(np.searchsorted(series.times_s, edges[0], side="left")) - 1, 0)
        hi = int(np.searchsorted(series.times_s, edges[-1], side="right")) + 1
        times, values = series.times_s[lo:hi], series.values[lo:hi]
        if times.size < 2 or edges[0] < times[0] or edges[-1] > times[-1]:
            return None
        return Signal(times, values).between(edges[:-1], edges[1:]) / RISE_BIN_S
