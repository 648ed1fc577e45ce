"""One run from the parts its ranks measured: what rank 0 saves when several processes measured.

Each rank integrates its own channels over its own windows, on its own clock (``assemble``);
rank 0 receives every rank's part (``RankPart``) and merges them here:

- every channel is renamed ``rank<R>.<name>`` (two ranks on two machines both have a ``gpu0``),
  and each window row says its ``rank`` and ``host``;
- each rank's times move onto rank 0's timeline (the clock offset measured when the run
  started; zero between ranks that share a machine's monotonic clock);
- a ``total`` channel adds up, per window, every rank's own-device channels (the primary
  channels of the first source that runs in every rank: nvml's ``gpuN``), so that a GPU read
  by two sources is counted once; a window where any part is unknown has no total (NaN) and the
  flag ``incomplete-total``;
- the phase summaries are computed over the merged windows (per rank channel, and the total);
- run.json keeps every rank's sources, warnings and notes (``rank R: ...``), and a
  ``distributed`` section; each rank's derived tables are joined with a ``rank`` column, and its
  extra files go to ``rank<R>/``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..core.summary import summarize
from ..core.windows import WINDOW_COLUMNS
from ..model import DerivedTable, join_flags, split_flags
from ..results.meta import RunMeta, SourceRecord
from ..results.result import COMPLETE, RunResult

#: the channel that adds up every rank's own-device channels per window
TOTAL = "total"
#: a total window missing a part (a rank lost, a rank's energy unknown): its energy is NaN
INCOMPLETE_TOTAL = "incomplete-total"
#: the columns a run of several ranks adds to windows.csv, after the standard ones
RANK_COLUMNS = ["rank", "host"]


@dataclass
class RankPart:
    """What one rank sends rank 0 when the run ends.

    Args:
        rank, local_rank, host: who measured it.
        status, reason: how the rank's own run ended (``reason`` ``None`` when complete).
        result: the rank's own run, integrated on its clock, with its derived tables (``None``
            when it failed before measuring anything).
        extra_files: the rank's workload's extra files, by name.
        device_channels: the rank's own-device channels, summed into ``total``.
        work: work per iteration by phase (``{"tokens": 128}``).
    """

    rank: int
    local_rank: int
    host: str
    status: str
    reason: str | None
    result: RunResult | None = None
    extra_files: dict[str, bytes] = field(default_factory=dict)
    device_channels: list[str] = field(default_factory=list)
    work: dict[str, dict[str, float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def prefixed(rank: int, channel: str) -> str:
    """A rank's channel under its run-wide name (``rank1.gpu1``); no channel stays ''."""
    return f"rank{rank}.{channel}" if channel else ""


def _clock_offset(meta: RunMeta) -> float:
    """Unix time minus monotonic time, as the rank's clock anchored it. Units: s."""
    clock = meta.clock
    if clock is None or clock.anchor_wall_s is None or clock.anchor_monotonic_s is None:
        return 0.0
    return clock.anchor_wall_s - clock.anchor_monotonic_s


def rank_shift_s(root_meta: RunMeta, meta: RunMeta, offset_s: float) -> float:
    """What to add to a rank's Unix timestamps to put them on rank 0's timeline: its time is
    rank 0's monotonic time plus ``offset_s``. Units: s."""
    return _clock_offset(root_meta) - _clock_offset(meta) - offset_s


def _rank_windows(part: RankPart, shift_s: float) -> pd.DataFrame:
    assert part.result is not None
    frame = part.result.windows.copy()
    if frame.empty:
        return frame
    frame["start_s"] = frame["start_s"] + shift_s
    frame["end_s"] = frame["end_s"] + shift_s
    frame["channel"] = [prefixed(part.rank, str(c)) for c in frame["channel"].fillna("")]
    frame["rank"] = part.rank
    frame["host"] = part.host
    return frame


def _index_rows(frame: pd.DataFrame) -> tuple[dict[tuple[str, int, str], dict], dict[tuple[str, int], dict]]:
    """The window rows by (phase, trial, channel), and by (phase, trial) each window's first row
    (the window as rank 0, or the first rank, saw it)."""
    indexed: dict[tuple[str, int, str], dict] = {}
    reference_of: dict[tuple[str, int], dict] = {}  # the window as rank 0 (or the first rank) saw it
    for row in frame.to_dict("records"):
        key = (str(row["phase"]), int(row["trial"]))
        indexed[key + (str(row["channel"]),)] = row
        reference_of.setdefault(key, row)
    return indexed, reference_of


def total_windows(
    frame: pd.DataFrame, parts: Mapping[int, RankPart], world_size: int, order: Sequence[tuple[str, int]]
) -> pd.DataFrame:
    """One ``total`` row per window: the sum of every rank's own-device channels, when every
    part is known (else NaN energy and the ``incomplete-total`` flag)."""
    expected = {r: [prefixed(r, c) for c in p.device_channels] for r, p in parts.items()}
    if not any(expected.values()) or frame.empty:
        return pd.DataFrame()
    missing_rank = len(parts) < world_size
    indexed, reference_of = _index_rows(frame)
    rows = []
    for phase, trial in order:
        reference = reference_of.get((phase, trial))
        if reference is None:
            continue
        complete = not missing_rank
        energy = dynamic = 0.0
        has_dynamic = True
        flags: list[str] = []
        for channels in expected.values():
            for channel in channels:
                row = indexed.get((phase, trial, channel))
                value = row.get("energy_j") if row is not None else None
                if row is None or value is None or not math.isfinite(value):
                    complete = False
                    continue
                energy += value
                d = row.get("dynamic_energy_j")
                if d is None or not math.isfinite(d):
                    has_dynamic = False
                else:
                    dynamic += d
                flags.extend(f for f in split_flags(row.get("flags")) if f not in flags)
        if not complete:
            energy = math.nan
            flags.append(INCOMPLETE_TOTAL)
        duration = reference["duration_s"]
        iterations = reference["iterations"]
        row = {
            "phase": phase,
            "trial": trial,
            "channel": TOTAL,
            "start_s": reference["start_s"],
            "end_s": reference["end_s"],
            "duration_s": duration,
            "iterations": iterations,
            "time_per_iter_s": reference["time_per_iter_s"],
            "energy_j": energy,
            "mean_power_w": energy / duration if duration > 0 else math.nan,
            "energy_per_iter_j": energy / iterations if iterations else math.nan,
            "flags": join_flags(flags),
            "rank": pd.NA,
            "host": "",
        }
        if has_dynamic and complete and "dynamic_energy_j" in frame.columns and frame["dynamic_energy_j"].notna().any():
            row["dynamic_energy_j"] = dynamic
            row["dynamic_energy_per_iter_j"] = dynamic / iterations if iterations else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _window_order(parts: Mapping[int, RankPart]) -> list[tuple[str, int]]:
    """Every (phase, trial) in the order rank 0 measured them (then any other rank's)."""
    order: list[tuple[str, int]] = []
    seen: set[tuple[str, int]] = set()
    for rank in sorted(parts):
        result = parts[rank].result
        if result is None or result.windows.empty:
            continue
        for phase, trial in zip(result.windows["phase"], result.windows["trial"]):
            key = (str(phase), int(trial))
            if key not in seen:
                seen.add(key)
                order.append(key)
    return order


def merge_windows(
    parts: Mapping[int, RankPart], shifts: Mapping[int, float], world_size: int
) -> pd.DataFrame:
    """Every rank's windows, renamed and on rank 0's timeline, and the per-window total; rows
    in the order the windows were measured, by rank within a window, the total last."""
    frames = [_rank_windows(p, shifts.get(r, 0.0)) for r, p in sorted(parts.items()) if p.result is not None]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=WINDOW_COLUMNS + RANK_COLUMNS)
    frame = pd.concat(frames, ignore_index=True)
    order = _window_order(parts)
    total = total_windows(frame, parts, world_size, order)
    if not total.empty:
        frame = pd.concat([frame, total], ignore_index=True)
    position = {key: i for i, key in enumerate(order)}
    frame["_window"] = [position.get((str(p), int(t)), len(position)) for p, t in zip(frame["phase"], frame["trial"])]
    frame["_rank"] = [world_size if pd.isna(r) else int(r) for r in frame["rank"]]
    frame = frame.sort_values(["_window", "_rank"], kind="stable").drop(columns=["_window", "_rank"])
    frame["rank"] = frame["rank"].astype("Int64")
    for column in WINDOW_COLUMNS:
        if column not in frame.columns:
            frame[column] = math.nan if column not in ("phase", "channel", "flags") else ""
    frame["flags"] = frame["flags"].fillna("")
    extra = [c for c in frame.columns if c not in WINDOW_COLUMNS + RANK_COLUMNS]
    return frame[WINDOW_COLUMNS + RANK_COLUMNS + extra].reset_index(drop=True)


def merge_samples(parts: Mapping[int, RankPart], shifts: Mapping[int, float]) -> pd.DataFrame:
    """Every rank's samples, channels renamed, on rank 0's timeline."""
    frames = []
    for rank, part in sorted(parts.items()):
        if part.result is None or part.result.samples.empty:
            continue
        samples = part.result.samples.copy()
        samples["channel"] = [prefixed(rank, str(c)) for c in samples["channel"]]
        samples["time_s"] = samples["time_s"] + shifts.get(rank, 0.0)
        frames.append(samples)
    if not frames:
        root = parts.get(0)
        return root.result.samples if root is not None and root.result is not None else pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def merge_tables(parts: Mapping[int, RankPart]) -> list[DerivedTable]:
    """Each derived table once, its rows from every rank with a ``rank`` column first."""
    tables: dict[str, DerivedTable] = {}
    rows: dict[str, list[dict]] = {}
    for rank, part in sorted(parts.items()):
        if part.result is None:
            continue
        for table in part.result.derived:
            tables.setdefault(table.name, table)
            for row in table.rows:
                rows.setdefault(table.name, []).append({"rank": rank, **dict(row)})
    out = []
    for name, table in tables.items():
        display = tuple(table.display)
        if display and "rank" not in display:
            display = ("rank", *display)
        out.append(DerivedTable(name, table.title, rows.get(name, []), table.note, display))
    return out


def _by_channel(parts: Mapping[int, RankPart], key: str) -> dict[str, Any]:
    """A run.json mapping keyed by channel (idle baselines, time maps...), every rank's renamed."""
    out: dict[str, Any] = {}
    for rank, part in sorted(parts.items()):
        mapping: Mapping[str, Any] = getattr(part.result.run_meta, key) if part.result is not None else {}
        for channel, value in mapping.items():
            out[prefixed(rank, str(channel))] = value.to_json() if hasattr(value, "to_json") else value
    return out


def said_by_ranks(said: Mapping[int, Sequence[str]]) -> list[str]:
    """Rank 0's messages as they are, then the other ranks', each text once with the ranks that
    said it (``rank 1: ...``, ``ranks 1, 2, 3: ...``)."""
    out = list(dict.fromkeys(said.get(0, [])))
    by_text: dict[str, list[int]] = {}
    for rank, messages in sorted(said.items()):
        if rank != 0:
            for text in dict.fromkeys(messages):
                by_text.setdefault(text, []).append(rank)
    for text, ranks in by_text.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)
        out.append(f"{who}: {text}")
    return out


def _rank_sources(rank: int, sources: Sequence[SourceRecord]) -> list[dict[str, Any]]:
    out = []
    for source in sources:
        record = source.to_json()
        record["rank"] = rank
        record["channels"] = [c.renamed(lambda name: prefixed(rank, name)).to_json() for c in source.channels]
        out.append(record)
    return out


def merge_meta(
    parts: Mapping[int, RankPart],
    *,
    status: str,
    reason: str | None,
    distributed: Mapping[str, Any],
    has_total: bool,
    tables: Sequence[DerivedTable],
) -> dict[str, Any]:
    """run.json of the merged run: rank 0's, with every rank's sources, channels, warnings and
    notes, the derived tables joined, and the ``distributed`` section."""
    root = parts[0]
    meta: dict[str, Any] = dict(root.result.meta) if root.result is not None else {}
    meta["status"] = status
    meta["reason"] = reason
    sources, primary = [], []
    warnings: dict[int, list[str]] = {}
    notes: dict[int, list[str]] = {}
    for rank, part in sorted(parts.items()):
        own = part.result.run_meta if part.result is not None else RunMeta()
        sources += _rank_sources(rank, own.sources)
        primary += [prefixed(rank, c) for c in own.primary_channels]
        warnings[rank] = list(own.warnings) if part.result is not None else list(part.warnings)
        notes[rank] = list(own.notes)
    meta["sources"] = sources
    meta["primary_channels"] = primary + ([TOTAL] if has_total else [])
    meta["warnings"] = said_by_ranks(warnings)
    meta["notes"] = said_by_ranks(notes)
    for key in ("idle_baseline", "time_maps", "rejected_samples", "alignment"):
        meta[key] = _by_channel(parts, key)
    meta["derived"] = [t.to_json() for t in tables]
    meta["distributed"] = dict(distributed)
    return meta


def merge_parts(
    parts: Mapping[int, RankPart],
    offsets: Mapping[int, float],
    *,
    world_size: int,
    status: str,
    reason: str | None,
    distributed: Mapping[str, Any],
) -> RunResult:
    """The run of every rank, as rank 0 saves it (see the module's description).

    Args:
        parts: what each rank sent, by rank (rank 0's always; a lost rank's is absent).
        offsets: each rank's monotonic clock minus rank 0's. Units: s.
        world_size: the ranks the run had.
        status, reason: how the whole run ended.
        distributed: run.json's ``distributed`` section.
    """
    root = parts[0]
    root_meta = root.result.run_meta if root.result is not None else RunMeta()
    shifts = {
        r: rank_shift_s(root_meta, p.result.run_meta, offsets.get(r, 0.0)) if p.result is not None and r else 0.0
        for r, p in parts.items()
    }
    windows = merge_windows(parts, shifts, world_size)
    has_total = bool(len(windows)) and bool((windows["channel"] == TOTAL).any())
    # a rank without channels has timing rows only; rank 0's stand for the run's timing
    timing_only = (windows["channel"] == "") & (windows["rank"].fillna(0) != 0) if len(windows) else None
    counted = windows[~timing_only] if timing_only is not None else windows
    work: dict[str, dict[str, float]] = {}
    for _rank, part in sorted(parts.items(), reverse=True):
        work.update(part.work)
    summaries = tuple(summarize(counted, work))
    tables = merge_tables(parts)
    meta = merge_meta(
        parts, status=status, reason=reason, distributed=distributed, has_total=has_total, tables=tables
    )
    return RunResult(meta, windows, merge_samples(parts, shifts), summaries)


def run_status(parts: Mapping[int, RankPart], world_size: int, ended: str | None) -> tuple[str, str | None]:
    """How the merged run ended: complete only when every rank's part came and said so."""
    from ..results.result import INCOMPLETE

    if ended:
        return INCOMPLETE, ended
    missing = [r for r in range(world_size) if r not in parts]
    if missing:
        ranks = ", ".join(str(r) for r in missing)
        return INCOMPLETE, f"the measurements of rank(s) {ranks} did not reach rank 0"
    failed = [(r, p.reason) for r, p in sorted(parts.items()) if p.status != COMPLETE]
    if failed:
        return INCOMPLETE, "; ".join(f"rank {r}: {why or 'incomplete'}" for r, why in failed)
    return COMPLETE, None


__all__ = [
    "INCOMPLETE_TOTAL",
    "RANK_COLUMNS",
    "TOTAL",
    "RankPart",
    "merge_parts",
    "merge_samples",
    "merge_tables",
    "merge_windows",
    "prefixed",
    "rank_shift_s",
    "run_status",
    "total_windows",
]
