"""Offline analysis: power logs recorded elsewhere, over windows given afterwards.

Power logs are read by ``energyframe.offline.logs`` (samples.parquet, the earlier tool's WattsUp?
CSV, nvidia-smi CSV logs, ``time_s,power_w`` CSVs) into channels and sample series; windows come
from ``inputs`` (a run directory, the earlier tool's timing JSON, ``START,END``).

Each log then goes through the live run's own pipeline: it becomes a ``Recording`` (its
samples on a timeline that starts at the first window, readings that cannot be physical set
apart by the core's rule, ``samples.accept``) and ``assemble`` places, integrates and flags it.
So the placement (half a period for a 1-s average, ``MeterAligner`` for a wall meter), the
alignment and the rejection rule are the live run's, written once; ``placement.LogAligner`` adds
only what an offline analysis knows (a stated ``--lag``, a run's own time maps, a reference from
``--run``). ``windows.csv`` has the run's columns (and ``log`` after them); ``energy_report.json``
has the earlier tool's fields, the rows left out per window and per log, and every warning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.clock import ChannelTimeMap, ClockModel, ClockPair
from ..core.idle import IdleBaseline
from ..core.pipeline import Recording, placed_rejections
from ..core.samples import IMPLAUSIBLE, MISSING, NEGATIVE, NOT_FINITE, Rejected, SampleSeries
from ..core.vocabulary import INVALID_READING
from ..core.windows import REJECTION_FLAGS, WINDOW_COLUMNS, WindowRecord
from ..errors import EnergyFrameError, UsageError
from ..lifecycle.assemble import assemble
from ..lifecycle.config import MAX_SECONDS
from ..model import Channel, Quantity, split_flags
from ..results.paths import out_path
from ..results.result import RunResult
from ..results.store import json_safe, write_csv, write_json
from .inputs import Window, check_windows, window_from_text, windows_from_run, windows_from_timing
from .logs import SAMPLES, PowerLog, parse_time, plausible, read_log, zone
from .logs.timestamps import iso
from .placement import LogAligner, LogSource, Reference, placement_text, recorded_map

__all__ = [
    "METHOD",
    "PowerLog",
    "Window",
    "analyze",
    "check_lag",
    "load_power_log",
    "parse_time",
    "window_from_text",
    "windows_from_run",
    "windows_from_timing",
    "zone",
]

#: the window flag of each reason a row was left out (the core's; any other reason, such as a
#: value in a unit its header does not promise, is an invalid reading)
FLAG_OF = REJECTION_FLAGS

#: how the energy is computed (energy_report.json says it)
METHOD = "piecewise-linear power integrated over the window, edges interpolated"


def load_power_log(path: Path | str, tz: str | None = None) -> PowerLog:
    """Read a power log of any kind ``energyframe.offline.logs`` knows."""
    return read_log(path, tz)


class _Run:
    """The run directory given with ``--run``: its clock, samples and descriptions, read once."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._meta: dict | None = None
        self._samples: PowerLog | None = None

    @property
    def meta(self) -> dict:
        """run.json, read when first needed (a run's windows.csv alone is enough for windows)."""
        from ..results.store import read_meta

        if self._meta is None:
            self._meta = read_meta(self.directory)
        return self._meta

    @property
    def samples(self) -> PowerLog | None:
        """The run's samples (those a run that died left in samples.partial.csv too), if any."""
        if self._samples is None:
            for name in ("samples.parquet", "samples.partial.csv"):
                if (self.directory / name).exists():
                    self._samples = read_log(self.directory / name)
                    break
        return self._samples

    def owns(self, log: PowerLog) -> bool:
        return log.kind == SAMPLES and log.path.resolve().parent == self.directory.resolve()

    def reference(self, ref_s: float) -> Reference:
        """The run's channels measured on its own clock, on the offline timeline, to align a
        wall-meter log against (or why there are none)."""
        name = str(self.directory)
        try:
            samples = self.samples
        except UsageError as e:  # a timing-only run's samples hold nothing to align against
            return Reference(name, {}, {}, str(e))
        if samples is None:
            return Reference(name, {}, {}, f"{self.directory} has no samples.parquet")
        channels, series = {}, {}
        for channel_name, channel in samples.channels.items():
            if channel.integrable:
                kept = plausible(samples, channel_name)[0]
                channels[channel_name] = channel
                series[channel_name] = SampleSeries(kept.times_s - ref_s, kept.values)
        if not channels:
            return Reference(
                name, {}, {}, f"{self.directory} has no GPU or CPU power channel to align against"
            )
        return Reference(name, channels, series)

    def idle(self, log: PowerLog, names: Sequence[str]) -> dict[str, IdleBaseline]:
        """The run's idle baselines, for its own samples only (another log's ``gpu0`` is another GPU)."""
        if not self.owns(log):
            return {}
        out = {}
        for name, data in (self.meta.get("idle_baseline") or {}).items():
            if name in names and isinstance(data, dict):
                power = data.get("power_w")
                out[name] = IdleBaseline(
                    name,
                    math.nan if power is None else float(power),
                    float(data.get("duration_s") or 0.0),
                    tuple(data.get("flags") or ()),
                )
        return out


# -- one log through the live pipeline -------------------------------------------------------------


@dataclass(frozen=True)
class _Analysed:
    """One log, assembled: its windows, how each channel was placed, and what was left out."""

    log: PowerLog
    result: RunResult
    kept: Mapping[str, SampleSeries]  # per channel, on the offline timeline, as integrated (unplaced)
    rejected: Mapping[str, Rejected]  # per channel, on the offline timeline (unplaced)
    maps: Mapping[str, ChannelTimeMap]
    aligner: LogAligner

    def placed(self, name: str) -> SampleSeries:
        return self.kept[name].shifted(self.maps.get(name, ChannelTimeMap()))

    def placed_rejected(self, name: str) -> dict[str, np.ndarray]:
        return placed_rejections({name: self.rejected[name].times()}, self.maps).get(name, {})

    def placement(self, name: str) -> str:
        channel = self.log.channels[name]
        return placement_text(channel, self.maps.get(name, ChannelTimeMap()), self.aligner.how)


def _analyse(
    log: PowerLog,
    records: Sequence[WindowRecord],
    clock: ClockModel,
    lag_s: float | None,
    run: _Run | None,
    warnings: list[str],
) -> _Analysed:
    """``log`` as a ``Recording`` through ``assemble``; ``warnings`` gets what assembling says."""
    ref_s = clock.start.offset_s
    channels = {n: c for n, c in log.channels.items() if c.integrable}
    kept, rejected = {}, {}
    for name in channels:
        series, left_out = plausible(log, name)
        kept[name] = SampleSeries(series.times_s - ref_s, series.values)
        rejected[name] = _shifted(left_out, -ref_s)
    source = LogSource(name=log.path.name)
    recording = Recording(
        clock=clock,
        channels=channels,
        channel_source={n: source.name for n in channels},
        series=kept,
        samples=pd.DataFrame(),
        rejected={n: r.times() for n, r in rejected.items()},
        # counted in energy_report.json; what was merged the reader has said already
        rejected_counts={},
        records=records,
        idle_baselines=run.idle(log, list(channels)) if run is not None else {},
        sources=[source],
    )
    aligner = _aligner(log, channels, ref_s, lag_s, run)
    result = assemble(recording, {}, None, aligner, warnings)
    maps = {
        n: ChannelTimeMap(float(m["lag_s"]), float(m["drift"]), float(m["reference_s"]))
        for n, m in (result.meta.get("time_maps") or {}).items()
    }
    return _Analysed(log, result, kept, rejected, maps, aligner)


def _aligner(
    log: PowerLog, channels: Mapping[str, Channel], ref_s: float, lag_s: float | None, run: _Run | None
) -> LogAligner:
    recorded = _recorded_maps(log, channels, ref_s)
    reference = None
    needs_one = any(c.timing.value == "unknown" and n not in recorded for n, c in channels.items())
    if run is not None and lag_s is None and needs_one and log.kind != SAMPLES:
        reference = run.reference(ref_s)
    return LogAligner(log.path.name, lag_s, recorded, reference)


def _recorded_maps(log: PowerLog, channels: Mapping[str, Channel], ref_s: float) -> dict[str, ChannelTimeMap]:
    """The time maps a run recorded for its own samples' channels, on the offline timeline
    (none for any other log)."""
    maps = (log.run_meta or {}).get("time_maps") if log.kind == SAMPLES else None
    if not isinstance(maps, dict):
        return {}
    return {
        n: recorded_map(m, log.run_meta, ref_s, n)
        for n, m in maps.items()
        if n in channels and isinstance(m, dict)
    }


def _shifted(rejected: Rejected, by_s: float) -> Rejected:
    times = {r: [t + by_s for t in ts] for r, ts in rejected.times_s.items()}
    return Rejected(dict(rejected.counts), times, {r: list(v) for r, v in rejected.values.items()})


# -- checks and the report --------------------------------------------------------------------------


def _check_inputs(logs: Sequence[PowerLog], windows: Sequence[Window], lag_s: float | None) -> None:
    """Refuse analyze's input before anything is integrated.

    Raises:
        UsageError: no log, no window, a window ending first, an edge or a lag that is no time.
    """
    if not logs:
        raise UsageError("give at least one --power-log")
    if not windows:
        raise UsageError("give the windows: --run DIR, --timing FILE or --window START,END")
    check_windows(list(windows), "a window")
    for window in windows:
        if not window.end_s > window.start_s:
            raise UsageError(f"window {window.name} ends before it starts")
    check_lag(lag_s)


def check_lag(lag_s: float | None) -> None:
    """Refuse a stated lag that is no number of seconds, or more than a day either way.

    Raises:
        UsageError: naming the value and the range.
    """
    if lag_s is not None and not (math.isfinite(lag_s) and abs(lag_s) <= MAX_SECONDS):
        raise UsageError(
            f"--lag must be a finite number of seconds, at most {MAX_SECONDS:g} (one day) either way, got {lag_s!r}"
        )


def _check_covered(done: _Analysed, name: str, windows: Sequence[Window], ref_s: float) -> list[str]:
    """Windows outside the span of the log's primary channel: an error when none is inside it
    (a wrong log, or a time zone), else a warning; those windows get NaN and ``uncovered`` as
    in a live run (a run killed before its last samples were drained)."""
    span = _placed_span(done, name, ref_s)
    outside = [w for w in windows if not _covers(span, w, ref_s)]
    if not outside:
        return []
    lo, hi = (span[0] + ref_s, span[1] + ref_s) if span is not None else (math.nan, math.nan)
    where = done.log.path.name
    if len(outside) == len(windows):
        raise _uncovered(outside[0], f"{where} channel {name}", span is not None, lo, hi)
    names = ", ".join(w.name for w in outside[:3]) + (", ..." if len(outside) > 3 else "")
    return [
        f"{where}: {len(outside)} window(s) ({names}) reach outside channel {name}, "
        f"which spans {iso(lo)} to {iso(hi)}: their energy is NaN, flagged uncovered"
    ]


def _uncovered(window: Window, channel: str, has_readings: bool, lo: float, hi: float) -> UsageError:
    """The error for a log that covers no window, named by the first; a window entirely before or
    after the channel's span (``lo`` to ``hi``, Unix s) suggests a time zone."""
    apart = not has_readings or window.end_s < lo or window.start_s > hi
    return UsageError(
        f"window {window.name} ({iso(window.start_s)} to {iso(window.end_s)}) is not covered by "
        f"{channel}, which spans {iso(lo)} to {iso(hi)}"
        + (" (different time zones? give --tz)" if apart else "")
    )


def _placed_span(done: _Analysed, name: str, ref_s: float) -> tuple[float, float] | None:
    """The channel's first and last reading, placed, on the offline timeline; None without one. Units: s."""
    raw = done.log.series[name].times_s
    if not raw.size:
        return None
    time_map = done.maps.get(name, ChannelTimeMap())
    return float(time_map.apply(raw[0] - ref_s)), float(time_map.apply(raw[-1] - ref_s))


def _covers(span: tuple[float, float] | None, window: Window, ref_s: float) -> bool:
    """Whether the span (on the offline timeline, ``ref_s`` its Unix origin) holds the whole window."""
    return span is not None and span[0] <= window.start_s - ref_s and span[1] >= window.end_s - ref_s


def _near(channel: Channel, times: np.ndarray, start_s: float, end_s: float) -> int:
    """Rows within one update period of the window: those its integration may have bridged
    (the core's rule for flagging rejected readings, ``windows.rejection_flags``)."""
    margin = max(channel.resolution_s, 1e-6)
    lo = int(np.searchsorted(times, start_s - margin, side="left"))
    hi = int(np.searchsorted(times, end_s + margin, side="right"))
    return max(0, hi - lo)


def _counts(done: _Analysed, name: str, start_s: float, end_s: float) -> dict[str, int]:
    """Rows left out (or merged) near one window, by the flag they give it."""
    out: dict[str, int] = {}
    channel = done.log.channels[name]
    for reason, times in done.placed_rejected(name).items():
        n = _near(channel, times, start_s, end_s)
        if n:
            flag = FLAG_OF.get(reason, INVALID_READING)
            out[flag] = out.get(flag, 0) + n
    return out


def _by_flag(rejected: Rejected) -> dict[str, int]:
    out: dict[str, int] = {}
    for reason, n in rejected.count().items():
        flag = FLAG_OF.get(reason, INVALID_READING)
        out[flag] = out.get(flag, 0) + n
    return out


def _report_fields(
    series: SampleSeries, channel: Channel, window: Window, record: WindowRecord, energy_j: float
) -> dict:
    """The earlier tool's energy_report.json fields for one window (``series`` placed)."""
    start_s, end_s = record.start_s, record.end_s
    inside = series.between(start_s, end_s)
    if channel.quantity == Quantity.ENERGY:
        t, e = series.times_s, series.values
        middle, dt_ = (t[1:] + t[:-1]) / 2, np.diff(t)
        ok = (dt_ > 0) & (middle >= start_s) & (middle <= end_s)
        powers = np.diff(e)[ok] / dt_[ok]
    else:
        powers = inside.values
    duration = window.end_s - window.start_s
    runs = window.runs or 1
    return {
        "duration_seconds": duration,
        "num_power_samples": len(inside),
        "num_runs": window.runs,
        "power_watts": {
            "average": energy_j / duration if duration > 0 else math.nan,
            "peak": float(powers.max()) if powers.size else math.nan,
            "min": float(powers.min()) if powers.size else math.nan,
        },
        "energy_joules": {"total": energy_j, "per_run": energy_j / runs},
        "energy_wh": {"total": energy_j / 3600.0, "per_run": energy_j / 3600.0 / runs},
    }


_WHAT = {
    NEGATIVE: "negative power",
    NOT_FINITE: "NaN or infinite readings",
    IMPLAUSIBLE: f"power above {1e6:g} W (a sensor's error value)",
    MISSING: "no value ([N/A] or empty)",
}


def _rejection_warnings(done: _Analysed, ref_s: float) -> list[str]:
    """One warning per channel and kind of row left out (those the reader set apart it named)."""
    out = []
    for name, rejected in done.rejected.items():
        unit = done.log.channels[name].unit
        for reason, n in rejected.count().items():
            if reason not in _WHAT:
                continue
            t, value = rejected.first(reason)
            first = (
                f"first at {iso(t + ref_s)}"
                if reason == MISSING
                else f"first: {value:g} {unit} at {iso(t + ref_s)}"
            )
            out.append(
                f"{done.log.path.name}: {n} row(s) of {name} with {_WHAT[reason]} ({first}) were left out; "
                f"the windows around them are flagged {FLAG_OF.get(reason, INVALID_READING)}"
            )
    return out


# -- the analysis ---------------------------------------------------------------------------------


def analyze(
    logs: Sequence[PowerLog],
    windows: Sequence[Window],
    out: Path | str,
    lag_s: float | None = None,
    align_with: Path | str | None = None,
) -> dict:
    """Integrate every log's channels over every window; write energy_report.json and windows.csv.

    Args:
        lag_s: the power logs' timestamps are this late (e.g. a logging host whose clock is
            behind); subtracted before integrating (with half the averaging period of readings
            that average one). ``None``: not stated (wall meters are aligned with
            ``align_with``); 0 states that there is no lag. Units: s.
        align_with: a run directory recorded at the same time: wall-meter logs are aligned
            against its GPU or CPU power unless ``lag_s`` is given.

    Returns:
        The energy report as written (``windows`` holds one report per window and log when
        there is more than one).

    Raises:
        UsageError: bad input (no log or window, an edge or lag that is no time, a window no
            log covers).
    """
    _check_inputs(logs, windows, lag_s)
    run = _Run(Path(align_with)) if align_with is not None else None
    plan = _Plan.of(windows, lag_s, run)
    frames, reports = [], []
    warnings: list[str] = []
    rejected_rows: dict[str, dict[str, dict[str, int]]] = {}
    for log, label in zip(logs, _labels(logs)):
        frame, log_reports, counts = _analyse_log(log, label, plan, warnings)
        if counts:
            rejected_rows[label] = counts
        frames.append(frame)
        reports += log_reports
    document = dict(reports[0]) if len(reports) == 1 else {"windows": reports}
    document["rejected_rows"] = rejected_rows
    if warnings:
        document["warnings"] = warnings
    _write(out_path(out), frames, document)
    return document


@dataclass(frozen=True)
class _Plan:
    """What every log is analysed against: the windows, on the offline timeline (seconds since
    the first window opened, ``ref_s`` in Unix s, exact back to Unix seconds), and how a log is
    aligned (a stated lag, a run to align against)."""

    windows: Sequence[Window]
    ref_s: float
    clock: ClockModel
    records: list[WindowRecord]
    lag_s: float | None
    run: _Run | None

    @classmethod
    def of(cls, windows: Sequence[Window], lag_s: float | None, run: _Run | None) -> _Plan:
        ref_s = min(w.start_s for w in windows)
        records = [
            WindowRecord(w.phase or w.name, w.trial, w.start_s - ref_s, w.end_s - ref_s, w.runs or 1)
            for w in windows
        ]
        return cls(windows, ref_s, ClockModel(ClockPair(ref_s, 0.0, 0.0)), records, lag_s, run)


def _labels(logs: Sequence[PowerLog]) -> list[str]:
    """How windows.csv and the report name each log: its file name, its path when names repeat."""
    names = [log.path.name for log in logs]
    return [str(log.path) if names.count(log.path.name) > 1 else log.path.name for log in logs]


def _analyse_log(
    log: PowerLog, label: str, plan: _Plan, warnings: list[str]
) -> tuple[pd.DataFrame, list[dict], dict[str, dict[str, int]]]:
    """One log of the analysis: its windows.csv rows (named ``label``), its entries of the report,
    and the rows left out of each channel, by flag; ``warnings`` gets the log's own (each once),
    then what assembling, covering the windows and leaving rows out say."""
    warnings += [w for w in log.warnings if w not in warnings]
    if not any(c.integrable for c in log.channels.values()):
        raise UsageError(f"{log.path} holds no power or energy channel")
    done = _analyse(log, plan.records, plan.clock, plan.lag_s, plan.run, warnings)
    primary = log.primary if log.primary in done.kept else next(iter(done.kept))
    warnings += _check_covered(done, primary, plan.windows, plan.ref_s)
    warnings += _rejection_warnings(done, plan.ref_s)
    counts = {n: _by_flag(r) for n, r in done.rejected.items() if r.count()}
    frame = done.result.windows.copy()
    frame["log"] = label
    return frame, _reports(done, primary, plan.windows, plan.records, frame), counts


def _reports(
    done: _Analysed,
    primary: str,
    windows: Sequence[Window],
    records: Sequence[WindowRecord],
    frame: pd.DataFrame,
) -> list[dict]:
    """energy_report.json's entry of each window, for the log's primary channel."""
    channel = done.log.channels[primary]
    placed = done.placed(primary)
    time_map = done.maps.get(primary, ChannelTimeMap())
    alignment = done.aligner.alignment_of(
        primary, time_map, channel.averaging_s or channel.resolution_s or 1.0
    )
    out = []
    rows = frame[frame["channel"] == primary]
    for window, record, row in zip(windows, records, rows.itertuples()):
        report = _report_fields(placed, channel, window, record, float(row.energy_j))
        report["energyframe"] = {
            "log": str(done.log.path),
            "channel": primary,
            "window": window.name,
            "phase": record.phase,
            "trial": record.trial,
            "start_s": window.start_s,
            "end_s": window.end_s,
            "flags": split_flags(row.flags),
            "method": METHOD,
            "timing": channel.timing.value,
            "placement": done.placement(primary),
            "shift_s": time_map.lag_s,
            "drift": time_map.drift,
            "alignment": alignment,
            "rejected_rows": _counts(done, primary, record.start_s, record.end_s),
        }
        out.append(report)
    return out


def _write(out: Path, frames: list[pd.DataFrame], document: dict) -> None:
    table = pd.concat(frames, ignore_index=True)
    extra = [c for c in table.columns if c not in WINDOW_COLUMNS and c != "log"]
    table = table[WINDOW_COLUMNS + extra + ["log"]]
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "windows.csv", table)
        write_json(out / "energy_report.json", json_safe(document))  # last: it says the work is done
    except OSError as e:
        raise EnergyFrameError(f"cannot write the results into {out}: {e.strerror or e}") from e
