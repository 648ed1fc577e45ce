"""From what a run recorded to its result, as a straight pipeline, one function per step:

    samples -> placement (timing semantics, alignment) -> fused power -> windows -> summaries
            -> derived tables -> metadata

Each step takes what the previous one produced; nothing is assigned from outside. A live run
(``finisher.py``) and an offline analysis (``offline/analyze.py``) both end here; the run
directory is written by ``writer.RunWriter``, which takes the workload's files from
``extra_files`` and writes them with ``save_files``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.clock import ClockModel
from ..core.idle import IdleBaseline, idle_warnings
from ..core.pipeline import (
    Annotate,
    Placement,
    Recording,
    TimeAligner,
    Warn,
    add_fused_power,
    flag_windows,
    integrate,
    place_samples,
)
from ..core.samples import DUPLICATE, SampleSeries
from ..core.summary import summarize
from ..core.vocabulary import INTERRUPTED
from ..core.windows import off_grid_warnings
from ..errors import StoreError
from ..model import Channel, DerivedTable, WindowAnnotation, primary_channel_names
from ..plugin import PowerSource, Workload
from ..results.provenance import run_provenance, source_record
from ..results.result import RunResult
from ..results.store import FORMAT_VERSION, write_bytes


# -- 1. placement ---------------------------------------------------------------------------------
def merged_readings(recording: Recording) -> list[str]:
    """What the run says of channels that gave several readings at one instant (averaged)."""
    out = []
    for name, counts in recording.rejected_counts.items():
        n = counts.get(DUPLICATE, 0)
        if n and name in recording.channels and recording.channels[name].integrable:
            out.append(
                f"channel {name!r} gave {n} reading(s) at an instant it had already given one for; the "
                "readings of each instant were averaged and the windows around them are flagged duplicate_samples"
            )
    return out


# -- windows -----------------------------------------------------------------------------------
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
        "primary_channels": primary_channel_names(channels),
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
    for message in merged_readings(recording):
        warn(message)
    recording, placement, fusion = add_fused_power(recording, placement, warn)
    annotate = source_annotator(recording, placement.series, warn)
    windows, idle = integrate(recording, placement, annotate)
    windows = flag_windows(windows, recording.interrupted, INTERRUPTED)
    for message in [*idle_warnings(windows, idle), *off_grid_warnings(windows, recording.channels)]:
        warn(message)
    summaries = tuple(summarize(windows, recording.work))
    full_meta = {**meta, **placement_meta(placement, idle, recording)}
    if fusion:
        full_meta["fusion"] = fusion
    result = RunResult(full_meta, windows, recording.samples, summaries)
    tables = derive_tables(workload, result, warn)
    final = {**full_meta, "derived": [t.to_json() for t in tables], "warnings": list(warnings)}
    return replace(result, meta=final)


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
