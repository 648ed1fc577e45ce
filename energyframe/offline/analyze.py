"""Offline analysis: power logs recorded elsewhere, over windows given afterwards.

Power logs are read by ``energyframe.offline.logs`` (samples.parquet, the earlier tool's WattsUp? CSV,
nvidia-smi CSV logs, ``time_s,power_w`` CSVs) into channels and sample series. Windows: a run
directory's windows, the earlier tool's timing JSON (``start_timestamp``, ``end_timestamp``,
``num_runs``), or given as ``START,END``. Each window is integrated by ``windows.compute_windows``,
as in a live run, so the ``windows.csv`` written here has the run's columns (and ``log`` after
them); ``energy_report.json`` has the earlier tool's fields.

Samples are placed as their timing says before integrating: a 1-s average (nvidia-smi
``power.draw``) at the middle of its second, a wall meter by the lag estimated against a run's
GPU power (``--run``) or stated (``--lag``), a run's own samples by the run's recorded time maps.
Negative, NaN or impossible power and rows without a value are left out of the integration; the
windows they touch are flagged ``negative_power`` / ``missing_power`` and the rows counted.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.clock import ChannelTimeMap, ClockModel, ClockPair
from ..core.energy import INVALID_READING, MISSING_POWER, MLPERF_MIN_WINDOW_S, SHORT_FOR_METER
from ..core.samples import NEGATIVE, NOT_FINITE, SampleSeries
from ..core.windows import REJECTION_FLAGS, WINDOW_COLUMNS, IdleBaseline, WindowRecord, compute_windows
from ..errors import EnergyFrameError, UsageError
from ..lifecycle.assemble import Recording, place_samples
from ..model import Channel, Quantity, Scope, Timing, WindowAnnotation
from ..results.paths import out_path
from ..results.store import json_safe, write_csv, write_json
from .logs import (  # noqa: F401  (parse_time, zone: the analyze API users know)
    IMPLAUSIBLE,
    MISSING,
    SAMPLES,
    PowerLog,
    parse_time,
    plausible,
    read_log,
    zone,
)

#: the window flag of each reason a row was left out (the core's, and the offline reader's two)
FLAG_OF = {**REJECTION_FLAGS, IMPLAUSIBLE: INVALID_READING, MISSING: MISSING_POWER}

#: how the energy is computed (energy_report.json says it)
METHOD = "piecewise-linear power integrated over the window, edges interpolated"


def load_power_log(path: Path | str, tz: str | None = None) -> PowerLog:
    """Read a power log of any kind ``energyframe.offline.logs`` knows."""
    return read_log(path, tz)


@dataclass(frozen=True)
class Window:
    """A window to analyse. Units: Unix s.

    Args:
        name: how messages name it (``phase#trial`` for a run's windows).
        runs: iterations in the window (the earlier tool's ``num_runs``), for per-run figures.
        phase, trial: its row in windows.csv (``phase`` defaults to ``name``).
    """

    name: str
    start_s: float
    end_s: float
    runs: int | None = None
    phase: str = ""
    trial: int = 0


def windows_from_run(directory: Path | str) -> list[Window]:
    """A run directory's windows (one per phase and trial) from its windows.csv."""
    from ..results.store import WINDOWS_CSV, WINDOWS_PARTIAL, read_windows

    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(
            f"run directory {directory} does not exist"
            if not directory.exists()
            else f"{directory} is not a directory"
        )
    path = directory / WINDOWS_CSV
    if not path.exists() and (directory / WINDOWS_PARTIAL).exists():
        return _journal_windows(directory)
    if not path.exists():
        raise UsageError(
            f"{directory} has no windows.csv: it is not a run directory, or its run measured nothing"
        )
    frame = read_windows(directory)
    needed = ["phase", "trial", "start_s", "end_s", "iterations"]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise UsageError(f"{path} lacks the column(s) {missing} of a run's windows.csv")
    frame = frame.drop_duplicates(["phase", "trial"])
    out = []
    for row in frame.itertuples():
        numbers = {
            c: pd.to_numeric(pd.Series([getattr(row, c)]), errors="coerce").iloc[0] for c in needed[1:]
        }
        bad = [c for c, v in numbers.items() if not np.isfinite(v)]
        if bad:
            raise UsageError(
                f"{path} row {row.Index + 2} ({row.phase}) has no number in {bad}: the file is damaged"
            )
        out.append(
            Window(
                f"{row.phase}#{int(numbers['trial'])}",
                float(numbers["start_s"]),
                float(numbers["end_s"]),
                int(numbers["iterations"]),
                str(row.phase),
                int(numbers["trial"]),
            )
        )
    if not out:
        raise UsageError(f"{path} holds no window")
    return out


def _journal_windows(directory: Path) -> list[Window]:
    """The windows a run that died had closed, from its journal (``windows.partial.csv``)."""
    from ..results.store import WINDOWS_PARTIAL, read_meta
    from .recovery import journal_records

    meta = read_meta(directory)
    try:
        clock = ClockModel.from_json(dict(meta.get("clock") or {}))
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(
            f"{directory / 'run.json'} has no clock anchors ({e}): its windows cannot be read"
        ) from e
    records = journal_records(directory / WINDOWS_PARTIAL, clock)
    if not records:
        raise UsageError(f"{directory / WINDOWS_PARTIAL} holds no finished window")
    return [
        Window(
            f"{r.phase}#{r.trial}",
            float(clock.to_unix(r.start_s)),
            float(clock.to_unix(r.end_s)),
            r.iterations,
            r.phase,
            r.trial,
        )
        for r in records
    ]


def windows_from_timing(path: Path | str, tz: str | None = None) -> list[Window]:
    """The earlier tool's timing JSON: start_timestamp, end_timestamp, num_runs."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise UsageError(f"timing file {path} does not exist") from e
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read timing file {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise UsageError(f"{path} is not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e
    if not isinstance(data, dict):
        raise UsageError(
            f"{path} is not the earlier tool's timing JSON (an object), it holds a {type(data).__name__}"
        )
    missing = [k for k in ("start_timestamp", "end_timestamp") if k not in data]
    if missing:
        raise UsageError(f"{path} lacks {', '.join(missing)} (expected the earlier tool's timing JSON)")
    runs = data.get("num_runs")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise UsageError(f"{path}: num_runs should be a whole number of runs, not {runs!r}")
    try:
        start, end = parse_time(data["start_timestamp"], tz), parse_time(data["end_timestamp"], tz)
    except UsageError as e:
        raise UsageError(f"{path}: {e}") from e
    return [Window(path.stem, start, end, runs)]


def window_from_text(text: str, tz: str | None = None) -> Window:
    parts = text.split(",")
    if len(parts) != 2:
        raise UsageError(f"a window is START,END, got {text!r}")
    return Window(text, parse_time(parts[0], tz), parse_time(parts[1], tz))


# -- placing samples in time -----------------------------------------------------------------


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


def _half(channel: Channel) -> float:
    """The fixed part of a channel's placement: half the period a reading averages over."""
    if channel.timing in (Timing.PERIOD_END, Timing.UNKNOWN):
        return channel.averaging_s / 2
    return 0.0


def _placements(
    log: PowerLog, channels: Mapping[str, Channel], ref_s: float, lag_s: float, run: _Run | None
) -> tuple[dict[str, ChannelTimeMap], dict[str, str], dict | None, list[str]]:
    """How each channel's samples move beyond what its timing implies (the core's
    ``assemble.timing_maps``): a stated lag, the run's own time maps, a meter's alignment.

    Returns:
        the time maps that override the timing's, how every channel is placed (for the
        report), the alignment (if one was estimated), and warnings.
    """
    maps: dict[str, ChannelTimeMap] = {}
    how: dict[str, str] = {}
    warnings: list[str] = []
    alignment = None
    recorded_maps = (log.run_meta or {}).get("time_maps") if log.kind == SAMPLES else None
    for name, channel in channels.items():
        half = _half(channel)
        if lag_s:
            maps[name] = ChannelTimeMap(lag_s + half)
            how[name] = f"--lag {lag_s:g} s" + _half_text(half)
        elif isinstance(recorded_maps, dict) and isinstance(recorded_maps.get(name), dict):
            maps[name] = _recorded(recorded_maps[name], log.run_meta, ref_s, name)
            how[name] = "the run's own time map"
        elif channel.timing == Timing.UNKNOWN:
            maps[name] = ChannelTimeMap()
            how[name] = "as recorded: a wall meter's lag is unknown (--run estimates it, --lag states it)"
        else:
            how[name] = "as recorded" if not half else _half_text(half)[2:]
    unknown = [n for n, c in channels.items() if c.timing == Timing.UNKNOWN and not lag_s]
    if run is not None and unknown and log.kind != SAMPLES:
        alignment, aligned, text, note = _align(log, channels, unknown, ref_s, run)
        maps.update(aligned)
        how.update({n: text for n in aligned})
        warnings += note
    return maps, how, alignment, warnings


def _half_text(half: float) -> str:
    return f", + {half:g} s: a reading placed at the middle of the {2 * half:g} s it averages" if half else ""


def _recorded(data: Mapping, meta: Mapping | None, ref_s: float, name: str) -> ChannelTimeMap:
    """The time map a run applied to its own channel, moved onto the offline timeline."""
    try:
        lag = float(data.get("lag_s") or 0.0)
        drift = float(data.get("drift") or 0.0)
        reference = float(data.get("reference_s") or 0.0)
        clock = ClockModel.from_json(dict((meta or {}).get("clock") or {}))
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"run.json's time map of {name} or its clock is damaged ({e})") from e
    return ChannelTimeMap(lag, drift, clock.to_unix(reference) - ref_s)


def _align(
    log: PowerLog, channels: Mapping[str, Channel], unknown: list[str], ref_s: float, run: _Run
) -> tuple[dict, dict[str, ChannelTimeMap], str, list[str]]:
    """A wall-meter log's lag (and drift) against the run's finest GPU or CPU channel."""
    from ..core.align import USABLE, estimate_lag_and_drift, pick_reference, reference_signal

    where = f"{log.path.name}: not aligned with {run.directory}"
    try:
        samples = run.samples
    except UsageError as e:  # a timing-only run's samples hold nothing to align against
        samples, why = None, str(e)
    else:
        why = f"{run.directory} has no samples.parquet"
    if samples is None:
        reason = why
        return {"applied": False, "reason": reason}, *_unaligned(channels, unknown), [f"{where} ({reason})"]
    kept = {n: plausible(samples, n)[0] for n, c in samples.channels.items() if c.integrable}
    reference = pick_reference({n: samples.channels[n] for n in kept}, kept)
    if reference is None:
        reason = f"{run.directory} has no GPU or CPU power channel to align against"
        return {"applied": False, "reason": reason}, *_unaligned(channels, unknown), [f"{where} ({reason})"]
    ref_t, ref_p = reference_signal(samples.channels[reference], kept[reference])
    meter = log.primary if log.primary in unknown else unknown[0]
    series = plausible(log, meter)[0]
    interval = channels[meter].averaging_s or channels[meter].resolution_s or 1.0
    estimate, drift, detail = estimate_lag_and_drift(
        ref_t - ref_s, ref_p, series.times_s - ref_s, series.values, interval
    )
    applied = bool(np.isfinite(estimate.correlation) and estimate.correlation >= USABLE)
    lag = estimate.lag_s if applied else 0.0
    drift = drift if applied else 0.0
    start = float(series.times_s[0] - ref_s) if len(series) else 0.0
    alignment = {
        "reference": reference,
        "channel": meter,
        "lag_s": estimate.lag_s,
        "drift": drift,
        "correlation": estimate.correlation,
        "interval_s": interval,
        "applied": applied,
        "shift_s": lag + interval / 2,
        **detail,
    }
    how = (
        f"aligned with {reference} of {run.directory.name}: lag {lag:+.3f} s + half its {interval:g}-s interval"
        if applied
        else f"moved by half its {interval:g}-s interval only (correlation with {reference} too low)"
    )
    maps = {n: ChannelTimeMap(lag + (channels[n].averaging_s or interval) / 2, drift, start) for n in unknown}
    warnings = []
    if not applied:
        warnings.append(
            f"{where} (correlation {estimate.correlation:.2f} with {reference}); its samples are only moved to "
            "the middle of their intervals: give --lag S if you know the lag"
        )
    return alignment, maps, how, warnings


def _unaligned(channels: Mapping[str, Channel], unknown: list[str]) -> tuple[dict[str, ChannelTimeMap], str]:
    return (
        {n: ChannelTimeMap(_half(channels[n])) for n in unknown},
        "moved by half its interval only (not aligned)",
    )


# -- integrating -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Channel:
    """One integrable channel of a log, placed on the offline timeline."""

    channel: Channel
    series: SampleSeries  # the samples integrated
    rejected: Mapping[str, np.ndarray]  # per reason, when the rows left out were (placed)
    first_rejected: Mapping[str, tuple[float, float]]  # per reason, the first row (Unix s, value)
    raw_span: tuple[float, float] | None  # every numeric row, placed
    time_map: ChannelTimeMap


def _prepare(
    log: PowerLog, maps: Mapping[str, ChannelTimeMap], ref_s: float, clock: ClockModel, records, warn
) -> dict[str, _Channel]:
    """Every integrable channel placed as a live run places it (``assemble.place_samples``):
    its timing's fixed shift, unless a stated lag, the run's own map or an alignment says more."""
    kept, rejected = {}, {}
    for name, channel in log.channels.items():
        if channel.integrable:
            series, left_out = plausible(log, name)
            kept[name] = SampleSeries(series.times_s - ref_s, series.values)
            rejected[name] = left_out
    channels = {n: log.channels[n] for n in kept}
    recording = Recording(
        clock=clock,
        channels=channels,
        channel_source={n: log.path.name for n in kept},
        series=kept,
        samples=pd.DataFrame(),
        records=records,
    )
    placement = place_samples(recording, lambda _channels, _series, _records: dict(maps), warn)
    out = {}
    for name, channel in channels.items():
        time_map = placement.time_maps.get(name, ChannelTimeMap())
        raw = log.series[name].times_s
        out[name] = _Channel(
            channel,
            placement.series[name],
            {r: np.sort(time_map.apply(t - ref_s)) for r, t in rejected[name].times_s.items() if t.size},
            {
                r: (float(t[0]), float(rejected[name].values[r][0]))
                for r, t in rejected[name].times_s.items()
                if t.size
            },
            (float(time_map.apply(raw[0] - ref_s)), float(time_map.apply(raw[-1] - ref_s)))
            if raw.size
            else None,
            time_map,
        )
    return out


def _core_reasons(entry: _Channel) -> dict[str, np.ndarray]:
    """The rows the core flags (``negative_power``, ``invalid_reading``) under the core's reason
    names: a power above ``MAX_POWER_W`` is no reading, as a NaN is; missing rows are flagged here."""
    out = {r: t for r, t in entry.rejected.items() if r in (NEGATIVE, NOT_FINITE)}
    if IMPLAUSIBLE in entry.rejected:
        out[NOT_FINITE] = np.sort(
            np.concatenate([out.get(NOT_FINITE, np.array([])), entry.rejected[IMPLAUSIBLE]])
        )
    return out


def _near(channel: Channel, times: np.ndarray, start_s: float, end_s: float) -> int:
    """Rows within one update period of the window: those its integration may have bridged
    (the core's rule for flagging rejected readings, ``windows.rejection_flags``)."""
    margin = max(channel.resolution_s, 1e-6)
    lo = int(np.searchsorted(times, start_s - margin, side="left"))
    hi = int(np.searchsorted(times, end_s + margin, side="right"))
    return max(0, hi - lo)


def _annotator(prepared: Mapping[str, _Channel]):
    """What the core does not flag offline: rows with no value, and a meter's short windows."""

    def annotate(channel: Channel, start_s: float, end_s: float) -> WindowAnnotation:
        entry = prepared[channel.name]
        flags = []
        if MISSING in entry.rejected and _near(channel, entry.rejected[MISSING], start_s, end_s):
            flags.append(MISSING_POWER)
        if channel.scope == Scope.SYSTEM_WALL and end_s - start_s < MLPERF_MIN_WINDOW_S:
            flags.append(SHORT_FOR_METER)  # as the wattsup source flags a live meter's windows
        return WindowAnnotation(flags=tuple(flags))

    return annotate


def _counts(entry: _Channel, start_s: float, end_s: float) -> dict[str, int]:
    """Rows left out near one window, by the flag they give it."""
    out: dict[str, int] = {}
    for reason, times in entry.rejected.items():
        n = _near(entry.channel, times, start_s, end_s)
        if n:
            flag = FLAG_OF.get(reason, INVALID_READING)
            out[flag] = out.get(flag, 0) + n
    return out


def _idle(log: PowerLog, run: _Run | None, names: Sequence[str]) -> dict[str, IdleBaseline]:
    """The run's idle baselines, for its own samples only (another log's ``gpu0`` is another GPU)."""
    if run is None or not run.owns(log):
        return {}
    out = {}
    for name, data in (run.meta.get("idle_baseline") or {}).items():
        if name in names and isinstance(data, dict):
            power = data.get("power_w")
            out[name] = IdleBaseline(
                name,
                math.nan if power is None else float(power),
                float(data.get("duration_s") or 0.0),
                tuple(data.get("flags") or ()),
            )
    return out


def _check_covered(log: PowerLog, entry: _Channel, windows: Sequence[Window], ref_s: float) -> list[str]:
    """Windows outside the span of the log's primary channel: an error when none is inside it
    (a wrong log, or a time zone), else a warning; those windows get NaN and ``uncovered`` as
    in a live run (a run killed before its last samples were drained)."""
    span = entry.raw_span
    outside = []
    for window in windows:
        start, end = window.start_s - ref_s, window.end_s - ref_s
        if span is None or not (span[0] <= start and span[1] >= end):
            outside.append(window)
    if not outside:
        return []
    lo, hi = (span[0] + ref_s, span[1] + ref_s) if span is not None else (math.nan, math.nan)
    if len(outside) == len(windows):
        window = outside[0]
        apart = span is None or window.end_s < lo or window.start_s > hi
        raise UsageError(
            f"window {window.name} ({_iso(window.start_s)} to {_iso(window.end_s)}) is not covered by "
            f"{log.path.name} channel {entry.channel.name}, which spans {_iso(lo)} to {_iso(hi)}"
            + (" (different time zones? give --tz)" if apart else "")
        )
    names = ", ".join(w.name for w in outside[:3]) + (", ..." if len(outside) > 3 else "")
    return [
        f"{log.path.name}: {len(outside)} window(s) ({names}) reach outside channel {entry.channel.name}, "
        f"which spans {_iso(lo)} to {_iso(hi)}: their energy is NaN, flagged uncovered"
    ]


def _report_fields(entry: _Channel, window: Window, start_s: float, end_s: float, energy_j: float) -> dict:
    """The earlier tool's energy_report.json fields for one window."""
    series = entry.series.between(start_s, end_s)
    if entry.channel.quantity == Quantity.ENERGY:
        t, e = entry.series.times_s, entry.series.values
        middle, dt_ = (t[1:] + t[:-1]) / 2, np.diff(t)
        ok = (dt_ > 0) & (middle >= start_s) & (middle <= end_s)
        powers = np.diff(e)[ok] / dt_[ok]
    else:
        powers = series.values
    duration = window.end_s - window.start_s
    runs = window.runs or 1
    return {
        "duration_seconds": duration,
        "num_power_samples": len(series),
        "num_runs": window.runs,
        "power_watts": {
            "average": energy_j / duration if duration > 0 else math.nan,
            "peak": float(powers.max()) if powers.size else math.nan,
            "min": float(powers.min()) if powers.size else math.nan,
        },
        "energy_joules": {"total": energy_j, "per_run": energy_j / runs},
        "energy_wh": {"total": energy_j / 3600.0, "per_run": energy_j / 3600.0 / runs},
    }


def _check_inputs(logs: Sequence[PowerLog], windows: Sequence[Window]) -> None:
    """Refuse analyze's input before anything is read: no log, no window, a window ending first."""
    if not logs:
        raise UsageError("give at least one --power-log")
    if not windows:
        raise UsageError("give the windows: --run DIR, --timing FILE or --window START,END")
    for window in windows:
        if not window.end_s > window.start_s:
            raise UsageError(f"window {window.name} ends before it starts")


def analyze(
    logs: Sequence[PowerLog],
    windows: Sequence[Window],
    out: Path | str,
    lag_s: float = 0.0,
    align_with: Path | str | None = None,
) -> dict:
    """Integrate every log's channels over every window; write energy_report.json and windows.csv.

    Args:
        lag_s: the power logs' timestamps are this late (e.g. a logging host whose clock is
            behind); subtracted before integrating (with half the averaging period of readings
            that average one). Units: s.
        align_with: a run directory recorded at the same time: wall-meter logs are aligned
            against its GPU or CPU power (their lag estimated) unless ``lag_s`` is given.

    Returns:
        The energy report as written (``windows`` holds one report per window and log when
        there is more than one).
    """
    _check_inputs(logs, windows)
    run = _Run(Path(align_with)) if align_with is not None else None
    # the offline timeline: seconds since the first window opened, exact back to Unix seconds
    ref_s = min(w.start_s for w in windows)
    clock = ClockModel(ClockPair(ref_s, 0.0, 0.0))
    records = [
        WindowRecord(w.phase or w.name, w.trial, w.start_s - ref_s, w.end_s - ref_s, w.runs or 1)
        for w in windows
    ]
    frames, reports = [], []
    warnings: list[str] = []
    rejected_rows: dict[str, dict[str, dict[str, int]]] = {}
    names = [log.path.name for log in logs]
    # how windows.csv and the report name each log: its file name, its path when names repeat
    labels = [str(log.path) if names.count(log.path.name) > 1 else log.path.name for log in logs]
    for log, label in zip(logs, labels):
        warnings += log.warnings
        integrable = {n: c for n, c in log.channels.items() if c.integrable}
        if not integrable:
            raise UsageError(f"{log.path} holds no power or energy channel")
        maps, how, alignment, notes = _placements(log, integrable, ref_s, lag_s, run)
        warnings += notes
        prepared = _prepare(log, maps, ref_s, clock, records, warnings.append)
        primary = prepared[log.primary] if log.primary in prepared else next(iter(prepared.values()))
        warnings += _check_covered(log, primary, windows, ref_s)
        warnings += _rejection_warnings(log, prepared)
        counts = {n: _by_flag(e) for n, e in prepared.items() if e.rejected}
        if counts:
            rejected_rows[label] = counts
        core_reasons = {n: _core_reasons(e) for n, e in prepared.items()}
        frame = compute_windows(
            records,
            integrable,
            {n: e.series for n, e in prepared.items()},
            clock,
            _idle(log, run, list(integrable)),
            _annotator(prepared),
            {n: r for n, r in core_reasons.items() if r},
        )
        frame["log"] = label
        frames.append(frame)
        rows = frame[frame["channel"] == primary.channel.name]
        for window, record, row in zip(windows, records, rows.itertuples()):
            report = _report_fields(primary, window, record.start_s, record.end_s, float(row.energy_j))
            report["energyframe"] = {
                "log": str(log.path),
                "channel": primary.channel.name,
                "window": window.name,
                "phase": record.phase,
                "trial": record.trial,
                "start_s": window.start_s,
                "end_s": window.end_s,
                "flags": [f for f in str(row.flags).split(";") if f],
                "method": METHOD,
                "timing": primary.channel.timing.value,
                "placement": how[primary.channel.name],
                "shift_s": primary.time_map.lag_s,
                "drift": primary.time_map.drift,
                "alignment": alignment,
                "rejected_rows": _counts(primary, record.start_s, record.end_s),
            }
            reports.append(report)
    document = dict(reports[0]) if len(reports) == 1 else {"windows": reports}
    document["rejected_rows"] = rejected_rows
    if warnings:
        document["warnings"] = warnings
    table = pd.concat(frames, ignore_index=True)
    extra = [c for c in table.columns if c not in WINDOW_COLUMNS and c != "log"]
    table = table[WINDOW_COLUMNS + extra + ["log"]]
    out = out_path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "windows.csv", table)
        write_json(out / "energy_report.json", json_safe(document))  # last: it says the work is done
    except OSError as e:
        raise EnergyFrameError(f"cannot write the results into {out}: {e.strerror or e}") from e
    return document


def _by_flag(entry: _Channel) -> dict[str, int]:
    out: dict[str, int] = {}
    for reason, times in entry.rejected.items():
        flag = FLAG_OF.get(reason, INVALID_READING)
        out[flag] = out.get(flag, 0) + int(times.size)
    return out


_WHAT = {
    NEGATIVE: "negative power",
    NOT_FINITE: "NaN or infinite readings",
    IMPLAUSIBLE: f"power above {1e6:g} W (a sensor's error value)",
    MISSING: "no value ([N/A] or empty)",
}


def _rejection_warnings(log: PowerLog, prepared: Mapping[str, _Channel]) -> list[str]:
    out = []
    for name, entry in prepared.items():
        for reason, times in entry.rejected.items():
            t, value = entry.first_rejected[reason]
            first = (
                f"first at {_iso(t)}"
                if reason == MISSING
                else f"first: {value:g} {entry.channel.unit} at {_iso(t)}"
            )
            out.append(
                f"{log.path.name}: {times.size} row(s) of {name} with {_WHAT.get(reason, reason)} ({first}) were "
                f"left out; the windows around them are flagged {FLAG_OF.get(reason, INVALID_READING)}"
            )
    return out


def _iso(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "nothing"
    return dt.datetime.fromtimestamp(seconds).isoformat(sep=" ", timespec="milliseconds")
