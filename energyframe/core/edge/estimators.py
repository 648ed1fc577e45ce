"""The estimators of a counter window's edge, each reading the edge's place between its ticks
(``place.py``) and, where a counter comes with fine power samples, what its fused power says
about that interval (``evidence.py``).

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

A third reading, ``anchored``, is for an edge at or just before the start of a window whose
device was synchronised as it opened: that window's work cannot begin before its start. A load
that rises less than one sample period before that start is then read as the window's own,
misplaced by the samples (they cannot place a step more finely than their period): the edge
reads the fused shape with that rise moved onto the start, the part before the rise at the
run's gain (what the counter holds beyond the moved shape lies after the rise), and its bound
keeps the unmoved reading inside (docs/measurement.md).

Each reading carries the error of the energy up to its edge: the ticks' stamps (``errors.py``)
and what the estimator may misplace inside the interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..shapes import STEP_SHARE
from ..stats import Z95
from ..vocabulary import ANCHORED, COUNTER, FUSED
from .errors import STAMP_SD_S, stamps_sd
from .evidence import Evidence
from .place import EdgePlace

#: an edge takes the fused estimator where |D| exceeds this many times its noise. Chosen on two
#: H100 runs of benchmarks/step_family.py (2026-11-26): from 3 to 1.25 the worst unflagged
#: window on load steps fell from 4.1-8.8 % to 2.9-3.6 % (50/100 ms) and from 4.6-4.8 % to
#: 3.0-3.5 % (100/200 ms), other rows unchanged; on steady load the fused estimator at a few
#: more edges moved the median within what the steady truths themselves vary by (docs/validation.md)
STEP_SIGMAS = 1.25
#: under a load without steps, the share of the samples' noise that the interpolation's own error
#: may hide from |D| (calibrated on the steady simulation, tests/core/test_edges.py)
UNSEEN_SHARE = 0.6
#: a rise moved onto a synchronised start edge is at least this share of the step its tick
#: interval holds (``Evidence.jump_w``): the step that made the edge ``fused``
ANCHOR_SHARE = 0.5
#: ... and at least this share of the power it rises to: a load starting, not the ripple of a
#: steady load at its power cap (±8 % on an H100, docs/validation.md)
ANCHOR_RISE = STEP_SHARE
#: an anchored start reads the part of its interval before the rise at the run's gain only where
#: the power held still from this many sample periods before the interval until the rise: a load
#: that fell just before leaves a tail the 20-ms samples may miss (docs/measurement.md)
SETTLED_PERIODS = 2.0


@dataclass(frozen=True, kw_only=True)
class EdgeReading:
    """One window edge as an estimator reads it.

    Args:
        estimator: ``counter``, ``fused`` or ``anchored``.
        correction_j: what the estimator adds to the interpolated counter at this edge (D where
            ``fused`` or ``anchored``, 0 where ``counter``). Units: J.
        sd_j: one standard deviation of the error of the energy up to this edge: the ticks'
            stamps and what the estimator may misplace. Units: J.
        step: whether the samples show a step inside the edge's tick interval.
        shaped: whether fine samples shaped the edge's tick interval at all.
    """

    estimator: str
    correction_j: float
    sd_j: float
    step: bool
    shaped: bool


def counter_reading(edge: EdgePlace, stamp_sd_s: float = STAMP_SD_S) -> EdgeReading:
    """An edge of a counter with no fine samples beside it: linear interpolation, with the
    stamps' uncertainty (each ``stamp_sd_s``) and, since nothing shows the load inside the
    interval, the quarter of the interval's energy a step would misplace at worst."""
    power = edge.power_w
    # without evidence a step cannot be excluded: its worst case, x (1 - x) of the increment,
    # taken as a uniform spread (sd = bound / sqrt 3)
    unseen = edge.x * (1.0 - edge.x) * edge.increment_j / math.sqrt(3.0)
    return EdgeReading(
        estimator=COUNTER,
        correction_j=0.0,
        sd_j=math.hypot(stamps_sd(edge.x, power, power, stamp_sd_s), unseen),
        step=False,
        shaped=False,
    )


def evidence_reading(evidence: Evidence, edge: EdgePlace) -> EdgeReading:
    """An edge of a counter with fused power beside it: ``fused`` where the samples show a step
    in the edge's tick interval, ``counter`` otherwise (``counter_reading`` where no samples
    shaped the interval)."""
    if not math.isfinite(evidence.mismatch_j(edge.index)):
        return counter_reading(edge, evidence.stamp_sd_s)
    t0, t1, x, increment = edge.t0_s, edge.t1_s, edge.x, edge.increment_j
    shares = evidence.share_j(t0, min(max(edge.t_s, t0), t1))
    d = shares - x * increment
    noise = evidence.noise_j(x)
    p0, p1 = evidence.power_w(t0), evidence.power_w(t1)
    if abs(d) <= STEP_SIGMAS * noise:
        # what the samples say the interpolation misses here (|D|) is the counter's own error
        # at this edge, if the samples are right; otherwise it overstates it
        stamps = stamps_sd(x, p0, p1, evidence.stamp_sd_s)
        sd = math.sqrt(stamps**2 + d**2 + (UNSEEN_SHARE * noise) ** 2)
        return EdgeReading(estimator=COUNTER, correction_j=0.0, sd_j=sd, step=False, shaped=True)
    f = float(np.clip(shares / increment, 0.0, 1.0)) if increment > 0 else x
    placement = evidence.jump_w[edge.index] * evidence.placement_sd_s
    sd = math.hypot(stamps_sd(f, p0, p1, evidence.stamp_sd_s), placement)
    return EdgeReading(estimator=FUSED, correction_j=d, sd_j=sd, step=True, shaped=True)


def anchored_reading(evidence: Evidence, edge: EdgePlace, reading: EdgeReading, synced_start_s: float) -> EdgeReading:
    """``reading`` (``fused`` or ``counter``) read again for the start of a window opened after
    a device sync at ``synced_start_s`` (``EdgePlace.synced_start_s``), at the edge or less than
    a sample period after it:
    where the samples place a rise less than one sample period before that start, the shape is
    moved by that much, so that the rise lies on the start. The edge's share of the increment is
    then the moved shape before it, read at the run's gain (``Evidence.level_share_j``): the GPU
    drew that until the rise, and whatever the counter holds beyond the moved shape (a tick
    stamped off its time by a poll that blocked as the load rose, the samples' own error in the
    load) lies after the rise, in the window. That holds where the power held still from
    ``SETTLED_PERIODS`` sample periods before the interval until the rise; after an earlier load
    fell there, the surplus may be its tail, and the moved shape is scaled to the interval as a
    whole. Otherwise ``reading`` as it is.

    An end edge at or just before such a start reads the same moved shape: the instant is split
    once, and a rise that the start takes is not also counted before it.

    The bound is the ``fused`` reading's, widened so that its 95 % reaches the ``fused`` reading:
    a rise just before a synchronised start can also be work that ran, outside any window, until
    the sync (docs/measurement.md).
    """
    result = evidence.fusion
    reach, t, anchor = result.period_s, edge.t_s, synced_start_s
    if not reach > 0 or not t <= anchor < t + reach:
        return reading
    where, rise, top = evidence.rise_near(anchor, reach)
    jump = evidence.jump_w[edge.index]
    if not (anchor - reach <= where < anchor) or rise < ANCHOR_SHARE * jump or rise < ANCHOR_RISE * top:
        return reading
    shift = anchor - where
    t0, t1, increment = edge.t0_s, edge.t1_s, edge.increment_j
    if not t0 - shift >= float(result.series.times_s[0]):
        return reading  # the moved shape runs off the series' start
    if evidence.settled(t0 - SETTLED_PERIODS * reach, where - reach, ANCHOR_RISE * rise):
        # before the rise the GPU draws what the samples show, at the run's gain; what the
        # counter holds beyond the moved shape lies after the rise, where the window's work runs
        before = float(np.clip(evidence.level_share_j(t0 - shift, t - shift), 0.0, max(increment, 0.0)))
    else:
        # an earlier load fell just before: the surplus may be its tail, which the samples place
        # early; the moved shape is scaled to the interval as a whole
        whole = evidence.share_j(t0 - shift, t1 - shift)
        if not whole > 0:
            return reading
        before = increment * evidence.share_j(t0 - shift, t - shift) / whole
    d = before - edge.x * increment
    # work that began just before the sync (not in a window) also rises there: the bound keeps
    # the samples' own placement inside it
    sd = math.hypot(reading.sd_j, (d - reading.correction_j) / Z95)
    return EdgeReading(estimator=ANCHORED, correction_j=d, sd_j=sd, step=True, shaped=True)


def read_edge(evidence: Evidence, edge: EdgePlace) -> EdgeReading:
    """An edge of a counter with fused power beside it (``evidence_reading``), ``anchored`` where
    the start of a synced window lies at it or just after it (``EdgePlace.synced_start_s``) and
    the samples place that window's rise just before it (``anchored_reading``)."""
    reading = evidence_reading(evidence, edge)
    if edge.synced_start_s is None or not reading.shaped:
        return reading
    return anchored_reading(evidence, edge, reading, edge.synced_start_s)


def fused_sd_j(evidence: Evidence, edge: EdgePlace) -> float:
    """The error of a counter's fused power up to an edge, 1 sd: where the samples show no step,
    the fused shape adds their noise to the stamps' error. Units: J."""
    reading = evidence_reading(evidence, edge)
    if reading.estimator == FUSED:
        return reading.sd_j
    return math.hypot(reading.sd_j, evidence.noise_j(0.5))


def estimator_name(start: EdgeReading, end: EdgeReading) -> str:
    """``counter`` or ``fused`` where both edges took it, else ``START/END`` (``anchored/fused``)."""
    return start.estimator if start.estimator == end.estimator else f"{start.estimator}/{end.estimator}"
