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
   clear minimum (``shapes.MIN_OFFSET_CONTRAST``).
2. **Reading.** A series is read either as the power at each sample's time, joined linearly
   (``point``, how ``energy.power_energy`` reads every power channel), or as the mean power
   since the previous sample (``period``), where a sample whose value lies between its
   neighbours' is taken as a step between them placed so that the sample's mean is kept: a
   clean load step inside one 20-ms sample is then placed exactly.
3. **Local shift.** Inside each tick interval the series may move by up to ``max_shift_periods``
   of its own sample period, the least that makes its integral agree with the counter's
   increment within the series' typical mismatch: 20-ms samples cannot say where within 20 ms
   a step happened, the counter's increment can. A ``period`` series whose samples at steps
   mostly lie between the levels on either side (``shapes.means_at_steps``) is made of means,
   each of which places its step itself: it is not shifted, since a shift would then only
   absorb the ticks' stamp noise by moving a step placed right.
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
from dataclasses import dataclass, field, replace

import numpy as np

from ..model import Channel, ClockBase, Quantity
from .samples import SampleSeries
from .shapes import (
    MAX_OFFSET_S,
    MEANS_AT_STEPS,
    READINGS,
    OffsetEstimate,
    ShapeSeries,
    Signal,
    covered,
    estimate_offset,
    knots,
    means_at_steps,
    samples_of,
)

__all__ = [
    "READINGS",
    "FusionResult",
    "OffsetEstimate",
    "ShapeSeries",
    "estimate_offset",
    "fuse",
    "fused_channels",
]

#: a series scaled by more than this factor away from its overall gain, either way, is not
#: trusted in that interval (the counter's mean power is used instead)
MAX_SCALE = 3.0
#: the local shift inside a tick interval, at most this many of the series' sample periods
MAX_SHIFT_PERIODS = 0.5
#: the local shift is searched on this many steps each way
SHIFT_STEPS = 20
#: tick intervals whose local shifts are searched at once
SHIFT_CHUNK = 20_000


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
        ticks_s: the counter's ticks the series is built on (finite, ascending). Units: s.
        counter_j: the counter at each of them. Units: J.
        mismatch_j: per tick interval, the counter's increment minus the shape's integral
            scaled by the series' overall gain, as the series placed it (before the local
            shift and the interval's own scale): how far the shape and the counter disagreed
            there (NaN where no series shaped it). Units: J.
        scale: per tick interval, the interval's own scale over the series' overall gain: the
            fused power there is the shape at the run's gain times this (1 where no series
            shaped it, or where the gain is unknown).
        period_s: the sample period of the finest shape series: how finely the samples can
            place a step by themselves (NaN without shapes). Units: s.
    """

    series: SampleSeries
    offsets: tuple[OffsetEstimate, ...]
    intervals: int
    shaped: Mapping[str, int] = field(default_factory=dict)
    shifted: Mapping[str, int] = field(default_factory=dict)
    flat: int = 0
    unknown: int = 0
    ticks_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    counter_j: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mismatch_j: np.ndarray = field(default_factory=lambda: np.zeros(0))
    period_s: float = math.nan
    scale: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def residual_j(self) -> float:
        """RMS of ``mismatch_j`` over the shaped intervals (NaN when none was shaped). Units: J."""
        m = self.mismatch_j[np.isfinite(self.mismatch_j)]
        return float(np.sqrt(np.mean(m * m))) if m.size else math.nan

    def to_json(self) -> dict:
        return {
            "offsets": [o.to_json() for o in self.offsets],
            "intervals": self.intervals,
            "shaped": dict(self.shaped),
            "shifted": dict(self.shifted),
            "flat": self.flat,
            "unknown": self.unknown,
        }


# -- fusion ----------------------------------------------------------------------------------


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``range(lo[i], hi[i])`` and, for each element, its ``i``."""
    counts = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(lo.size), counts)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.arange(int(counts.sum())) + starts, owner


def _local_shifts(
    signal: Signal, a: np.ndarray, b: np.ndarray, e: np.ndarray, gain: float, noise_j: float, reach_s: float
) -> np.ndarray:
    """Per interval, the least shift d (the series read at t + d) within ``±reach_s`` whose
    scaled integral matches ``e`` within ``noise_j`` (or as well as any shift does)."""
    grid = np.linspace(-reach_s, reach_s, 2 * SHIFT_STEPS + 1)
    out = np.zeros(a.size)
    for lo in range(0, a.size, SHIFT_CHUNK):  # bounded memory on hours-long runs
        part = slice(lo, lo + SHIFT_CHUNK)
        ap, bp, ep = a[part], b[part], e[part]
        mismatch = np.abs(gain * np.stack([signal.between(ap + d, bp + d) for d in grid]) - ep)
        enough = np.maximum(mismatch.min(axis=0), noise_j) * (1 + 1e-9)
        distance = np.where(mismatch <= enough, np.abs(grid)[:, None], np.inf)
        d = grid[np.argmin(distance, axis=0)]
        out[part] = np.where(mismatch[SHIFT_STEPS] <= max(noise_j, 0.0), 0.0, d)
    return out


def _clean_counter(ticks_s, counter_j) -> tuple[np.ndarray, np.ndarray]:
    """Finite ticks, ascending, one per time (a missing value is dropped: the counter is
    cumulative, so the increment across it is still known)."""
    t = np.asarray(ticks_s, dtype=float)
    e = np.asarray(counter_j, dtype=float)
    ok = np.isfinite(t) & np.isfinite(e)
    t, e = t[ok], e[ok]
    order = np.argsort(t, kind="stable")
    t, e = t[order], e[order]
    if t.size:
        keep = np.concatenate(([True], np.diff(t) > 0))
        t, e = t[keep], e[keep]
    return t, e


@dataclass
class _Plan:
    """Per tick interval: which series shapes it (-1: none), its scale, its local shift, how
    far the shape missed the counter before scaling, and the series' overall gain."""

    mode: np.ndarray
    scale: np.ndarray
    shift: np.ndarray
    mismatch: np.ndarray
    gain: np.ndarray


def _shape_intervals(
    plan: _Plan,
    k: int,
    signal: Signal,
    covered: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    increments: np.ndarray,
    est: OffsetEstimate,
    reach_s: float,
    room: np.ndarray,
    max_scale: float,
) -> None:
    """Let series ``k`` shape the intervals it covers that no earlier series shapes."""
    todo = np.flatnonzero((plan.mode == -1) & covered)
    if todo.size == 0:
        return
    ai, bi, ei = a[todo], b[todo], increments[todo]
    gain = est.gain if est.applied and est.gain > 0 else math.nan
    s0 = signal.between(ai, bi)
    if not gain > 0:
        gain = float(ei[s0 > 0].sum() / s0[s0 > 0].sum()) if np.any(s0 > 0) else math.nan
    d = np.zeros(todo.size)
    if reach_s > 0 and gain > 0:
        near = room[todo]
        noise = est.residual_j if math.isfinite(est.residual_j) else 0.0
        d[near] = _local_shifts(signal, ai[near], bi[near], ei[near], gain, noise, reach_s)
    s = signal.between(ai + d, bi + d)
    with np.errstate(invalid="ignore", divide="ignore"):
        k_i = np.where(s > 0, ei / s, np.nan)
    usable = np.isfinite(k_i)
    if gain > 0:
        usable &= (k_i <= gain * max_scale) & (k_i >= gain / max_scale)
    chosen = todo[usable]
    plan.mode[chosen] = k
    plan.scale[chosen] = k_i[usable]
    plan.shift[chosen] = d[usable]
    plan.mismatch[chosen] = (ei - gain * s0)[usable] if gain > 0 else np.nan
    plan.gain[chosen] = gain


def _own_scales(plan: _Plan) -> np.ndarray:
    """Each interval's own scale over its series' overall gain (1 where unknown)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        own = plan.scale / plan.gain
    return np.where((plan.mode >= 0) & np.isfinite(own) & (own > 0), own, 1.0)


def _assemble(
    plan: _Plan,
    signals: Sequence[Signal | None],
    t: np.ndarray,
    origin: float,
    increments: np.ndarray,
    valid: np.ndarray,
) -> SampleSeries:
    """The knots of every interval, in order, on the caller's timeline."""
    a, b = t[:-1] - origin, t[1:] - origin
    n = a.size
    mode, scale, shift = plan.mode, plan.scale, plan.shift
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
        times = signal.t[knot] - shift[interval]
        parts.append((interval, np.ones(knot.size, dtype=int), times, scale[interval] * signal.v[knot]))
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
    return SampleSeries(absolute, values * fix[ids])


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
    t, e = _clean_counter(ticks_s, counter_j)
    names = [s.name for s in shapes]
    nan = math.nan
    if t.size < 2:
        none = tuple(
            OffsetEstimate(name, 0.0, False, nan, nan, nan, 0, "fewer than two ticks") for name in names
        )
        empty = SampleSeries(np.zeros(0), np.zeros(0))
        return FusionResult(empty, none, 0, {n: 0 for n in names}, {n: 0 for n in names})
    origin = float(t[0])
    rel = t - origin
    increments = np.diff(e)
    valid = increments >= 0  # a decrease is a reset: the energy across it is unknown
    a, b = rel[:-1], rel[1:]
    n = a.size
    plan = _Plan(np.full(n, -1), np.zeros(n), np.zeros(n), np.full(n, np.nan), np.full(n, np.nan))
    signals: list[Signal | None] = []
    offsets: list[OffsetEstimate] = []
    for k, shape in enumerate(shapes):
        if estimate_offsets:
            est = estimate_offset(rel, np.where(valid, increments, np.nan), shape, origin, max_offset_s)
        else:
            est = OffsetEstimate(shape.name, 0.0, False, nan, nan, nan, 0, "not estimated")
        offsets.append(est)
        u, p = samples_of(shape, origin)
        if est.applied:
            u = u - est.offset_s
        if u.size < 2:
            signals.append(None)
            continue
        signal = Signal(*knots(u, p, shape.period_s, shape.reading))
        signals.append(signal)
        reach = max_shift_periods * shape.period_s
        if shape.reading == "period" and means_at_steps(u, p, shape.period_s) >= MEANS_AT_STEPS:
            reach = 0.0  # each sample's value places its step: a shift would only absorb stamp noise
        _shape_intervals(
            plan,
            k,
            signal,
            valid & covered(u, shape.period_s, a, b),
            a,
            b,
            increments,
            est,
            reach,
            covered(u, shape.period_s, a - reach, b + reach),
            max_scale,
        )
    series = _assemble(plan, signals, t, origin, increments, valid)
    return FusionResult(
        series,
        tuple(offsets),
        n,
        {name: int(np.count_nonzero(plan.mode == k)) for k, name in enumerate(names)},
        {name: int(np.count_nonzero((plan.mode == k) & (plan.shift != 0))) for k, name in enumerate(names)},
        flat=int(np.count_nonzero((plan.mode == -1) & valid)),
        unknown=int(np.count_nonzero(~valid)),
        ticks_s=t,
        counter_j=e,
        mismatch_j=plan.mismatch,
        period_s=float(shapes[0].period_s) if shapes else math.nan,
        scale=_own_scales(plan),
    )


# -- the run's hook ----------------------------------------------------------------------------

#: the suffix of a counter's fused channel (``gpu0.fused``)
FUSED_SUFFIX = "fused"


def fused_channels(
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    report: dict | None = None,
    primary: bool = False,
    results: dict[str, FusionResult] | None = None,
) -> tuple[dict[str, Channel], dict[str, SampleSeries]]:
    """Add a fused power channel ``NAME.fused`` for each counter channel ``NAME`` that declares
    the power channels that shape it (``Channel.shaped_by``), where the first of them is there
    (the next ones shape the intervals where it has gaps).

    Call it on the run's aligned series (monotonic seconds, time maps applied), before windows
    are integrated. The new channels are secondary unless ``primary``, and say the counter they
    come from (``Channel.derived_from``); the inputs are not changed.

    Args:
        channels: the run's channels by name.
        series: their samples by name.
        report: if given, receives ``FusionResult.to_json()`` for each fused channel, by name.
        primary: make each fused channel primary, and its counter channel secondary (only where
            validation shows fused power no worse than the counter everywhere).
        results: if given, receives each ``FusionResult`` by the counter channel's name: the
            evidence ``edge`` chooses each window edge's estimator from.

    Returns:
        New dicts of channels and series, with the fused channels added.
    """
    new_channels, new_series = dict(channels), dict(series)
    for name, channel in channels.items():
        first = channels.get(channel.shaped_by[0].channel) if channel.shaped_by else None
        if channel.quantity != Quantity.ENERGY or first is None or name not in series:
            continue
        counter = series[name]
        result = fuse(counter.times_s, counter.values, shape_series(channel, channels, series))
        fused_name = f"{name}.{FUSED_SUFFIX}"
        new_channels[fused_name] = Channel(
            fused_name,
            Quantity.POWER,
            channel.scope,
            first.resolution_s,
            ClockBase.MONOTONIC,
            primary=primary,
            description=(
                f"{name}'s energy counter between its ticks, shaped inside each tick interval by "
                f"the 20-ms power samples ({first.name}); computed after the run"
            ),
            derived_from=name,
        )
        new_series[fused_name] = result.series
        if primary:
            new_channels[name] = replace(channel, primary=False)
        if report is not None:
            report[fused_name] = result.to_json()
        if results is not None:
            results[name] = result
    return new_channels, new_series


def shape_series(
    counter: Channel, channels: Mapping[str, Channel], series: Mapping[str, SampleSeries]
) -> list[ShapeSeries]:
    """The power series that shape ``counter`` (``Channel.shaped_by``), finest first: those of
    the run's power channels that have samples."""
    shapes = []
    for shape in counter.shaped_by:
        shape_channel = channels.get(shape.channel)
        s = series.get(shape.channel)
        if shape_channel is None or s is None or shape_channel.quantity != Quantity.POWER:
            continue
        period = shape_channel.resolution_s if shape_channel.resolution_s > 0 else 0.1
        shapes.append(ShapeSeries(shape_channel.name, s.times_s, s.values, period, shape.reading))
    return shapes
