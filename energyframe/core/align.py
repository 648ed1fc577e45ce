"""Aligning lagging meters with the rest of the run: lag and drift by cross-correlation.

A wall meter's record, stamped when it arrives, reports the average power over its last interval,
and arrives late by an amount nobody states (USB buffering, the meter's firmware, a logging host
with its own clock). Against a reference measured on the run's own clock (a GPU's 20-ms power
samples, or the power its energy counter implies), the lag is the shift that best explains the
meter: for a candidate lag L, the meter's record at time t should equal the reference averaged
over [t - L - interval, t - L]. The L with the highest correlation wins, refined between grid
points. Over a long run, the lag estimated near the start and near the end gives the drift of
the meter's clock.

The correction moves each meter sample to the middle of the interval it reports:
t - L - interval/2 - drift (t - t_start). Correlations below ``GOOD`` are reported; below
``USABLE`` the lag is not applied and the run says why (a flat workload; ``--sync-pulse`` helps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..model import Channel, Quantity, Scope, Timing
from .clock import ChannelTimeMap
from .samples import SampleSeries

GOOD = 0.9
USABLE = 0.6
#: correlation peaks this close to the best count as ties (periodic loads)
TIE = 0.02
#: lags searched, and the grid they are searched on. Units: s.
MAX_LAG_S = 10.0
LAG_STEP_S = 0.02
#: a lag is scored only where at least this share of the meter's samples, of the most any lag
#: keeps, lie against the reference
MIN_OVERLAP_SHARE = 0.75
#: a drift is estimated only over runs at least this long, with both ends aligned well. Units: s.
MIN_DRIFT_SPAN_S = 60.0


@dataclass(frozen=True)
class LagEstimate:
    """The best lag of a meter against a reference. Units: s."""

    lag_s: float
    correlation: float
    samples: int


def reference_signal(channel: Channel, series: SampleSeries) -> tuple[np.ndarray, np.ndarray]:
    """(times, power) of a reference channel: power samples as they are, or the power an energy
    counter implies between consecutive ticks (placed at the middle of each tick interval)."""
    if channel.quantity == Quantity.POWER:
        return series.times_s, series.values
    t, e = series.times_s, series.values
    if t.size < 3:
        return np.array([]), np.array([])
    dt = np.diff(t)
    ok = dt > 0
    return ((t[1:] + t[:-1]) / 2)[ok], (np.diff(e)[ok] / dt[ok])


def _cumulative(ref_t: np.ndarray, ref_p: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    grid = np.arange(ref_t[0], ref_t[-1], step)
    power = np.interp(grid, ref_t, ref_p)
    return grid, np.concatenate(([0.0], np.cumsum((power[1:] + power[:-1]) / 2 * step)))


def _averages(grid: np.ndarray, cum: np.ndarray, ends: np.ndarray, width: float) -> np.ndarray:
    """Mean reference power over [end - width, end] for each end."""
    hi = np.interp(ends, grid, cum)
    lo = np.interp(ends - width, grid, cum)
    return (hi - lo) / width


def estimate_lag(
    ref_t: np.ndarray,
    ref_p: np.ndarray,
    t: np.ndarray,
    p: np.ndarray,
    interval_s: float,
    max_lag_s: float = MAX_LAG_S,
    step_s: float = LAG_STEP_S,
) -> LagEstimate:
    """The lag of a meter (samples ``t, p``, each the mean of its last ``interval_s``) behind a
    reference (``ref_t, ref_p``). Units: s. Negative: the meter's clock is ahead."""
    if ref_t.size < 2 or t.size < 3:
        return LagEstimate(math.nan, math.nan, int(t.size))
    grid, cum = _cumulative(ref_t, ref_p, min(step_s, interval_s / 10))
    lags = np.arange(-max_lag_s, max_lag_s + step_s / 2, step_s)
    scores = _scores(grid, cum, lags, t, p, interval_s)
    if np.all(np.isnan(scores)):
        return LagEstimate(math.nan, math.nan, int(t.size))
    best = _best(lags, scores)
    return LagEstimate(_refined(lags, scores, best, step_s), float(scores[best]), int(t.size))


def _scores(
    grid: np.ndarray, cum: np.ndarray, lags: np.ndarray, t: np.ndarray, p: np.ndarray, interval_s: float
) -> np.ndarray:
    """Per lag, the correlation of the meter's samples with the reference's averages over the
    intervals they report (NaN where too few samples lie against the reference, or either is
    flat)."""
    scores = np.full(lags.size, np.nan)
    # per lag, the meter's samples whose interval lies against the reference (t - lag inside it)
    ordered = np.sort(t)
    overlap = np.searchsorted(ordered, grid[-1] + lags, side="right") - np.searchsorted(
        ordered, grid[0] + interval_s + lags, side="left"
    )
    # a lag that leaves most of the meter's samples outside the reference rests on a few
    # samples, whose correlation can beat the true lag's by chance (a short run, a periodic load)
    enough = np.maximum(3, MIN_OVERLAP_SHARE * overlap.max())
    for i, lag in enumerate(lags):
        if overlap[i] < enough:
            continue
        ends = t - lag
        inside = (ends - interval_s >= grid[0]) & (ends <= grid[-1])
        predicted = _averages(grid, cum, ends[inside], interval_s)
        observed = p[inside]
        if np.std(predicted) == 0 or np.std(observed) == 0:
            continue
        scores[i] = float(np.corrcoef(predicted, observed)[0, 1])
    return scores


def _best(lags: np.ndarray, scores: np.ndarray) -> int:
    """The lag whose score is best: a periodic load correlates as well one period later, so of
    the peaks that are as good as the best, the smallest shift (meters lag by seconds, not by
    periods of the workload)."""
    top = np.nanmax(scores)
    near = [i for i in range(lags.size) if _peak(scores, i) and scores[i] >= top - TIE]
    return min(near, key=lambda i: abs(lags[i])) if near else int(np.nanargmax(scores))


def _peak(scores: np.ndarray, i: int) -> bool:
    """Whether score ``i`` is known and no lower than either neighbour that is known."""
    if np.isnan(scores[i]):
        return False
    left = i == 0 or np.isnan(scores[i - 1]) or scores[i] >= scores[i - 1]
    return bool(left and (i == scores.size - 1 or np.isnan(scores[i + 1]) or scores[i] >= scores[i + 1]))


def _refined(lags: np.ndarray, scores: np.ndarray, best: int, step_s: float) -> float:
    """The lag at ``best``, refined by a parabola through its neighbours' scores (where both
    are known and the scores curve downwards). Units: s."""
    lag = float(lags[best])
    if 0 < best < lags.size - 1 and not np.isnan(scores[best - 1]) and not np.isnan(scores[best + 1]):
        left, mid, right = scores[best - 1], scores[best], scores[best + 1]
        curvature = left - 2 * mid + right
        if curvature < 0:
            lag += 0.5 * (left - right) / curvature * step_s
    return lag


def _segment(series_t: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (series_t >= lo) & (series_t <= hi)


def estimate_lag_and_drift(
    ref_t: np.ndarray,
    ref_p: np.ndarray,
    t: np.ndarray,
    p: np.ndarray,
    interval_s: float,
    segments: tuple[tuple[float, float], tuple[float, float]] | None = None,
) -> tuple[LagEstimate, float, dict]:
    """The lag over the whole run and, when the run is long enough, the drift between an early
    and a late segment (``segments``, e.g. around sync pulses; default: first and last third)."""
    whole = estimate_lag(ref_t, ref_p, t, p, interval_s)
    detail: dict = {"whole_run": {"lag_s": whole.lag_s, "correlation": whole.correlation}}
    drift = 0.0
    if t.size < 3:
        return whole, drift, detail
    span = float(t[-1] - t[0])
    if segments is None:
        third = span / 3
        segments = ((t[0], t[0] + third), (t[-1] - third, t[-1]))
    if span >= MIN_DRIFT_SPAN_S:
        estimates = []
        for lo, hi in segments:
            inside = _segment(t, lo, hi)
            ref_inside = _segment(ref_t, lo - MAX_LAG_S - interval_s, hi + MAX_LAG_S)
            estimates.append(
                estimate_lag(ref_t[ref_inside], ref_p[ref_inside], t[inside], p[inside], interval_s)
            )
        (a, b), ((a_lo, a_hi), (b_lo, b_hi)) = estimates, segments
        detail["start_segment"] = {
            "lag_s": a.lag_s,
            "correlation": a.correlation,
            "from_s": a_lo,
            "to_s": a_hi,
        }
        detail["end_segment"] = {"lag_s": b.lag_s, "correlation": b.correlation, "from_s": b_lo, "to_s": b_hi}
        if min(a.correlation, b.correlation) >= GOOD:
            middle_a, middle_b = (a_lo + a_hi) / 2, (b_lo + b_hi) / 2
            drift = (b.lag_s - a.lag_s) / (middle_b - middle_a)
            lag_at_start = a.lag_s - drift * (middle_a - t[0])
            whole = LagEstimate(lag_at_start, whole.correlation, whole.samples)
    return whole, drift, detail


def pick_reference(channels: Mapping[str, Channel], series: Mapping[str, SampleSeries]) -> str | None:
    """The finest channel measured on the run's own clock: GPU power samples first."""
    candidates = []
    for name, channel in channels.items():
        if not channel.integrable or channel.timing == Timing.UNKNOWN or len(series.get(name, ())) < 10:
            continue
        rank = (channel.scope != Scope.GPU, channel.resolution_s, not channel.primary)
        candidates.append((rank, name))
    return min(candidates)[1] if candidates else None


@dataclass(frozen=True)
class Alignment:
    """What the aligner found for one meter channel."""

    channel: str
    reference: str | None
    lag_s: float
    drift: float
    correlation: float
    applied: bool
    detail: dict

    def time_map(self, interval_s: float, start_s: float) -> ChannelTimeMap:
        lag = self.lag_s if self.applied else 0.0
        drift = self.drift if self.applied else 0.0
        # samples move to the middle of the interval they report, then by the estimated lag
        return ChannelTimeMap(lag + interval_s / 2, drift, start_s)


def align_meters(
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    pulses: Sequence[tuple[float, float]] = (),
) -> dict[str, Alignment]:
    """Estimate the lag (and drift) of every channel of unknown timing against the best reference."""
    reference = pick_reference(channels, series)
    out = {}
    for name, channel in channels.items():
        if channel.timing != Timing.UNKNOWN or not channel.integrable:
            continue
        s = series[name]
        if reference is None:
            out[name] = Alignment(
                name, None, math.nan, 0.0, math.nan, False, {"reason": "no reference channel"}
            )
            continue
        ref_t, ref_p = reference_signal(channels[reference], series[reference])
        interval = averaging_period(channel)
        segments = _pulse_segments(pulses, interval)
        estimate, drift, detail = estimate_lag_and_drift(ref_t, ref_p, s.times_s, s.values, interval, segments)
        applied = bool(np.isfinite(estimate.correlation) and estimate.correlation >= USABLE)
        out[name] = Alignment(name, reference, estimate.lag_s, drift, estimate.correlation, applied, detail)
    return out


def averaging_period(channel: Channel) -> float:
    """The period a reading averages over: as declared, else its update period. Units: s."""
    return channel.averaging_s or channel.resolution_s


def _pulse_segments(pulses: Sequence[tuple[float, float]], interval_s: float):
    """The early and late groups of sync pulses, widened by a few meter intervals."""
    if len(pulses) < 2:
        return None
    pulses = sorted(pulses)
    gaps = [b[0] - a[1] for a, b in zip(pulses, pulses[1:])]
    split = int(np.argmax(gaps)) + 1
    early, late = pulses[:split], pulses[split:]
    if not late:
        return None
    pad = 3 * interval_s
    return ((early[0][0] - pad, early[-1][1] + pad), (late[0][0] - pad, late[-1][1] + pad))


class MeterAligner:
    """The ``Measurement`` hook: aligns wall meters after the run and says how well it went."""

    def __init__(self) -> None:
        self.alignments: dict[str, Alignment] = {}
        self.warnings: list[str] = []

    def __call__(self, channels, series, records) -> dict[str, ChannelTimeMap]:
        pulses = [(r.start_s, r.end_s) for r in records if r.phase == SYNC_PULSE]
        self.alignments = align_meters(channels, series, pulses)
        maps = {}
        start = min((float(s.times_s[0]) for s in series.values() if len(s)), default=0.0)
        for name, a in self.alignments.items():
            maps[name] = a.time_map(averaging_period(channels[name]), start)
            if a.reference is None:
                self.warnings.append(
                    f"{name}: its lag cannot be estimated: the run has no GPU or CPU power channel to align it "
                    "against (add one, e.g. --power nvml); its samples are only moved to the middle of their "
                    "intervals"
                )
            elif not a.applied:
                self.warnings.append(
                    f"{name}: lag not estimated (correlation with {a.reference} only {a.correlation:.2f}); its "
                    "samples are only moved to the middle of their intervals. A flat workload cannot be "
                    "aligned: use --sync-pulse"
                )
            elif a.correlation < GOOD:
                self.warnings.append(
                    f"{name}: lag {a.lag_s:+.2f} s estimated with a poor correlation ({a.correlation:.2f}) against "
                    f"{a.reference}; treat its energy with care, or use --sync-pulse"
                )
        return maps

    def report(self) -> dict:
        return {
            name: {
                "reference": a.reference,
                "lag_s": a.lag_s,
                "drift": a.drift,
                "correlation": a.correlation,
                "applied": a.applied,
                **a.detail,
            }
            for name, a in self.alignments.items()
        }


#: phase name of the sync-pulse windows
SYNC_PULSE = "(sync pulse)"
