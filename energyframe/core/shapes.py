"""Power series as signals between counter ticks: how their samples are read, which stretches
they cover, and how far their timestamps are from the counter's.

A series' samples are read either as the power at each sample's time, joined linearly
(``point``, how ``energy.power_energy`` reads every power channel), or as the mean power since
the previous sample (``period``): a sample whose value lies between its neighbours' is then a
step from the one level to the other, placed so that the sample's mean is kept, which places a
clean step inside one sample exactly. ``estimate_offset`` finds the shift of a series that best
explains a counter's increments; ``energyframe.core.fusion`` builds on both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..model import READINGS

#: the residual offset searched between a shape series and the counter. Units: s.
MAX_OFFSET_S = 0.05
#: step of the offset search (refined by a parabola around the best step). Units: s.
OFFSET_STEP_S = 0.001
#: the offset is applied only where the worst residual of the search is at least this many
#: times the best one; a load without changes has no clear minimum, and its timestamps are
#: then used as they are
MIN_OFFSET_CONTRAST = 2.0
#: fewest tick intervals an offset is estimated from
MIN_OFFSET_INTERVALS = 10
#: most tick intervals an offset is estimated from (10 minutes of 100-ms ticks): a longer run
#: uses those where the load changed most, which carry the offset; steady ones only add cost
MAX_OFFSET_INTERVALS = 6000
#: samples further apart than this many periods do not cover the interval between them
GAP_PERIODS = 3.0

#: a series whose samples at steps lie between the levels on either side this often reads as
#: means (a step inside a sample's period shows as a value between the two levels)
MEANS_AT_STEPS = 0.5
#: a step, for ``means_at_steps``: the levels around a sample differ by this share of the higher
STEP_SHARE = 0.3


@dataclass(frozen=True)
class ShapeSeries:
    """Power samples that give the shape of the power between counter ticks.

    Args:
        name: the channel it comes from (for the report).
        times_s: sample times on the counter's timeline. Units: s.
        power_w: the power at each time. Units: W.
        period_s: the nominal spacing of the samples; wider gaps are not trusted. Units: s.
        reading: ``point`` (power at the sample's time) or ``period`` (mean power since the
            previous sample); see ``READINGS``.
    """

    name: str
    times_s: np.ndarray
    power_w: np.ndarray
    period_s: float
    reading: str = "point"

    def __post_init__(self) -> None:
        if self.reading not in READINGS:
            raise ValueError(
                f"unknown reading {self.reading!r} for {self.name!r}; valid: {', '.join(READINGS)}"
            )
        if not self.period_s > 0:
            raise ValueError(f"period_s of {self.name!r} must be positive, not {self.period_s!r}")


@dataclass(frozen=True)
class OffsetEstimate:
    """How a shape series' timestamps relate to the counter's. Units: s, J.

    Args:
        name: the shape series.
        offset_s: how late the series' timestamps are against the counter's (positive: the
            series says a change happened later than the counter does): the best match.
        applied: whether ``offset_s`` was subtracted from the series' times before fusing.
        gain: the counter's energy over the series' integral, over all matched tick intervals
            at the best offset: the series' calibration against the counter.
        residual_j: RMS of the counter's increment minus the scaled series' integral per tick
            interval, at the best offset.
        residual_at_zero_j: the same at offset 0.
        intervals: tick intervals the estimate used.
        reason: why the offset was not applied (empty when it was).
    """

    name: str
    offset_s: float
    applied: bool
    gain: float
    residual_j: float
    residual_at_zero_j: float
    intervals: int
    reason: str = ""

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "offset_s": self.offset_s,
            "applied": self.applied,
            "gain": self.gain,
            "residual_j": self.residual_j,
            "residual_at_zero_j": self.residual_at_zero_j,
            "intervals": self.intervals,
            "reason": self.reason,
        }


# -- a series as a signal ---------------------------------------------------------------------


class Signal:
    """The piecewise-linear signal through knots (t, v) and its running integral; two knots at
    one time are a step."""

    def __init__(self, t: np.ndarray, v: np.ndarray) -> None:
        self.t = t
        self.v = v
        self.cum = np.concatenate(([0.0], np.cumsum(np.diff(t) * (v[1:] + v[:-1]) / 2)))

    def _on_segment(self, j: np.ndarray, x: np.ndarray) -> np.ndarray:
        t, v = self.t, self.v
        j = np.clip(j, 0, t.size - 2)
        dt = t[j + 1] - t[j]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(dt > 0, (x - t[j]) / dt, 0.0)
        return v[j] + frac * (v[j + 1] - v[j])

    def value_after(self, x: np.ndarray) -> np.ndarray:
        """The value just after ``x`` (the later side of a step at ``x``)."""
        return self._on_segment(np.searchsorted(self.t, x, side="right") - 1, x)

    def value_before(self, x: np.ndarray) -> np.ndarray:
        """The value just before ``x`` (the earlier side of a step at ``x``)."""
        return self._on_segment(np.searchsorted(self.t, x, side="left") - 1, x)

    def integral_to(self, x: np.ndarray) -> np.ndarray:
        """Integral from the first knot to ``x`` (``x`` within the knots)."""
        j = np.clip(np.searchsorted(self.t, x, side="right") - 1, 0, self.t.size - 2)
        return self.cum[j] + (x - self.t[j]) * (self.v[j] + self._on_segment(j, x)) / 2

    def between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.integral_to(b) - self.integral_to(a)


def samples_of(shape: ShapeSeries, origin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Finite samples, ascending, relative to ``origin_s``, negative power clipped to zero."""
    t = np.asarray(shape.times_s, dtype=float)
    p = np.asarray(shape.power_w, dtype=float)
    ok = np.isfinite(t) & np.isfinite(p)
    t, p = t[ok] - origin_s, np.maximum(p[ok], 0.0)
    order = np.argsort(t, kind="stable")
    return t[order], p[order]


def knots(u: np.ndarray, p: np.ndarray, period_s: float, reading: str) -> tuple[np.ndarray, np.ndarray]:
    """The knots of the signal a series stands for under ``reading``."""
    if reading == "point" or u.size < 3:
        return u, p
    joined = np.diff(u) <= GAP_PERIODS * period_s  # sample j + 1 follows sample j without a gap
    start = u - period_s
    start[1:] = np.where(joined, u[:-1], start[1:])
    before = np.concatenate(([np.nan], np.where(joined, p[:-1], np.nan)))
    after = np.concatenate((np.where(joined, p[1:], np.nan), [np.nan]))
    between = (p > np.fmin(before, after)) & (p < np.fmax(before, after))  # False where NaN
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        x = np.where(between, (p - after) / (before - after), 0.0)  # share of the period at `before`
    at = start + x * (u - start)
    first = np.where(between, before, p)
    last = np.where(between, after, p)
    t = np.column_stack((start, at, at, u)).ravel()
    v = np.column_stack((first, first, last, last)).ravel()
    return t, v


def means_at_steps(u: np.ndarray, p: np.ndarray, period_s: float) -> float:
    """Of the samples between two neighbours on different levels (a step around it), the share
    that lies between them by more than a tenth of the step: ~1 for means over the whole period
    (a step inside a sample's period gives a value between the levels), ~ the rise time over the
    period for instant readings. NaN without steps."""
    if u.size < 3:
        return math.nan
    joined = (np.diff(u) <= GAP_PERIODS * period_s)[:-1] & (np.diff(u) <= GAP_PERIODS * period_s)[1:]
    before, here, after = p[:-2], p[1:-1], p[2:]
    step = np.abs(after - before)
    top = np.maximum(np.maximum(before, after), 1e-9)
    at_step = joined & (step >= STEP_SHARE * top)
    if not np.any(at_step):
        return math.nan
    low, high = np.minimum(before, after), np.maximum(before, after)
    margin = 0.1 * step
    between = (here > low + margin) & (here < high - margin)
    return float(np.count_nonzero(between & at_step) / np.count_nonzero(at_step))


def covered(u: np.ndarray, period_s: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether samples at ``u`` reach both ends of each ``[a, b]`` without a gap inside."""
    if u.size < 2:
        return np.zeros(a.size, dtype=bool)
    lo = np.searchsorted(u, a, side="right") - 1
    hi = np.searchsorted(u, b, side="left")
    inside = (lo >= 0) & (hi < u.size)
    gaps = np.concatenate(([0], np.cumsum(np.diff(u) > GAP_PERIODS * period_s)))
    lo_c, hi_c = np.clip(lo, 0, u.size - 1), np.clip(hi, 0, u.size - 1)
    return inside & (gaps[hi_c] == gaps[lo_c])


# -- the residual offset ---------------------------------------------------------------------


def _most_changing(
    a: np.ndarray, b: np.ndarray, e: np.ndarray, keep: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``keep`` intervals whose mean power differs most from their neighbours', in order."""
    power = e / (b - a)
    change = np.zeros(power.size)
    step = np.abs(np.diff(power))
    change[:-1] += step
    change[1:] += step
    chosen = np.sort(np.argsort(-change, kind="stable")[:keep])
    return a[chosen], b[chosen], e[chosen]


def estimate_offset(
    ticks_s: np.ndarray,
    increments_j: np.ndarray,
    shape: ShapeSeries,
    origin_s: float = 0.0,
    max_offset_s: float = MAX_OFFSET_S,
    step_s: float = OFFSET_STEP_S,
) -> OffsetEstimate:
    """The shift of ``shape`` that best explains the counter's increments.

    For each candidate offset d, the series (read as ``shape.reading`` says, times minus d) is
    integrated over every tick interval it covers with a margin of ``max_offset_s``; the best
    gain g is fitted and the residual sum of (increment - g * integral)^2 kept. The offset with
    the least residual wins, refined by a parabola through its neighbours.

    Args:
        ticks_s: tick times relative to ``origin_s``, ascending (n). Units: s.
        increments_j: the counter's increment over each tick interval (n - 1); NaN for
            intervals to leave out. Units: J.
        shape: the series to place.
        origin_s: subtracted from the series' times so that both share ``ticks_s``'s origin.
        max_offset_s: the search range, ± this. Units: s.
        step_s: the search step. Units: s.
    """
    u, p = samples_of(shape, origin_s)
    a, b = ticks_s[:-1], ticks_s[1:]
    use = np.isfinite(increments_j) & covered(u, shape.period_s, a - max_offset_s, b + max_offset_s)
    n = int(np.count_nonzero(use))
    nan = math.nan
    if n < MIN_OFFSET_INTERVALS:
        return OffsetEstimate(
            shape.name,
            offset_s=0.0,
            applied=False,
            gain=nan,
            residual_j=nan,
            residual_at_zero_j=nan,
            intervals=n,
            reason=f"only {n} tick intervals covered",
        )
    signal = Signal(*knots(u, p, shape.period_s, shape.reading))
    a, b, e = a[use], b[use], increments_j[use]
    if n > MAX_OFFSET_INTERVALS:
        a, b, e = _most_changing(a, b, e, MAX_OFFSET_INTERVALS)
        n = MAX_OFFSET_INTERVALS
    steps = int(round(max_offset_s / step_s))
    grid = np.arange(-steps, steps + 1) * step_s
    energy2 = float(np.dot(e, e))
    residual = np.empty(grid.size)
    for k, d in enumerate(grid):
        s = signal.between(a + d, b + d)
        ss = float(np.dot(s, s))
        residual[k] = energy2 - float(np.dot(e, s)) ** 2 / ss if ss > 0 else energy2
    residual = np.maximum(residual, 0.0)
    best = int(np.argmin(residual))
    offset = _refined(grid, residual, best, step_s)
    s = signal.between(a + offset, b + offset)
    ss = float(np.dot(s, s))
    gain = float(np.dot(e, s)) / ss if ss > 0 else nan
    rms_best = math.sqrt(float(np.mean((e - gain * s) ** 2))) if ss > 0 else nan
    rms_zero = math.sqrt(residual[steps] / n)
    reason = _unclear(residual, best, energy2, max_offset_s)
    return OffsetEstimate(
        shape.name,
        offset_s=offset,
        applied=not reason,
        gain=gain,
        residual_j=rms_best,
        residual_at_zero_j=rms_zero,
        intervals=n,
        reason=reason,
    )


def _refined(grid: np.ndarray, residual: np.ndarray, best: int, step_s: float) -> float:
    """The offset at the search's ``best`` step, refined by a parabola through its neighbours
    (where it has two and they curve upwards). Units: s."""
    offset = float(grid[best])
    if 0 < best < grid.size - 1:
        r0, r1, r2 = residual[best - 1], residual[best], residual[best + 1]
        curvature = r0 - 2 * r1 + r2
        if curvature > 0:
            offset += float(np.clip(0.5 * (r0 - r2) / curvature, -0.5, 0.5)) * step_s
    return offset


def _unclear(residual: np.ndarray, best: int, energy2: float, max_offset_s: float) -> str:
    """Why the best offset of the search is not to be applied (empty where it is): no clear
    minimum, or one at the edge of the search."""
    if residual.max() < MIN_OFFSET_CONTRAST * max(residual[best], 1e-12 * energy2):
        return "no clear best offset (no load changes to match)"
    if best in (0, residual.size - 1):
        return f"the best match lies at the edge of the search (±{max_offset_s * 1e3:.0f} ms)"
    return ""
