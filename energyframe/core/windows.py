"""Measured windows and their energy on every channel: the rows of windows.csv."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import Channel, Quantity, WindowAnnotation, join_flags
from .clock import ClockModel
from .edge import CounterTicks, Evidence, Span, counter_window
from .edge.errors import stamp_sd_s
from .energy import WindowEnergy, window_energy
from .idle import IdleBaseline, dynamic_columns
from .samples import DUPLICATE, IMPLAUSIBLE, MISSING, NEGATIVE, NOT_FINITE, STEPPED, SampleSeries
from .tickgrid import REGULAR_SD_S, TickGrid
from .uncertainty import energy_bound
from .vocabulary import (
    CLOCK_STEP,
    DUPLICATE_SAMPLES,
    INVALID_READING,
    IRREGULAR_TICKS,
    MISSING_POWER,
    NEGATIVE_POWER,
    TICK_OFF_GRID,
    TICK_OFF_GRID_COLUMN,
    TICK_SPREAD_COLUMN,
)

WINDOW_COLUMNS = [
    "phase",
    "trial",
    "channel",
    "start_s",
    "end_s",
    "duration_s",
    "iterations",
    "time_per_iter_s",
    "energy_j",
    "mean_power_w",
    "energy_per_iter_j",
    "dynamic_energy_j",
    "dynamic_energy_per_iter_j",
    "estimator",
    "energy_bound_j",
    "energy_bound_pct",
    "energy_random_j",
    "energy_systematic_j",
    "dynamic_energy_bound_j",
    "flags",
]
#: text columns of windows.csv (the others are numbers)
TEXT_COLUMNS = ("phase", "channel", "estimator", "flags")

#: flags of rejected readings that leave a window's energy unknown (NaN), not just bridged
UNKNOWABLE = (CLOCK_STEP,)
#: which flag a rejected reading gives the windows around it (samples.py names the reasons)
REJECTION_FLAGS = {
    NEGATIVE: NEGATIVE_POWER,
    NOT_FINITE: INVALID_READING,
    IMPLAUSIBLE: INVALID_READING,
    DUPLICATE: DUPLICATE_SAMPLES,
    MISSING: MISSING_POWER,
    STEPPED: CLOCK_STEP,
}


@dataclass(frozen=True)
class WindowRecord:
    """A window as measured: where it lies on the monotonic timeline and what ran in it.

    Args:
        phase: the phase (or user window) name.
        trial: 0-based index among the windows of that phase.
        start_s, end_s: monotonic seconds, each taken after the device sync (if any).
        iterations: iterations of the phase's step inside the window.
        synced: the window opened after a device sync (a sync other than none), so none of its
            work began before ``start_s`` and what ran before it had finished
            (``edge.Span`` carries it to the estimators).
    """

    phase: str
    trial: int
    start_s: float
    end_s: float
    iterations: int = 1
    synced: bool = False

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def counter_ticks(
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    evidence: Mapping[str, Evidence],
    grids: bool = True,
) -> dict[str, CounterTicks]:
    """Per channel whose windows are read between a counter's ticks (each counter, and the power
    derived from one), that counter: its ticks, what its fused power says about them, and, with
    ``grids``, its ticks' update grid where the check can tell (``tickgrid.py``)."""
    counters = {
        name: CounterTicks(
            series=series[name],
            evidence=evidence.get(name),
            grid=TickGrid.check(series[name].times_s) if grids else None,
            stamp_sd_s=stamp_sd_s(channel),
        )
        for name, channel in channels.items()
        if channel.quantity == Quantity.ENERGY and name in series
    }
    derived = {name: counters[c.derived_from] for name, c in channels.items() if c.derived_from in counters}
    return {**counters, **derived}


def channel_energy(
    channel: Channel, series: Mapping[str, SampleSeries], span: Span, counters: Mapping[str, CounterTicks]
) -> WindowEnergy:
    """One window on one channel: read between its counter's ticks (``edge``) where it has one,
    else as ``energy.window_energy`` reads its stream."""
    s = series[channel.name]
    ticks = counters.get(channel.name)
    if ticks is not None:
        return counter_window(channel=channel, series=s, span=span, ticks=ticks)
    return window_energy(channel.quantity, s.times_s, s.values, span.start_s, span.end_s, channel.resolution_s)


def idle_baselines(
    window: WindowRecord,
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    evidence: Mapping[str, Evidence] | None = None,
) -> dict[str, IdleBaseline]:
    out = {}
    counters = counter_ticks(channels, series, evidence or {}, grids=False)
    span = Span(start_s=window.start_s, end_s=window.end_s)
    for name, channel in channels.items():
        if not channel.integrable:
            continue
        we = channel_energy(channel, series, span, counters)
        duration = window.duration_s
        power = we.energy_j / duration if duration > 0 else math.nan
        bound = we.random_j / duration if duration > 0 else math.nan
        out[name] = IdleBaseline(name, power, duration, we.flags, bound)
    return out


Annotator = Callable[[Channel, float, float], WindowAnnotation]


def rejection_flags(
    channel: Channel, rejected: Mapping[str, np.ndarray], start_s: float, end_s: float
) -> list[str]:
    """Flags for readings of ``channel`` rejected within one update period of the window."""
    margin = max(channel.resolution_s, 1e-6)
    flags = []
    for reason, times in rejected.items():
        lo = int(np.searchsorted(times, start_s - margin, side="left"))
        if lo < times.size and times[lo] <= end_s + margin:
            flags.append(REJECTION_FLAGS.get(reason, INVALID_READING))
    return flags


def first_start_after(starts_s: np.ndarray, end_s: float) -> float | None:
    """The first of ``starts_s`` (sorted starts of windows opened after a device sync) at or
    after ``end_s``: the start whose reading a window ending at ``end_s`` shares
    (``edge.Span``'s ``next_synced_start_s``). ``None`` where there is none."""
    k = int(np.searchsorted(starts_s, end_s, side="left"))
    return float(starts_s[k]) if k < len(starts_s) else None


def compute_windows(
    records: Sequence[WindowRecord],
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    clock: ClockModel,
    *,
    idle: Mapping[str, IdleBaseline] | None = None,
    annotate: Annotator | None = None,
    rejected: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    evidence: Mapping[str, Evidence] | None = None,
    opened_s: Sequence[float] = (),
) -> pd.DataFrame:
    """One row per window and integrable channel (one row per window when there is none).

    Args:
        rejected: per channel, when readings that cannot be physical were kept out of its series
            (``SampleStore.rejected_times``); the windows near them are flagged.
        evidence: per counter channel, what its fused power says about each tick interval
            (``edge.Evidence``): its windows then choose each edge's estimator (a window
            opened after a device sync, ``WindowRecord.synced``, may read its start ``anchored``,
            and a window that ends just before such a start reads its end as that start does).
        opened_s: starts of synced windows not in ``records`` (still open as a live window is
            computed): an end edge just before one reads it as the final run will.
    """
    reading = _Reading(
        channels=[c for c in channels.values() if c.integrable],
        series=series,
        counters=counter_ticks(channels, series, evidence or {}),
        idle=idle or {},
        rejected=rejected or {},
        annotate=annotate,
    )
    synced_starts = np.sort(np.array([w.start_s for w in records if w.synced] + list(opened_s), dtype=float))
    rows = []
    for w in records:
        span = Span(
            start_s=w.start_s,
            end_s=w.end_s,
            synced=w.synced,
            next_synced_start_s=first_start_after(synced_starts, w.end_s),
        )
        rows += reading.rows(w, span, clock)
    return window_frame(rows)


def window_frame(rows: Sequence[Mapping]) -> pd.DataFrame:
    """windows.csv's table of ``rows``: its columns in order (those a row lacks empty), then
    the columns the estimates and the sources added, in the order they first came."""
    frame = pd.DataFrame(rows)
    for column in WINDOW_COLUMNS:
        if column not in frame.columns:
            frame[column] = math.nan if column not in TEXT_COLUMNS else ""
    extra = [c for c in frame.columns if c not in WINDOW_COLUMNS]
    return frame[WINDOW_COLUMNS + extra]


@dataclass(frozen=True, kw_only=True)
class _Reading:
    """What every window of a run is read with: the integrable channels, their samples, the
    counters their edges lie between, the idle baselines, the rejected readings, the sources'
    annotations."""

    channels: Sequence[Channel]
    series: Mapping[str, SampleSeries]
    counters: Mapping[str, CounterTicks]
    idle: Mapping[str, IdleBaseline]
    rejected: Mapping[str, Mapping[str, np.ndarray]]
    annotate: Annotator | None

    def rows(self, w: WindowRecord, span: Span, clock: ClockModel) -> list[dict]:
        """The window's rows of windows.csv: one per channel (one without a channel where none
        is integrable)."""
        base = {
            "phase": w.phase,
            "trial": w.trial,
            "start_s": clock.to_unix(w.start_s),
            "end_s": clock.to_unix(w.end_s),
            "duration_s": w.duration_s,
            "iterations": w.iterations,
            "time_per_iter_s": w.duration_s / w.iterations if w.iterations else math.nan,
        }
        if not self.channels:
            return [{**base, "channel": "", "flags": ""}]
        return [self.row(channel, w, span, base) for channel in self.channels]

    def row(self, channel: Channel, w: WindowRecord, span: Span, base: Mapping) -> dict:
        """The window's row on one channel: its energy, bound, per iteration, dynamic energy and
        flags (its own, its rejected readings', the idle baseline's, its source's)."""
        rejected = rejection_flags(channel, self.rejected.get(channel.name, {}), w.start_s, w.end_s)
        note = self.annotate(channel, w.start_s, w.end_s) if self.annotate is not None else WindowAnnotation()
        we = channel_energy(channel, self.series, span, self.counters)
        # readings that could not be placed in time leave the energy unknown
        energy_j = math.nan if any(f in UNKNOWABLE for f in rejected) else we.energy_j
        bound = energy_bound(channel, energy_j, we.random_j, w.duration_s)
        dynamic, idle_flags = dynamic_columns(
            self.idle.get(channel.name), energy_j, bound.total_j, w.duration_s, w.iterations
        )
        return {
            **base,
            "channel": channel.name,
            "energy_j": energy_j,
            "mean_power_w": energy_j / w.duration_s if w.duration_s > 0 else math.nan,
            "energy_per_iter_j": energy_j / w.iterations if w.iterations else math.nan,
            "estimator": we.estimator,
            "energy_bound_j": bound.total_j,
            "energy_bound_pct": bound.pct(energy_j),
            "energy_random_j": bound.random_j,
            "energy_systematic_j": bound.systematic_j,
            **we.columns,
            **dynamic,
            **note.columns,
            "flags": join_flags(dict.fromkeys([*we.flags, *rejected, *idle_flags, *note.flags])),
        }


def off_grid_warnings(windows: pd.DataFrame, channels: Mapping[str, Channel] | None = None) -> list[str]:
    """Per counter with windows flagged ``tick_off_grid`` or ``irregular_ticks``, what happened,
    in one sentence; the channels derived from a counter (``Channel.derived_from``: its fused
    power), whose windows carry the same flags, are left to it where ``channels`` says which."""
    derived = {name for name, c in (channels or {}).items() if c.derived_from}
    out = []
    for column in (TICK_OFF_GRID_COLUMN, TICK_SPREAD_COLUMN):
        if windows.empty or column not in windows.columns:
            continue
        flagged = windows[windows[column].notna()]
        for channel, group in flagged.groupby("channel", sort=False):
            if channel in derived:
                continue
            ms = float(group[column].max())
            if column == TICK_OFF_GRID_COLUMN:
                out.append(
                    f"{channel}: {len(group)} window(s) have a counter tick beside an edge stamped up to "
                    f"{ms:.0f} ms off the counter's update grid: the poller saw the change late (a host short "
                    f"of CPU?); flagged {TICK_OFF_GRID}, their bounds take that distance as the stamp's error"
                )
            else:
                out.append(
                    f"{channel}: the counter's ticks spread {ms:.1f} ms (robust sd) about a regular update "
                    f"grid, more than the {1e3 * REGULAR_SD_S:.0f} ms of a counter polled freely: its poller was "
                    f"late at many ticks (a host short of CPU?), or the counter updates irregularly; its "
                    f"{len(group)} window(s) are flagged {IRREGULAR_TICKS}, and the spread joins each stamp's error "
                    "in their bounds"
                )
    return out
