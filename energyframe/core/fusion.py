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
from .shaping import Plan, assemble, own_scales, shape_intervals

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
    if t.size < 2:
        return _unfused(names)
    origin = float(t[0])
    rel = t - origin
    increments = np.diff(e)
    valid = increments >= 0  # a decrease is a reset: the energy across it is unknown
    a, b = rel[:-1], rel[1:]
    n = a.size
    plan = Plan(np.full(n, -1), np.zeros(n), np.zeros(n), np.full(n, np.nan), np.full(n, np.nan))
    signals: list[Signal | None] = []
    offsets: list[OffsetEstimate] = []
    for k, shape in enumerate(shapes):
        if estimate_offsets:
            est = estimate_offset(rel, np.where(valid, increments, np.nan), shape, origin, max_offset_s)
        else:
            est = _not_estimated(shape.name, "not estimated")
        offsets.append(est)
        u, p = samples_of(shape, origin)
        if est.applied:
            u = u - est.offset_s
        signals.append(Signal(*knots(u, p, shape.period_s, shape.reading)) if u.size >= 2 else None)
        if signals[-1] is None:
            continue
        reach = _reach(shape, u, p, max_shift_periods)
        shape_intervals(
            plan,
            k=k,
            signal=signals[-1],
            covered=valid & covered(u, shape.period_s, a, b),
            a=a,
            b=b,
            increments=increments,
            est=est,
            reach_s=reach,
            room=covered(u, shape.period_s, a - reach, b + reach),
            max_scale=max_scale,
        )
    shaped, shifted = _tally(plan, names)
    return FusionResult(
        assemble(plan, signals, t, origin, increments, valid),
        tuple(offsets),
        n,
        shaped,
        shifted,
        flat=int(np.count_nonzero((plan.mode == -1) & valid)),
        unknown=int(np.count_nonzero(~valid)),
        ticks_s=t,
        counter_j=e,
        mismatch_j=plan.mismatch,
        period_s=float(shapes[0].period_s) if shapes else math.nan,
        scale=own_scales(plan),
    )


def _unfused(names: Sequence[str]) -> FusionResult:
    """The fusion of a counter with fewer than two ticks: no power, no interval."""
    none = tuple(_not_estimated(name, "fewer than two ticks") for name in names)
    empty = SampleSeries(np.zeros(0), np.zeros(0))
    return FusionResult(empty, none, 0, dict.fromkeys(names, 0), dict.fromkeys(names, 0))


def _tally(plan: Plan, names: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Per series (by name), the tick intervals it shaped, and of those the ones it was
    shifted in."""
    shaped = {name: int(np.count_nonzero(plan.mode == k)) for k, name in enumerate(names)}
    shifted = {name: int(np.count_nonzero((plan.mode == k) & (plan.shift != 0))) for k, name in enumerate(names)}
    return shaped, shifted


def _not_estimated(name: str, reason: str) -> OffsetEstimate:
    """The offset estimate of a series whose offset was not estimated, and why."""
    nan = math.nan
    return OffsetEstimate(
        name, offset_s=0.0, applied=False, gain=nan, residual_j=nan, residual_at_zero_j=nan, intervals=0, reason=reason
    )


def _reach(shape: ShapeSeries, u: np.ndarray, p: np.ndarray, max_shift_periods: float) -> float:
    """How far the series may move inside a tick interval: ``max_shift_periods`` of its period,
    none where its samples are means that place their steps themselves. Units: s."""
    if shape.reading == "period" and means_at_steps(u, p, shape.period_s) >= MEANS_AT_STEPS:
        return 0.0  # each sample's value places its step: a shift would only absorb stamp noise
    return max_shift_periods * shape.period_s


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
