"""One window on a channel read between an energy counter's ticks (the counter itself, or power
derived from it), in named stages called in this order:

1. the stream's energy and flags (``energy.py``): the counter interpolated at both edges, or
   the derived power integrated;
2. where each edge lies in its tick interval (``place.py``), once;
3. each edge's estimator (``estimators.py``): the interpolated counter alone, or, where the
   counter's fused power gives evidence, ``counter`` or ``fused`` by what the samples show,
   ``anchored`` at a synced window's start;
4. the error terms (``errors.py``): the edges' (the ticks' stamps and what each estimator may
   misplace), and the stamps off the counter's update grid where its ticks show them;
5. the window's energy: the stream's plus each edge's correction, its flags, its estimator
   and its random bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...model import Channel, Quantity
from ..energy import WindowEnergy, counter_energy, power_energy
from ..samples import SampleSeries
from ..tickgrid import TickGrid
from ..vocabulary import FUSED, SHORT_WINDOW
from .errors import STAMP_SD_S, GridError, grid_error, window_random_j, with_grid_j
from .estimators import counter_reading, estimator_name, fused_sd_j, read_edge
from .evidence import Evidence
from .place import EdgePlace, place


@dataclass(frozen=True, kw_only=True)
class Span:
    """A window as its edges are read.

    Args:
        start_s, end_s: its edges on the run's timeline. Units: s.
        synced: the window opened after a device sync (``WindowRecord.synced``), so none of its
            work began before ``start_s``: a rise the samples place just before it is its own.
        next_synced_start_s: the first start of a synced window at or after ``end_s`` (``None``:
            none), whose reading the end edge shares, so that adjacent windows split their
            shared instant once. Units: s.
    """

    start_s: float
    end_s: float
    synced: bool = False
    next_synced_start_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class CounterTicks:
    """The energy counter a channel's window edges lie between, and what is known of its ticks.

    Args:
        series: the counter's ticks and its value at each. Units: s, J.
        evidence: what its fused power says about each tick interval (``None``: no fine samples).
        grid: its ticks against their update grid (``None``: the check cannot tell, or the
            windows are read without it).
        stamp_sd_s: its tick stamps' standard deviation (``errors.stamp_sd_s``): the one the
            evidence was built with, where there is evidence. Units: s.
    """

    series: SampleSeries
    evidence: Evidence | None = None
    grid: TickGrid | None = None
    stamp_sd_s: float = STAMP_SD_S

    def __post_init__(self) -> None:
        # the edges are read with the evidence's stamps where it covers them, with these where
        # it does not: one counter, one spread
        if self.evidence is not None and self.evidence.stamp_sd_s != self.stamp_sd_s:
            raise ValueError(
                f"CounterTicks.stamp_sd_s ({self.stamp_sd_s!r} s) differs from its evidence's "
                f"({self.evidence.stamp_sd_s!r} s)"
            )


def counter_window(*, channel: Channel, series: SampleSeries, span: Span, ticks: CounterTicks) -> WindowEnergy:
    """``channel``'s energy over ``span``: an energy counter with each edge's estimator chosen by
    the evidence around it, or power derived from a counter (its fused power) with its edges'
    bound; in the stages of the module's docstring.

    Args:
        channel: the channel, an energy counter or power derived from one.
        series: its samples. Units: s, and J or W.
        span: the window.
        ticks: the counter whose ticks its edges lie between (the channel's own, for a counter).
    """
    counter = channel.quantity == Quantity.ENERGY
    read = counter_energy if counter else power_energy
    stream = read(series.times_s, series.values, span.start_s, span.end_s, channel.resolution_s)
    if not math.isfinite(stream.energy_j):
        return stream
    evidence = ticks.evidence
    if counter and evidence is not None and not evidence.covers(span.start_s, span.end_s):
        evidence = None  # the fused power does not reach an edge: the counter alone
    times, values = ticks.series.times_s, ticks.series.values
    start = place(times, values, span.start_s, span.start_s if span.synced else None)
    end = place(times, values, span.end_s, span.next_synced_start_s)
    grid = grid_error(ticks.grid, (start, end)) if ticks.grid is not None and times.size >= 2 else None
    if counter:
        return _counter_edges(stream, start, end, evidence, grid, ticks.stamp_sd_s)
    return _derived_edges(stream, start, end, evidence, grid)


def _counter_edges(
    stream: WindowEnergy,
    start: EdgePlace,
    end: EdgePlace,
    evidence: Evidence | None,
    grid: GridError | None,
    stamp_sd_s: float = STAMP_SD_S,
) -> WindowEnergy:
    """A counter window from its interpolated energy and its edges' estimators. ``short_window``
    stays only where a window shorter than two update periods has a step at an edge, or no
    samples to tell."""
    if evidence is None:
        a, b = counter_reading(start, stamp_sd_s), counter_reading(end, stamp_sd_s)
        return _finished(stream, stream.energy_j, stream.flags, stream.estimator, window_random_j(a.sd_j, b.sd_j), grid)
    a, b = read_edge(evidence, start), read_edge(evidence, end)
    flags = stream.flags
    if SHORT_WINDOW in flags and a.shaped and b.shaped and not (a.step or b.step):
        flags = tuple(f for f in flags if f != SHORT_WINDOW)
    energy = stream.energy_j + b.correction_j - a.correction_j
    return _finished(stream, energy, flags, estimator_name(a, b), window_random_j(a.sd_j, b.sd_j), grid)


def _derived_edges(
    stream: WindowEnergy, start: EdgePlace, end: EdgePlace, evidence: Evidence | None, grid: GridError | None
) -> WindowEnergy:
    """Power derived from a counter (its fused power): the integrated power, bounded by its
    edges read as fused."""
    if evidence is None:
        return _finished(stream, stream.energy_j, stream.flags, stream.estimator, stream.random_j, grid)
    random = window_random_j(fused_sd_j(evidence, start), fused_sd_j(evidence, end))
    return _finished(stream, stream.energy_j, stream.flags, FUSED, random, grid)


def _finished(
    stream: WindowEnergy,
    energy_j: float,
    flags: tuple[str, ...],
    estimator: str,
    random_j: float,
    grid: GridError | None,
) -> WindowEnergy:
    """The window's energy, with the grid's error term, flags and columns where it has one."""
    if grid is None:
        return WindowEnergy(energy_j, flags, estimator=estimator, random_j=random_j, columns=stream.columns)
    flags = tuple(dict.fromkeys([*flags, *grid.flags]))
    random_j, columns = with_grid_j(random_j, grid), {**stream.columns, **grid.columns}
    return WindowEnergy(energy_j, flags, estimator=estimator, random_j=random_j, columns=columns)
