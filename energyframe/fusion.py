"""Fused GPU power: the energy from the counter, the shape from the fine power samples.

NVML's energy counter is exact between its ticks (~100 ms apart) but says nothing about how the
energy is spread inside a tick interval: interpolated linearly, it turns a load step into a ramp
across the whole interval and misplaces up to a quarter of the step's energy over that interval
at a window edge. The driver's 20-ms power samples see where the step is, but they are stamped
on another clock and their integral need not equal the counter's.

``fuse`` builds one power series out of both:

1. **Offset.** Each shape series (the finest first: the 20-ms buffer, then instant power) is
   shifted by a residual time offset against the counter, found by matching the series'
   integral over every tick interval to the counter's increment (a cross-correlation in the
   integral domain), searched within ``±max_offset_s`` and applied only when the match has a
   clear minimum (``MIN_OFFSET_CONTRAST``).
2. **Reading.** A series is read either as the power at each sample's time, joined linearly
   (``point``, how ``energy.power_energy`` reads every power channel), or as the mean power
   since the previous sample (``period``), where a sample whose value lies between its
   neighbours' is taken as a step between them placed so that the sample's mean is kept: a
   clean load step inside one 20-ms sample is then placed exactly.
3. **Local shift.** Inside each tick interval the series may move by up to ``max_shift_periods``
   of its own sample period, the least that makes its integral agree with the counter's
   increment within the series' typical mismatch: 20-ms samples cannot say where within 20 ms
   a step happened, the counter's increment can.
4. **Scale.** The (shifted) series is scaled by one factor per tick interval so that its
   integral over the interval equals the counter's increment exactly.

Intervals that no series covers without a gap, where the scale would be implausible
(``MAX_SCALE``), or where the series integrates to zero, get the counter's mean power (what
linear interpolation of the counter gives). An interval across a counter reset gets NaN power,
so that a window touching it has NaN energy instead of a wrong number; a missing (NaN) counter
value is dropped, since the increment across it is still known.

The result is a ``SampleSeries`` of power from the first tick to the last (two samples at a
tick time describe the step between two intervals' scales), so ``energy.power_energy``
integrates windows over it: a window whose edges are ticks gets exactly the counter's energy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .interfaces import Channel, ClockBase, Quantity
from .samples import SampleSeries

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
#: a series scaled by more than this factor away from its overall gain, either way, is not
#: trusted in that interval (the counter's mean power is used instead)
MAX_SCALE = 3.0
#: samples further apart than this many periods do not cover the interval between them
GAP_PERIODS = 3.0
#: the local shift inside a tick interval, at most this many of the series' sample periods
MAX_SHIFT_PERIODS = 0.5
#: the local shift is searched on this many steps each way
SHIFT_STEPS = 20

#: how a series' samples are read (see the module docstring)
READINGS = ("point", "period")


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
            raise ValueError(f"unknown reading {self.reading!r} for {self.name!r}; valid: {', '.join(READINGS)}")
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


@dataclass(frozen=True)
class FusionResult:
    """The fused power series and how it was made.

    Args:
        series: power on the counter's timeline, from its first tick to its last. Units: s, W.
        offsets: one estimate per shape series, in the order given.
        intervals: tick intervals in the counter.
        shaped: tick intervals shaped by each series (by name).
        shifted: of those, intervals where the series was shifted locally (by name).
        flat: tick intervals with the counter's mean power (no usable shape).
        unknown: tick intervals with NaN power (across a counter reset).
    """

    series: SampleSeries
    offsets: tuple[OffsetEstimate, ...]
    intervals: int
    shaped: Mapping[str, int] = field(default_factory=dict)
    shifted: Mapping[str, int] = field(default_factory=dict)
    flat: int = 0
    unknown: int = 0

    def to_json(self) -> dict:
        return {
            "offsets": [o.to_json() for o in self.offsets],
            "intervals": self.intervals,
            "shaped": dict(self.shaped),
            "shifted": dict(self.shifted),
            "flat": self.flat,
            "unknown": self.unknown,
        }


# -- a series as a signal ---------------------------------------------------------------------


class _Signal:
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


def _samples(shape: ShapeSeries, origin_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Finite samples, ascending, relative to ``origin_s``, negative power clipped to zero."""
    t = np.asarray(shape.times_s, dtype=float)
    p = np.asarray(shape.power_w, dtype=float)
    ok = np.isfinite(t) & np.isfinite(p)
    t, p = t[ok] - origin_s, np.maximum(p[ok], 0.0)
    order = np.argsort(t, kind="stable")
    return t[order], p[order]


def _knots(u: np.ndarray, p: np.ndarray, period_s: float, reading: str) -> tuple[np.ndarray, np.ndarray]:
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


def _covered(u: np.ndarray, period_s: float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
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
    u, p = _samples(shape, origin_s)
    a, b = ticks_s[:-1], ticks_s[1:]
    use = np.isfinite(increments_j) & _covered(u, shape.period_s, a - max_offset_s, b + max_offset_s)
    n = int(np.count_nonzero(use))
    nan = math.nan
    if n < MIN_OFFSET_INTERVALS:
        return OffsetEstimate(shape.name, 0.0, False, nan, nan, nan, n, f"only {n} tick intervals covered")
    signal = _Signal(*_knots(u, p, shape.period_s, shape.reading))
    a, b, e = a[use], b[use], increments_j[use]
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
    offset = float(grid[best])
    if 0 < best < grid.size - 1:
        r0, r1, r2 = residual[best - 1], residual[best], residual[best + 1]
        curvature = r0 - 2 * r1 + r2
        if curvature > 0:
            offset += float(np.clip(0.5 * (r0 - r2) / curvature, -0.5, 0.5)) * step_s
    s = signal.between(a + offset, b + offset)
    ss = float(np.dot(s, s))
    gain = float(np.dot(e, s)) / ss if ss > 0 else nan
    rms_best = math.sqrt(float(np.mean((e - gain * s) ** 2))) if ss > 0 else nan
    rms_zero = math.sqrt(residual[steps] / n)
    reason = ""
    if residual.max() < MIN_OFFSET_CONTRAST * max(residual[best], 1e-12 * energy2):
        reason = "no clear best offset (no load changes to match)"
    elif best in (0, grid.size - 1):
        reason = f"the best match lies at the edge of the search (±{max_offset_s * 1e3:.0f} ms)"
    return OffsetEstimate(shape.name, offset, not reason, gain, rms_best, rms_zero, n, reason)


# -- fusion ----------------------------------------------------------------------------------


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``range(lo[i], hi[i])`` and, for each element, its ``i``."""
    counts = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(lo.size), counts)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.arange(int(counts.sum())) + starts, owner


def _local_shifts(
    signal: _Signal, a: np.ndarray, b: np.ndarray, e: np.ndarray, gain: float, noise_j: float, reach_s: float
) -> np.ndarray:
    """Per interval, the least shift d (the series read at t + d) within ``±reach_s`` whose
    scaled integral matches ``e`` within ``noise_j`` (or as well as any shift does)."""
    grid = np.linspace(-reach_s, reach_s, 2 * SHIFT_STEPS + 1)
    mismatch = np.abs(gain * np.stack([signal.between(a + d, b + d) for d in grid]) - e)
    enough = np.maximum(mismatch.min(axis=0), noise_j) * (1 + 1e-9)
    distance = np.where(mismatch <= enough, np.abs(grid)[:, None], np.inf)
    d = grid[np.argmin(distance, axis=0)]
    return np.where(mismatch[SHIFT_STEPS] <= max(noise_j, 0.0), 0.0, d)


def fuse(
    ticks_s: np.ndarray,
    counter_j: np.ndarray,
    shapes: Sequence[ShapeSeries],
    estimate_offsets: bool = True,
    max_offset_s: float = MAX_OFFSET_S,
    max_shift_periods: float = MAX_SHIFT_PERIODS,
    max_scale: float = MAX_SCALE,
) -> FusionResult:
    """Power whose integral between consecutive ticks is the counter's increment, shaped by the
    first series that covers each tick interval.

    Args:
        ticks_s: the counter's tick times. Units: s.
        counter_j: the counter at each tick (cumulative; a decrease is a reset). Units: J.
        shapes: power series in order of preference, the finest first.
        estimate_offsets: estimate each series' residual offset, and apply it when clear.
        max_offset_s: the offset search range, ± this. Units: s.
        max_shift_periods: the local shift inside a tick interval, at most this many of the
            series' sample periods (0: no local shift).
        max_scale: a series whose scale in an interval is off its overall gain by more than
            this factor (either way) is not used in that interval.

    Returns:
        A ``FusionResult`` whose ``series`` spans the first tick to the last.
    """
    t = np.asarray(ticks_s, dtype=float)
    e = np.asarray(counter_j, dtype=float)
    ok = np.isfinite(t) & np.isfinite(e)
    t, e = t[ok], e[ok]
    order = np.argsort(t, kind="stable")
    t, e = t[order], e[order]
    if t.size:
        keep = np.concatenate(([True], np.diff(t) > 0))
        t, e = t[keep], e[keep]
    names = [s.name for s in shapes]
    if t.size < 2:
        empty = SampleSeries(np.zeros(0), np.zeros(0))
        return FusionResult(empty, (), 0, {n: 0 for n in names}, {n: 0 for n in names})
    origin = float(t[0])
    rel = t - origin
    increments = np.diff(e)
    valid = increments >= 0  # a decrease is a reset: the energy across it is unknown
    a, b = rel[:-1], rel[1:]
    n = a.size

    mode = np.full(n, -1)  # -1: the counter's mean power; k: shaped by shapes[k]
    scale = np.zeros(n)
    shift = np.zeros(n)
    signals: list[_Signal | None] = []
    offsets: list[OffsetEstimate] = []
    for k, shape in enumerate(shapes):
        if estimate_offsets:
            est = estimate_offset(rel, np.where(valid, increments, np.nan), shape, origin, max_offset_s)
        else:
            est = OffsetEstimate(shape.name, 0.0, False, math.nan, math.nan, math.nan, 0, "not estimated")
        offsets.append(est)
        u, p = _samples(shape, origin)
        if est.applied:
            u = u - est.offset_s
        if u.size < 2:
            signals.append(None)
            continue
        signal = _Signal(*_knots(u, p, shape.period_s, shape.reading))
        signals.append(signal)
        todo = np.flatnonzero((mode == -1) & valid & _covered(u, shape.period_s, a, b))
        if todo.size == 0:
            continue
        ai, bi, ei = a[todo], b[todo], increments[todo]
        gain = est.gain if est.applied and est.gain > 0 else None
        if gain is None:
            s0 = signal.between(ai, bi)
            gain = float(ei[s0 > 0].sum() / s0[s0 > 0].sum()) if np.any(s0 > 0) else math.nan
        d = np.zeros(todo.size)
        reach = max_shift_periods * shape.period_s
        if reach > 0 and np.isfinite(gain) and gain > 0:
            room = _covered(u, shape.period_s, ai - reach, bi + reach)
            noise = est.residual_j if math.isfinite(est.residual_j) else 0.0
            d[room] = _local_shifts(signal, ai[room], bi[room], ei[room], gain, noise, reach)
        s = signal.between(ai + d, bi + d)
        with np.errstate(invalid="ignore", divide="ignore"):
            k_i = np.where(s > 0, ei / s, np.nan)
        usable = np.isfinite(k_i)
        if np.isfinite(gain) and gain > 0:
            usable &= (k_i <= gain * max_scale) & (k_i >= gain / max_scale)
        chosen = todo[usable]
        mode[chosen] = k
        scale[chosen] = k_i[usable]
        shift[chosen] = d[usable]

    # knots: each interval's two ends, and the knots of its series strictly inside it
    flat = np.where(valid, increments / (b - a), np.nan)
    parts = []  # (interval, rank: 0 start / 1 inside / 2 end, time, power)
    for rank, x in ((0, a), (2, b)):
        v = flat.copy()
        for k, signal in enumerate(signals):
            sel = mode == k
            if signal is not None and np.any(sel):
                # at a step exactly on a tick, each interval takes its own side of it
                value = signal.value_after if rank == 0 else signal.value_before
                v[sel] = scale[sel] * value(x[sel] + shift[sel])
        parts.append((np.arange(n), np.full(n, rank), x, v))
    for k, signal in enumerate(signals):
        mine = np.flatnonzero(mode == k)
        if signal is None or mine.size == 0:
            continue
        lo = np.searchsorted(signal.t, a[mine] + shift[mine], side="right")
        hi = np.searchsorted(signal.t, b[mine] + shift[mine], side="left")
        knot, owner = _ranges(lo, hi)
        interval = mine[owner]
        parts.append(
            (interval, np.ones(knot.size, dtype=int), signal.t[knot] - shift[interval], scale[interval] * signal.v[knot])
        )
    ids, ranks, times, values = (np.concatenate(c) for c in zip(*parts))
    # a step inside a series is two knots at one time: keep their order
    order = np.lexsort((np.arange(ids.size), times, ranks, ids))
    ids, ranks, times, values = ids[order], ranks[order], times[order], values[order]
    # back on the caller's timeline: the ticks' own times (adding the origin back could move them
    # by a rounding step on Unix seconds), and the knots inside an interval kept inside it
    absolute = np.clip(times + origin, t[ids], t[ids + 1])
    absolute[ranks == 0] = t[ids[ranks == 0]]
    absolute[ranks == 2] = t[ids[ranks == 2] + 1]
    # rounding moved the inner knots a little: rescale each interval once more, on the caller's
    # timeline, so that its trapezoids there add up to the increment
    same = ids[1:] == ids[:-1]
    areas = np.where(same, np.diff(absolute) * (values[1:] + values[:-1]) / 2, 0.0)
    area = np.bincount(ids[:-1], weights=areas, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        fix = np.where(valid & (area > 0), increments / area, 1.0)
    series = SampleSeries(absolute, values * fix[ids])
    return FusionResult(
        series,
        tuple(offsets),
        n,
        {name: int(np.count_nonzero(mode == k)) for k, name in enumerate(names)},
        {name: int(np.count_nonzero((mode == k) & (shift != 0))) for k, name in enumerate(names)},
        flat=int(np.count_nonzero((mode == -1) & valid)),
        unknown=int(np.count_nonzero(~valid)),
    )


# -- the run's hook ----------------------------------------------------------------------------

#: suffixes of the channels a counter channel ``NAME`` is fused with, finest first, with how
#: each is read (the NVML source's naming: ``gpu0``, ``gpu0.power_samples``, ...)
SHAPE_SUFFIXES = (("power_samples", "period"), ("power_instant", "point"))
#: the suffix of the fused channel
FUSED_SUFFIX = "fused"


def fused_channels(
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    report: dict | None = None,
) -> tuple[dict[str, Channel], dict[str, SampleSeries]]:
    """Add a fused power channel ``NAME.fused`` for each counter channel ``NAME`` that has a
    ``NAME.power_samples`` channel (and use ``NAME.power_instant`` where the buffer has gaps).

    Call it on the run's aligned series (monotonic seconds, time maps applied), before windows
    are integrated. The new channels are secondary (``primary=False``); the inputs are not
    changed.

    Args:
        channels: the run's channels by name.
        series: their samples by name.
        report: if given, receives ``FusionResult.to_json()`` for each fused channel, by name.

    Returns:
        New dicts of channels and series, with the fused channels added.
    """
    new_channels, new_series = dict(channels), dict(series)
    for name, channel in channels.items():
        first = channels.get(f"{name}.{SHAPE_SUFFIXES[0][0]}")
        if channel.quantity != Quantity.ENERGY or first is None or name not in series:
            continue
        shapes = []
        for suffix, reading in SHAPE_SUFFIXES:
            shape_channel = channels.get(f"{name}.{suffix}")
            s = series.get(f"{name}.{suffix}")
            if shape_channel is None or s is None or shape_channel.quantity != Quantity.POWER:
                continue
            period = shape_channel.resolution_s if shape_channel.resolution_s > 0 else 0.1
            shapes.append(ShapeSeries(shape_channel.name, s.times_s, s.values, period, reading))
        counter = series[name]
        result = fuse(counter.times_s, counter.values, shapes)
        fused_name = f"{name}.{FUSED_SUFFIX}"
        new_channels[fused_name] = Channel(
            fused_name,
            Quantity.POWER,
            channel.scope,
            first.resolution_s,
            ClockBase.MONOTONIC,
            primary=False,
            description=(
                f"{name}'s energy counter between its ticks, shaped inside each tick interval by "
                f"the 20-ms power samples ({first.name}); computed after the run"
            ),
        )
        new_series[fused_name] = result.series
        if report is not None:
            report[fused_name] = result.to_json()
    return new_channels, new_series
