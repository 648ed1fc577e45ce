"""From what a run recorded to its result, as a straight pipeline, one function per step:

    samples -> placement (timing semantics, alignment) -> fused power -> windows -> summaries
            -> derived tables -> metadata -> files

Each step takes what the previous one produced; nothing is assigned from outside. The live
``Measurement`` and the recovery of a run that died (``recover``) both end here.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.align import MeterAligner
from ..core.clock import ChannelTimeMap, ClockModel
from ..core.edges import Evidence
from ..core.fusion import FUSED_SUFFIX, FusionResult, fused_channels
from ..core.samples import SampleSeries
from ..core.windows import (
    IdleBaseline,
    WindowRecord,
    compute_windows,
    idle_baselines,
    idle_warnings,
    summarize,
)
from ..errors import StoreError
from ..model import Channel, DerivedTable, Timing, WindowAnnotation
from ..plugin import PowerSource, Workload
from ..results.provenance import run_provenance, source_record
from ..results.result import RunResult
from ..results.store import FORMAT_VERSION, write_bytes

log = logging.getLogger("energyframe")

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
        work: work per iteration by phase (``{"tokens": 128}``).
        sources: the power sources, for provenance and per-window annotations.
        interrupted: the windows (phase, trial) a Ctrl-C or SIGTERM closed before their work
            ended: kept, and flagged ``interrupted``.
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
    work: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    sources: Sequence[PowerSource] = ()
    interrupted: frozenset[tuple[str, int]] = frozenset()


#: the flag of a window closed by a Ctrl-C or SIGTERM before its work ended
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Placement:
    """Samples placed on the run's timeline, and how each channel was moved."""

    series: Mapping[str, SampleSeries]
    time_maps: Mapping[str, ChannelTimeMap]
    alignment: Mapping[str, Any] | None
    #: per counter channel, what its fused power says about each tick interval (``edges.py``)
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


def place_samples(
    recording: Recording, aligner: TimeAligner | str | None, warn: Warn
) -> Placement:
    """Apply each channel's timing semantics; estimate the lag of channels of unknown timing."""
    maps = timing_maps(recording.channels)
    report = None
    if aligner == "auto":
        late = any(c.timing == Timing.UNKNOWN and c.integrable for c in recording.channels.values())
        aligner = MeterAligner() if late else None
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
    """Add a secondary ``NAME.fused`` power channel for each energy counter that comes with fine
    power samples (NVML's ``gpu0`` and ``gpu0.power_samples``): the counter's energy between its
    ticks, shaped inside each tick interval by the samples (``fusion.py``, docs/power-sources.md).

    It works on the placed series, so the counter's and the samples' time maps are applied
    first. The fused channel belongs to the counter's source. A failure only leaves it out.
    """
    report: dict[str, Any] = {}
    results: dict[str, FusionResult] = {}
    try:
        channels, series = fused_channels(recording.channels, placement.series, report, results=results)
        evidence = {name: Evidence.of(result) for name, result in results.items()}
    except Exception as e:  # a second view of the counter: never worth the run
        warn(f"fused power left out: {type(e).__name__}: {e}")
        return recording, placement, {}
    added = [n for n in channels if n not in recording.channels]
    if not added:
        return recording, placement, {}
    owners = dict(recording.channel_source)
    for name in added:
        counter = name[: -len(FUSED_SUFFIX) - 1]
        if counter in owners:
            owners[name] = owners[counter]
    return (
        replace(recording, channels=channels, channel_source=owners),
        replace(placement, series=series, evidence=evidence),
        report,
    )


# -- 2. windows -----------------------------------------------------------------------------------
Annotate = Callable[[Channel, float, float], WindowAnnotation]


def source_annotator(recording: Recording, placed: Mapping[str, SampleSeries], warn: Warn) -> Annotate:
    """Per-window columns and flags from the source that owns each channel (clocks, throttling)."""
    by_name = {s.name: s for s in recording.sources}
    own: dict[str, dict[str, SampleSeries]] = {}
    for channel, source in recording.channel_source.items():
        own.setdefault(source, {})[channel] = placed[channel]

    def annotate(channel: Channel, start_s: float, end_s: float) -> WindowAnnotation:
        name = recording.channel_source.get(channel.name)
        source = by_name.get(name) if name is not None else None
        if source is None or name is None:
            return WindowAnnotation()
        try:
            return source.annotate(channel, start_s, end_s, own[name])
        except Exception as e:  # an annotation is extra; it must not lose the window
            warn(f"{source.name!r} could not annotate a window: {type(e).__name__}: {e}")
            return WindowAnnotation()

    return annotate


def integrate(
    recording: Recording, placement: Placement, annotate: Annotate | None
) -> tuple[pd.DataFrame, dict[str, IdleBaseline]]:
    """Every window's energy on every channel, and the idle baselines they subtract."""
    idle: dict[str, IdleBaseline] = {}
    if recording.idle_window is not None:
        idle = idle_baselines(recording.idle_window, recording.channels, placement.series, placement.evidence)
    windows = compute_windows(
        recording.records,
        recording.channels,
        placement.series,
        recording.clock,
        idle,
        annotate,
        placed_rejections(recording.rejected, placement.time_maps),
        placement.evidence,
    )
    return windows, idle


def flag_windows(windows: pd.DataFrame, which: frozenset[tuple[str, int]], flag: str) -> pd.DataFrame:
    """``windows`` with ``flag`` added to the rows of the (phase, trial) pairs in ``which``."""
    if not which or windows.empty:
        return windows
    windows = windows.copy()
    hit = [(str(p), int(t)) in which for p, t in zip(windows["phase"], windows["trial"])]
    windows.loc[hit, "flags"] = [
        ";".join([f for f in str(old or "").split(";") if f] + [flag]) for old in windows.loc[hit, "flags"]
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


# -- 3. derived tables ----------------------------------------------------------------------------
def derive_tables(workload: Workload | None, result: RunResult, warn: Warn) -> list[DerivedTable]:
    """The workload's own figures computed from the measured phases (never losing the run)."""
    if workload is None or result.windows.empty:
        return []
    try:
        return list(workload.derive(result))
    except Exception as e:  # derived figures must never lose the measured ones
        warn(f"derived figures could not be computed: {type(e).__name__}: {e}")
        return []


# -- 4. metadata ----------------------------------------------------------------------------------
def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def run_meta(
    *,
    status: str,
    reason: str | None,
    started_at: str | None,
    ended: bool,
    clock: ClockModel,
    sources: Sequence[PowerSource],
    source_channels: Mapping[str, Sequence[Channel]],
    extra: Mapping[str, Any],
    notes: Sequence[str],
    warnings: Sequence[str],
) -> dict[str, Any]:
    """run.json's fields; ``extra`` (workload, config, alignment...) is merged in last."""
    channels = [c for s in sources for c in source_channels.get(s.name, ())]
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "status": status,
        "reason": reason,
        "started_at": started_at,
        "ended_at": utc_now() if ended else None,
        **run_provenance(),
        "clock": clock.to_json(),
        "sources": [source_record(s, source_channels.get(s.name, ())) for s in sources],
        "primary_channels": [c.name for c in channels if c.primary and c.integrable],
        "notes": list(notes),
        "warnings": list(warnings),
    }
    meta.update(extra)
    return meta


def placement_meta(placement: Placement, idle: Mapping[str, IdleBaseline], recording: Recording) -> dict:
    """What was done to the samples before integrating: shifts, idle baseline, rejections."""
    out: dict[str, Any] = {
        "idle_baseline": {
            n: {"power_w": b.power_w, "bound_w": b.bound_w, "duration_s": b.duration_s, "flags": list(b.flags)}
            for n, b in idle.items()
        },
        "time_maps": {
            n: {"lag_s": m.lag_s, "drift": m.drift, "reference_s": m.reference_s}
            for n, m in placement.time_maps.items()
        },
        "rejected_samples": {n: dict(c) for n, c in recording.rejected_counts.items()},
    }
    if placement.alignment is not None:
        out["alignment"] = placement.alignment
    return out


# -- the pipeline ---------------------------------------------------------------------------------
def assemble(
    recording: Recording,
    meta: Mapping[str, Any],
    workload: Workload | None,
    aligner: TimeAligner | str | None,
    warnings: list[str],
) -> RunResult:
    """The result of a run: placement -> windows -> summaries -> derived tables -> metadata.

    ``meta`` is run.json as far as the caller knows it; ``warnings`` is the run's list, which
    the steps append to (the final run.json carries them all).
    """

    def warn(message: str) -> None:
        if message not in warnings:
            warnings.append(message)

    placement = place_samples(recording, aligner, warn)
    recording, placement, fusion = add_fused_power(recording, placement, warn)
    annotate = source_annotator(recording, placement.series, warn)
    windows, idle = integrate(recording, placement, annotate)
    windows = flag_windows(windows, recording.interrupted, INTERRUPTED)
    for message in idle_warnings(windows, idle):
        warn(message)
    summaries = tuple(summarize(windows, recording.work))
    full_meta = {**meta, **placement_meta(placement, idle, recording)}
    if fusion:
        full_meta["fusion"] = fusion
    result = RunResult(full_meta, windows, recording.samples, summaries)
    tables = derive_tables(workload, result, warn)
    final = {**full_meta, "derived": [t.to_json() for t in tables], "warnings": list(warnings)}
    return replace(result, meta=final)


def save(result: RunResult, out: Path, workload: Workload | None, warn: Warn) -> None:
    """Write the run directory, then the workload's extra files (a failing report never loses
    the run: the standard files are written first)."""
    result.save(out)
    if workload is None:
        return
    save_files(out, extra_files(result, workload, warn), warn, label=f"workload {workload.name!r}")


def extra_files(result: RunResult, workload: Workload, warn: Warn) -> dict[str, bytes]:
    """The workload's extra files for ``result``, by name (none when it measured nothing, or
    when the workload fails to make them: that is warned, never fatal)."""
    if result.windows.empty:
        return {}
    try:
        return dict(workload.extra_files(result))
    except Exception as e:  # a report that fails must not lose the run
        warn(f"extra files could not be written: {type(e).__name__}: {e}")
        return {}


def save_files(out: Path, files: Mapping[str, bytes], warn: Warn, label: str = "the workload") -> None:
    """Write ``files`` into ``out``; only plain file names are written."""
    for name, data in files.items():
        if "/" in name or "\\" in name or name.startswith(".") or not name:
            warn(f"{label} asked for an extra file named {name!r}; only plain file names are written")
            continue
        try:
            write_bytes(out / name, data)
        except StoreError as e:
            warn(str(e))
