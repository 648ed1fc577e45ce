"""A counter window's energy with the estimator chosen at each edge by the evidence around it.

Between its ticks, an energy counter is exact; a window's energy is the counter between the
ticks inside the window plus, at each edge, the share of the edge's tick interval that lies
inside. Two estimators give that share:

- ``counter``: the interval's increment spread evenly (linear interpolation). Exact under
  constant power; off by up to a quarter of a step's energy over the interval when the load
  steps inside it (docs/measurement.md).
- ``fused``: the increment spread as the fine power samples say (``fusion.py``). Right on a
  step; under a steady load it adds the samples' own noise.

Both agree at every tick, so each edge can take its own. The difference ``D`` between the two
shares at an edge is what the samples say the counter gets wrong there: an edge takes ``fused``
where ``|D|`` is more than ``STEP_SIGMAS`` times what the samples' noise alone gives (a step
inside the edge's tick interval), ``counter`` otherwise.

A third reading, ``anchored``, is for the start edge of a window whose device was synchronised
as it opened: the window's work cannot begin before its start. A load that rises less than one
sample period before that edge is then read as the window's own, misplaced by the samples (they
cannot place a step more finely than their period): the edge reads the fused shape with that
rise moved onto the edge, the part before the rise at the run's gain (what the counter holds
beyond the moved shape lies after the rise), and its bound keeps the unmoved reading inside
(docs/measurement.md).

Each edge also gives the window's random uncertainty (``uncertainty.py`` combines it): the tick
stamps (each within ``STAMP_S`` of the counter's change), and what the chosen estimator may
misplace inside the interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .energy import WindowEnergy, counter_energy, power_energy
from .fusion import FusionResult
from .samples import SampleSeries
from .shapes import STEP_SHARE, Signal
from .stats import Z95
from .ticks import STAMP_SD_S, Edge, counter_edge, interval, stamp_sd
from .vocabulary import ANCHORED, COUNTER, FUSED, SHORT_WINDOW

__all__ = [
    "Z95",
    "Edge",
    "Evidence",
    "anchored_edge",
    "counter_edge",
    "evidence_window",
    "fused_edge",
    "fused_window",
]

#: an edge takes the fused estimator where |D| exceeds this many times its noise. Chosen on two
#: H100 runs of benchmarks/step_family.py (2026-11-26): from 3 to 1.25 the worst unflagged
#: window on load steps fell from 4.1-8.8 % to 2.9-3.6 % (50/100 ms) and from 4.6-4.8 % to
#: 3.0-3.5 % (100/200 ms), other rows unchanged; on steady load the fused estimator at a few
#: more edges moved the median within what the steady truths themselves vary by (docs/validation.md)
STEP_SIGMAS = 1.25
#: how far a step the samples show may still be misplaced inside a tick interval, 1 sigma: the
#: 20-ms samples' stamp jitter and the offset between them and the counter. Units: s.
PLACEMENT_SD_S = 0.0001
#: the share of an interval's unexplained mismatch, per watt of step, that lands at an edge: the
#: interval's own scale takes the rest back (calibrated on the step simulation, tests/test_edges.py)
PLACEMENT_SHARE = 0.6
#: under a load without steps, the share of the samples' noise that the interpolation's own error
#: may hide from |D| (calibrated on the steady simulation, tests/test_edges.py)
UNSEEN_SHARE = 0.6
#: a rise moved onto a synchronised start edge is at least this share of the step its tick
#: interval holds (``Evidence.jump_w``): the step that made the edge ``fused``
ANCHOR_SHARE = 0.5
#: ... and at least this share of the power it rises to: a load starting, not the ripple of a
#: steady load at its power cap (±8 % on an H100, docs/validation.md)
ANCHOR_RISE = STEP_SHARE
#: the fused power is read in bins this long to find a rise (``rise_near``). Units: s.
RISE_BIN_S = 0.001
#: an anchored start reads the part of its interval before the rise at the run's gain only where
#: the power held still from this many sample periods before the interval until the rise: a load
#: that fell just before leaves a tail the 20-ms samples may miss (docs/measurement.md)
SETTLED_PERIODS = 2.0


def _fused_share(fused: SampleSeries, t0: float, t: float) -> float:
    """The fused power's integral over [t0, t] (power knots at every tick)."""
    return power_energy(fused.times_s, fused.values, t0, t).energy_j if t > t0 else 0.0


@dataclass(frozen=True)
class Evidence:
    """What a fused counter says about every tick interval, for choosing and bounding edges.

    Args:
        fusion: the fused power and its per-interval mismatch (``fusion.fuse``).
        jump_w: per tick interval, the range of the fused power inside it (a step's size).
        placement_sd_s: how far the samples place a step from where the counter says it is,
            1 sigma: from the run's mismatches beyond what the tick stamps explain, per watt
            of step (``PLACEMENT_SD_S`` at least). Units: s.
    """

    fusion: FusionResult
    jump_w: np.ndarray
    placement_sd_s: float

    @classmethod
    def of(cls, fusion: FusionResult) -> Evidence:
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
        place = PLACEMENT_SD_S
        if np.any(shaped) and len(series):
            p = np.interp(ticks, series.times_s, series.values)
            stamp2 = STAMP_SD_S**2 * (p[:-1] ** 2 + p[1:] ** 2)
            # how far the shapes missed the counter beyond what the stamps explain, per watt of
            # step, over every shaped interval (summed before the root: not biased upwards)
            excess = float((mismatch[shaped] ** 2 - stamp2[shaped]).sum())
            steps = float((jump[shaped] ** 2).sum())
            if steps > 0 and excess > 0:
                place = max(place, PLACEMENT_SHARE * math.sqrt(excess / steps))
        return cls(fusion, jump, place)


def fused_edge(evidence: Evidence, t: float, opens: bool = False, anchor_s: float | None = None) -> Edge:
    """An edge of a counter with fused power beside it: ``fused`` where the samples show a step
    in the edge's tick interval, ``counter`` otherwise; with ``opens`` (the start of a window
    opened after a device sync), ``anchored`` where that step is a rise placed just before it
    (``anchored_edge``). ``anchor_s``: a window opened after a device sync at ``anchor_s``, at
    or just after this edge (an end edge; ``opens`` is ``anchor_s == t``): the edge reads the
    shape that window's start reads, so that a rise moved onto that start is not also counted
    before it."""
    if opens:
        anchor_s = t
    result = evidence.fusion
    ticks, counter = result.ticks_s, result.counter_j
    i = interval(ticks, t)
    mismatch = float(result.mismatch_j[i]) if i < result.mismatch_j.size else math.nan
    if not math.isfinite(mismatch):
        return counter_edge(ticks, counter, t)
    t0, t1 = float(ticks[i]), float(ticks[i + 1])
    span = t1 - t0
    increment = float(counter[i + 1] - counter[i])
    x = float(np.clip((t - t0) / span, 0.0, 1.0))
    shares = _fused_share(result.series, t0, min(max(t, t0), t1))
    d = shares - x * increment
    noise = _noise_j(result, x)
    fused = result.series
    # the power at each tick, from the fused series: a tick's stamp error moves the energy by
    # the power there, whichever estimator reads the interval
    p0 = float(np.interp(t0, fused.times_s, fused.values))
    p1 = float(np.interp(t1, fused.times_s, fused.values))
    if abs(d) <= STEP_SIGMAS * noise:
        # what the samples say the interpolation misses here (|D|) is the counter's own error
        # at this edge, if the samples are right; otherwise it overstates it
        sd = math.sqrt(stamp_sd(x, p0, p1) ** 2 + d**2 + (UNSEEN_SHARE * noise) ** 2)
        plain = Edge(COUNTER, 0.0, sd, False, True)
        return anchored_edge(evidence, i, t, plain, anchor_s) if anchor_s is not None else plain
    f = float(np.clip(shares / increment, 0.0, 1.0)) if increment > 0 else x
    placement = evidence.jump_w[i] * evidence.placement_sd_s
    sd = math.hypot(stamp_sd(f, p0, p1), placement)
    edge = Edge(FUSED, d, sd, True, True)
    return anchored_edge(evidence, i, t, edge, anchor_s) if anchor_s is not None else edge


def rise_near(series: SampleSeries, t: float, reach_s: float) -> tuple[float, float, float]:
    """The rise of ``series`` around ``t``, read as mean power over ``RISE_BIN_S`` bins (a
    zero-width knot carries no energy and is no level): from the first bin at ``t - reach_s``
    to the highest bin within ``reach_s`` of ``t``. Returns where the bins first reach halfway
    up (NaN where they do not rise), the rise's size, and the highest level. Units: s, W, W."""
    edges = t - reach_s + RISE_BIN_S * np.arange(int(round(2 * reach_s / RISE_BIN_S)) + 1)
    level = _levels(series, edges)
    if level is None:
        return math.nan, 0.0, math.nan
    base, top = float(level[0]), float(np.max(level))
    rise = top - base
    if not rise > 0:
        return math.nan, 0.0, top
    k = int(np.argmax(level >= base + rise / 2))  # the first bin at or above halfway
    return float(edges[k]), rise, top


def anchored_edge(evidence: Evidence, i: int, t: float, edge: Edge, anchor_s: float | None = None) -> Edge:
    """``edge`` (``fused`` or ``counter``) in tick interval ``i``, read again for the start of a
    window opened after a device sync at ``anchor_s`` (``t`` itself where omitted): where the
    samples place a rise less than one sample period before that start, the shape is moved by
    that much, so that the rise lies on the start. The edge's share of the increment is then the
    moved shape before it, read at the run's gain (``_level_share``): the GPU drew that until the
    rise, and whatever the counter holds beyond the moved shape (a tick stamped off its time by a
    poll that blocked as the load rose, the samples' own error in the load) lies after the rise,
    in the window. That holds where the power held still from ``SETTLED_PERIODS`` sample periods
    before the interval until the rise; after an earlier load fell there, the surplus may be its
    tail, and the moved shape is scaled to the interval as a whole. Otherwise ``edge`` as it is.

    An end edge at or just before such a start (``anchor_s > t``) reads the same moved shape: the
    instant is split once, and a rise that the start takes is not also counted before it.

    The bound is the ``fused`` edge's, widened so that its 95 % reaches the ``fused`` reading:
    a rise just before a synchronised start can also be work that ran, outside any window, until
    the sync (docs/measurement.md).
    """
    result = evidence.fusion
    reach = result.period_s
    anchor = t if anchor_s is None else anchor_s
    if not reach > 0 or not t <= anchor < t + reach:
        return edge
    ticks, counter = result.ticks_s, result.counter_j
    where, rise, top = rise_near(result.series, anchor, reach)
    if not (anchor - reach <= where < anchor) or rise < ANCHOR_SHARE * evidence.jump_w[i] or rise < ANCHOR_RISE * top:
        return edge
    shift = anchor - where
    t0, t1 = float(ticks[i]), float(ticks[i + 1])
    if not t0 - shift >= float(result.series.times_s[0]):
        return edge  # the moved shape runs off the series' start
    increment = float(counter[i + 1] - counter[i])
    x = float(np.clip((t - t0) / (t1 - t0), 0.0, 1.0))
    if _settled(result.series, t0 - SETTLED_PERIODS * reach, where - reach, ANCHOR_RISE * rise):
        # before the rise the GPU draws what the samples show, at the run's gain; what the
        # counter holds beyond the moved shape lies after the rise, where the window's work runs
        before = float(np.clip(_level_share(result, t0 - shift, t - shift), 0.0, max(increment, 0.0)))
    else:
        # an earlier load fell just before: the surplus may be its tail, which the samples place
        # early; the moved shape is scaled to the interval as a whole
        whole = _fused_share(result.series, t0 - shift, t1 - shift)
        if not whole > 0:
            return edge
        before = increment * _fused_share(result.series, t0 - shift, t - shift) / whole
    d = before - x * increment
    # work that began just before the sync (not in a window) also rises there: the bound keeps
    # the samples' own placement inside it
    return Edge(ANCHORED, d, math.hypot(edge.sd_j, (d - edge.correction_j) / Z95), True, True)


def _levels(series: SampleSeries, edges: np.ndarray) -> np.ndarray | None:
    """The mean power of ``series`` in the ``RISE_BIN_S`` bins between consecutive ``edges`` (a
    zero-width knot carries no energy and is no level); ``None`` where the series does not cover
    them. Units: W."""
    # only the knots around the edges: a run of hours has millions
    lo = max(int(np.searchsorted(series.times_s, edges[0], side="left")) - 1, 0)
    hi = int(np.searchsorted(series.times_s, edges[-1], side="right")) + 1
    times, values = series.times_s[lo:hi], series.values[lo:hi]
    if times.size < 2 or edges[0] < times[0] or edges[-1] > times[-1]:
        return None
    return Signal(times, values).between(edges[:-1], edges[1:]) / RISE_BIN_S


def _settled(series: SampleSeries, t0: float, t: float, within_w: float) -> bool:
    """Whether the power over [t0, t] stays within ``within_w``, read in ``RISE_BIN_S`` bins
    (where the series does not reach back that far, what it covers is judged)."""
    t0 = max(t0, float(series.times_s[0])) if len(series) else t0
    if not t - t0 >= 2 * RISE_BIN_S:
        return True
    level = _levels(series, t0 + RISE_BIN_S * np.arange(int((t - t0) / RISE_BIN_S) + 1))
    return level is None or bool(np.ptp(level) <= within_w)


def _level_share(result: FusionResult, t0: float, t: float) -> float:
    """The fused power's integral over [t0, t] at the run's gain: each tick interval's own scale
    taken out (``FusionResult.scale``), so that the counter's disagreement with the shape in an
    interval does not move energy into the part before a rise. Units: J."""
    ticks, series = result.ticks_s, result.series
    if not t > t0:
        return 0.0
    total = 0.0
    for j in range(interval(ticks, t0), interval(ticks, t) + 1):
        a, b = max(t0, float(ticks[j])), min(t, float(ticks[j + 1]))
        if b > a:
            own = float(result.scale[j]) if j < result.scale.size else 1.0
            total += _fused_share(series, a, b) / own
    return total


def _noise_j(result: FusionResult, x: float) -> float:
    """What |D| at an edge at fraction ``x`` of its interval reaches from the samples' noise
    alone: the run's typical disagreement of shape and counter per interval, split at x."""
    residual = result.residual_j
    if not math.isfinite(residual):
        residual = 0.0
    return residual * math.sqrt(x * (1.0 - x))


def estimator_name(start: Edge, end: Edge) -> str:
    """``counter`` or ``fused`` where both edges took it, else ``START/END`` (``anchored/fused``)."""
    return start.estimator if start.estimator == end.estimator else f"{start.estimator}/{end.estimator}"


def evidence_window(
    evidence: Evidence,
    times_s: np.ndarray,
    counter_j: np.ndarray,
    start_s: float,
    end_s: float,
    resolution_s: float,
    synced: bool = False,
    next_open_s: float | None = None,
):
    """A counter window with each edge's estimator chosen by the fine samples around it.

    The interpolated counter's energy and flags (``energy.counter_energy``), plus each edge's
    correction; the random bound from both edges. ``short_window`` stays only where a window
    shorter than two update periods has a step at an edge, or no samples to tell. ``synced``:
    the device was synchronised as the window opened, so its start edge may be ``anchored``.
    ``next_open_s``: the first start of a window opened after a device sync at or after this
    window's end; within a sample period of the end, the end edge reads the shape that start
    reads (``fused_edge``'s ``anchor_s``), so that adjacent windows split their shared instant
    once.
    """
    base = counter_energy(times_s, counter_j, start_s, end_s, resolution_s)
    if not math.isfinite(base.energy_j) or evidence.fusion.ticks_s.size < 2:
        return base
    first, last = evidence.fusion.ticks_s[0], evidence.fusion.ticks_s[-1]
    if start_s < first or end_s > last:
        return base
    # anchored_edge reads a start only where it lies at or within a sample period after the end
    a, b = fused_edge(evidence, start_s, opens=synced), fused_edge(evidence, end_s, anchor_s=next_open_s)
    flags = base.flags
    if SHORT_WINDOW in flags and a.evidence and b.evidence and not (a.step or b.step):
        flags = tuple(f for f in flags if f != SHORT_WINDOW)
    energy = base.energy_j + b.correction_j - a.correction_j
    return WindowEnergy(energy, flags, estimator_name(a, b), Z95 * math.hypot(a.sd_j, b.sd_j))


def fused_window(evidence: Evidence, start_s: float, end_s: float) -> float:
    """The random bound of the fused channel's own window (both edges read as fused). Units: J."""
    sds = []
    for t in (start_s, end_s):
        edge = fused_edge(evidence, t)
        if edge.estimator == FUSED:
            sds.append(edge.sd_j)
        else:  # no step at this edge: fused adds the samples' noise to the stamps' error
            sds.append(math.hypot(edge.sd_j, _noise_j(evidence.fusion, 0.5)))
    return Z95 * math.hypot(*sds)
