"""The steps from what a run recorded to its windows, shared by a live run (``lifecycle/
assemble.py``), the rebuilding of a run that died (``results/load.py``) and logs analysed
offline (``offline/analyze.py``): the recording, placement of every sample on the run's
timeline (timing semantics, a wall meter's alignment), and each window's energy.

Pure functions of recorded data: no plugin, no file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ..model import Channel, Timing, WindowAnnotation, join_flags, split_flags
from .align import MeterAligner
from .clock import ChannelTimeMap, ClockModel
from .edge import Evidence
from .edge.errors import stamp_sd_s
from .fusion import FusionResult, fused_channels
from .idle import IdleBaseline
from .samples import SampleSeries
from .windows import WindowRecord, compute_windows, idle_baselines

#: called after the run with every channel and its samples; returns per-channel time corrections
#: (a wall meter's lag and drift)
TimeAligner = Callable[
    [Mapping[str, Channel], Mapping[str, SampleSeries], Sequence[WindowRecord]], Mapping[str, ChannelTimeMap]
]
Warn = Callable[[str], None]


@dataclass(frozen=True)
class Recording:
    """Everything a run recorded, before anything is derived from it.

    Args:
        clock: the run's (wall, monotonic) anchors.
        channels: every channel by name; ``channel_source`` names the source of each.
        series: each channel's accepted samples on the monotonic timeline. Units: s.
        samples: the raw record (samples.parquet's columns, rejected readings included).
        rejected: per channel and reason, when readings were kept out of ``series``.
        records: the measured windows, in order.
        idle_window: the idle-baseline window, if one was measured.
        idle_baselines: idle baselines known already (a run's own samples read offline).
        work: work per iteration by phase (``{"tokens": 128}``).
        sources: the power sources, for provenance and per-window annotations.
        interrupted: the windows (phase, trial) a Ctrl-C or SIGTERM closed before their work
            ended: kept, and flagged ``interrupted``.
        opened_s: starts of windows opened after a device sync that ``records`` does not hold
            (still open, or closed after a live window's snapshot; monotonic s): a window ending
            just before one reads its end edge as that start does (``edge.estimators``).
    """

    clock: ClockModel
    channels: Mapping[str, Channel]
    channel_source: Mapping[str, str]
    series: Mapping[str, SampleSeries]
    samples: pd.DataFrame
    rejected: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    rejected_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    records: Sequence[WindowRecord] = ()
    idle_window: WindowRecord | None = None
    idle_baselines: Mapping[str, IdleBaseline] = field(default_factory=dict)
    work: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    sources: Sequence[Any] = ()  # the PowerSource instances
    interrupted: frozenset[tuple[str, int]] = frozenset()
    opened_s: Sequence[float] = ()


@dataclass(frozen=True)
class Placement:
    """Samples placed on the run's timeline, and how each channel was moved."""

    series: Mapping[str, SampleSeries]
    time_maps: Mapping[str, ChannelTimeMap]
    alignment: Mapping[str, Any] | None
    #: per counter channel, what its fused power says about each tick interval (``edge``)
    evidence: Mapping[str, Evidence] = field(default_factory=dict)


# -- 1. placement ---------------------------------------------------------------------------------
def timing_maps(channels: Mapping[str, Channel]) -> dict[str, ChannelTimeMap]:
    """The fixed shifts the channels' declared timing implies: a ``PERIOD_END`` reading moves to
    the middle of the period it averages. ``EXACT`` readings stay; ``UNKNOWN`` ones are aligned."""
    return {
        name: ChannelTimeMap(lag_s=c.averaging_s / 2)
        for name, c in channels.items()
        if c.timing == Timing.PERIOD_END and c.averaging_s > 0
    }


def _late(channels: Mapping[str, Channel]) -> bool:
    """Whether a channel integrated in windows arrives late by an unknown amount (a wall meter)."""
    return any(c.timing == Timing.UNKNOWN and c.integrable for c in channels.values())


def place_samples(
    recording: Recording, aligner: TimeAligner | str | None, warn: Warn
) -> Placement:
    """Apply each channel's timing semantics; estimate the lag of channels of unknown timing."""
    maps = timing_maps(recording.channels)
    report = None
    if aligner == "auto":
        aligner = MeterAligner() if _late(recording.channels) else None
    if aligner is not None and not isinstance(aligner, str):
        try:
            maps.update(aligner(recording.channels, recording.series, recording.records))
        except Exception as e:  # alignment is a correction; without it the raw times stand
            warn(f"time alignment failed, raw timestamps used: {type(e).__name__}: {e}")
        if isinstance(aligner, MeterAligner):
            report = aligner.report()
            for warning in aligner.warnings:
                warn(warning)
    placed = {n: s.shifted(maps.get(n, ChannelTimeMap())) for n, s in recording.series.items()}
    return Placement(placed, maps, report)


# -- 1b. fused power ------------------------------------------------------------------------------
def add_fused_power(
    recording: Recording, placement: Placement, warn: Warn
) -> tuple[Recording, Placement, dict[str, Any]]:
    """Add a secondary ``NAME.fused`` power channel for each energy counter that declares the fine
    power samples that shape it (``Channel.shaped_by``: NVML's ``gpu0`` by ``gpu0.power_samples``):
    the counter's energy between its ticks, shaped inside each tick interval by the samples
    (``fusion.py``, docs/power-sources.md).

    It works on the placed series, so the counter's and the samples' time maps are applied
    first. The fused channel belongs to the counter's source. A failure only leaves it out.
    """
    report: dict[str, Any] = {}
    results: dict[str, FusionResult] = {}
    try:
        channels, series = fused_channels(recording.channels, placement.series, report, results=results)
        evidence = {name: Evidence.of(result, stamp_sd_s(channels[name])) for name, result in results.items()}
    except Exception as e:  # a second view of the counter: never worth the run
        warn(f"fused power left out: {type(e).__name__}: {e}")
        return recording, placement, {}
    added = [n for n in channels if n not in recording.channels]
    if not added:
        return recording, placement, {}
    owners = dict(recording.channel_source)
    for name in added:
        counter = channels[name].derived_from
        if counter in owners:
            owners[name] = owners[counter]
    return (
        replace(recording, channels=channels, channel_source=owners),
        replace(placement, series=series, evidence=evidence),
        report,
    )


# -- 2. windows -----------------------------------------------------------------------------------
Annotate = Callable[[Channel, float, float], WindowAnnotation]


def integrate(
    recording: Recording, placement: Placement, annotate: Annotate | None
) -> tuple[pd.DataFrame, dict[str, IdleBaseline]]:
    """Every window's energy on every channel, and the idle baselines they subtract."""
    idle: dict[str, IdleBaseline] = dict(recording.idle_baselines)
    if recording.idle_window is not None:
        idle = idle_baselines(recording.idle_window, recording.channels, placement.series, placement.evidence)
    windows = compute_windows(
        recording.records,
        recording.channels,
        placement.series,
        recording.clock,
        idle=idle,
        annotate=annotate,
        rejected=placed_rejections(recording.rejected, placement.time_maps),
        evidence=placement.evidence,
        opened_s=recording.opened_s,
    )
    return windows, idle


def flag_windows(windows: pd.DataFrame, which: frozenset[tuple[str, int]], flag: str) -> pd.DataFrame:
    """``windows`` with ``flag`` added to the rows of the (phase, trial) pairs in ``which``."""
    if not which or windows.empty:
        return windows
    windows = windows.copy()
    hit = [(str(p), int(t)) in which for p, t in zip(windows["phase"], windows["trial"])]
    windows.loc[hit, "flags"] = [
        join_flags([*split_flags(old), flag]) for old in windows.loc[hit, "flags"]
    ]
    return windows


def placed_rejections(
    rejected: Mapping[str, Mapping[str, np.ndarray]], maps: Mapping[str, ChannelTimeMap]
) -> dict[str, dict[str, np.ndarray]]:
    """The times of rejected readings moved as their channel's accepted samples were, so that a
    window is flagged for the readings that fell inside it on the run's timeline."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for channel, by_reason in rejected.items():
        time_map = maps.get(channel, ChannelTimeMap())
        out[channel] = {
            reason: times if time_map.is_identity else np.asarray(time_map.apply(np.asarray(times, dtype=float)))
            for reason, times in by_reason.items()
        }
    return out
