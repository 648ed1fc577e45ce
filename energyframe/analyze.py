"""Offline analysis: power logs recorded elsewhere, over windows given afterwards.

Power logs: the earlier tool's wall-meter CSV (``time,id,pm1,pm2,sum``, local time, 1 Hz), an
``nvidia-smi --query-gpu=timestamp,...`` CSV log, or an energyframe ``samples.parquet``.
Windows: a run directory's windows, the earlier tool's timing JSON (``start_timestamp``,
``end_timestamp``, ``num_runs``), or given as ``START,END``. Each window's energy is the
power integrated exactly over it (edge-interpolated, as in a live run), written in the earlier
tool's ``energy_report.json`` fields and as energyframe's ``windows.csv``.

A window the log does not cover, or a log with no sample in it, is an error; unsorted rows are
sorted and duplicated timestamps averaged, with a warning; a file mixing time zones is refused.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .energy import power_energy
from .errors import UsageError
from .store import json_safe, write_csv, write_json

_OFFSET = re.compile(r"(Z|[+-]\d{2}:?\d{2})$")
_FORMATS = (
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
)


def _zone(tz: str | None) -> dt.tzinfo | None:
    """``None``/``local``: the machine's zone; ``UTC``; or an offset like ``+01:00``."""
    if tz in (None, "", "local"):
        return None
    if tz.upper() == "UTC":
        return dt.timezone.utc
    match = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", tz)
    if not match:
        raise UsageError(f"unknown time zone {tz!r}: use local, UTC or an offset such as +01:00")
    sign = 1 if match.group(1) == "+" else -1
    return dt.timezone(sign * dt.timedelta(hours=int(match.group(2)), minutes=int(match.group(3))))


def parse_time(text: str, tz: str | None = None) -> float:
    """A timestamp as Unix seconds: a number, or a date-time (with an offset, or in ``tz``)."""
    text = str(text).strip()
    try:
        return float(text)
    except ValueError:
        pass
    offset = _OFFSET.search(text)
    body = text[: offset.start()].strip() if offset else text
    for fmt in _FORMATS:
        try:
            moment = dt.datetime.strptime(body, fmt)
            break
        except ValueError:
            continue
    else:
        raise UsageError(f"cannot read the time {text!r} (expected e.g. 2026-02-04 10:15:23.123)")
    if offset:
        zone = "+00:00" if offset.group(1) == "Z" else offset.group(1)
        moment = moment.replace(tzinfo=_zone(zone))
    elif _zone(tz) is not None:
        moment = moment.replace(tzinfo=_zone(tz))
    return moment.timestamp()


def _times(column: Sequence[str], tz: str | None, what: str) -> np.ndarray:
    texts = [str(x).strip() for x in column]
    with_offset = {bool(_OFFSET.search(t)) for t in texts if not _is_number(t)}
    if len(with_offset) > 1:
        raise UsageError(f"{what} mixes timestamps with and without a time zone; fix the log or give --tz")
    offsets = {_OFFSET.search(t).group(1) for t in texts if _OFFSET.search(t)}
    if len({o.replace(":", "") for o in offsets}) > 1:
        raise UsageError(f"{what} mixes time zones ({', '.join(sorted(offsets))})")
    return np.array([parse_time(t, tz) for t in texts])


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


@dataclass
class LogChannel:
    """One power channel of a log. Units: Unix s, W (or J for counters)."""

    name: str
    times_s: np.ndarray
    values: np.ndarray
    counter: bool = False


@dataclass
class PowerLog:
    path: Path
    kind: str
    channels: dict[str, LogChannel]
    primary: str
    warnings: list[str] = field(default_factory=list)

    @property
    def span(self) -> tuple[float, float]:
        times = np.concatenate([c.times_s for c in self.channels.values()])
        return float(times.min()), float(times.max())


def _clean(name: str, t: np.ndarray, v: np.ndarray, warnings: list[str], where: str) -> LogChannel:
    ok = np.isfinite(t) & np.isfinite(v)
    if not ok.all():
        warnings.append(f"{where}: {int((~ok).sum())} row(s) of {name} without a number were skipped")
    t, v = t[ok], v[ok]
    if t.size and np.any(np.diff(t) < 0):
        warnings.append(f"{where}: rows are not in time order; sorted")
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    if t.size and np.any(np.diff(t) == 0):
        frame = pd.DataFrame({"t": t, "v": v}).groupby("t", sort=True)["v"].mean()
        warnings.append(
            f"{where}: {t.size - frame.size} duplicated timestamp(s) in {name}; their values were averaged"
        )
        t, v = frame.index.to_numpy(dtype=float), frame.to_numpy(dtype=float)
    return LogChannel(name, t, v)


def load_power_log(path: Path | str, tz: str | None = None) -> PowerLog:
    """Read a power log, recognising its kind from its name and header."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"power log {path} does not exist")
    warnings: list[str] = []
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        channels = {}
        for name, group in frame.groupby("channel"):
            unit = str(group["unit"].iloc[0])
            if unit not in ("W", "J"):
                continue
            channel = _clean(
                str(name),
                group["time_s"].to_numpy(float),
                group["value"].to_numpy(float),
                warnings,
                path.name,
            )
            channel.counter = unit == "J"
            channels[str(name)] = channel
        primary = _primary_from_run(path) or next(iter(channels), "")
        return PowerLog(path, "samples", channels, primary, warnings)
    frame = pd.read_csv(path, skipinitialspace=True, dtype=str)
    columns = [re.sub(r"\s*\[[^\]]*\]\s*$", "", c.strip()) for c in frame.columns]
    frame.columns = columns
    if frame.empty:
        raise UsageError(f"power log {path} has a header but no rows")
    if "time" in columns and any(c.startswith("pm") or c == "sum" for c in columns):
        times = _times(frame["time"], tz, path.name)
        channels = {}
        for column in [c for c in columns if c.startswith("pm") or c == "sum"]:
            values = pd.to_numeric(frame[column], errors="coerce").to_numpy(float)
            channels[column] = _clean(column, times.copy(), values, warnings, path.name)
        return PowerLog(
            path, "wattsup-csv", channels, "sum" if "sum" in channels else next(iter(channels)), warnings
        )
    if "timestamp" in columns and any(c.startswith("power.draw") for c in columns):
        times = _times(frame["timestamp"], tz, path.name)
        field_name = next(
            c for c in ("power.draw.instant", "power.draw", "power.draw.average") if c in columns
        )
        index = frame["index"].str.strip() if "index" in columns else pd.Series(["0"] * len(frame))
        channels = {}
        for gpu in sorted(set(index)):
            rows = (index == gpu).to_numpy()
            values = pd.to_numeric(frame[field_name][rows], errors="coerce").to_numpy(float)
            channels[f"gpu{gpu}"] = _clean(f"gpu{gpu}", times[rows], values, warnings, path.name)
        return PowerLog(path, "nvidia-smi", channels, next(iter(channels)), warnings)
    raise UsageError(
        f"{path}: not a power log energyframe knows (the earlier tool's time,id,pm1,pm2,sum CSV, an nvidia-smi "
        f"CSV log, or samples.parquet); its columns: {', '.join(columns)}"
    )


def _primary_from_run(path: Path) -> str | None:
    run_json = path.with_name("run.json")
    if not run_json.exists():
        return None
    primary = json.loads(run_json.read_text()).get("primary_channels") or []
    return primary[0] if primary else None


@dataclass(frozen=True)
class Window:
    """A window to analyse. Units: Unix s."""

    name: str
    start_s: float
    end_s: float
    runs: int | None = None


def windows_from_run(directory: Path | str) -> list[Window]:
    path = Path(directory) / "windows.csv"
    if not path.exists():
        raise UsageError(f"{directory} has no windows.csv")
    frame = pd.read_csv(path).drop_duplicates(["phase", "trial"])
    return [
        Window(f"{r.phase}#{r.trial}", float(r.start_s), float(r.end_s), int(r.iterations))
        for r in frame.itertuples()
    ]


def windows_from_timing(path: Path | str, tz: str | None = None) -> list[Window]:
    """The earlier tool's timing JSON: start_timestamp, end_timestamp, num_runs."""
    data = json.loads(Path(path).read_text())
    missing = [k for k in ("start_timestamp", "end_timestamp") if k not in data]
    if missing:
        raise UsageError(f"{path} lacks {', '.join(missing)} (expected the earlier tool's timing JSON)")
    return [
        Window(
            Path(path).stem,
            parse_time(data["start_timestamp"], tz),
            parse_time(data["end_timestamp"], tz),
            data.get("num_runs"),
        )
    ]


def window_from_text(text: str, tz: str | None = None) -> Window:
    parts = text.split(",")
    if len(parts) != 2:
        raise UsageError(f"a window is START,END, got {text!r}")
    return Window(text, parse_time(parts[0], tz), parse_time(parts[1], tz))


def _report_fields(channel: LogChannel, window: Window, energy_j: float) -> dict:
    inside = (channel.times_s >= window.start_s) & (channel.times_s <= window.end_s)
    values = channel.values[inside]
    duration = window.end_s - window.start_s
    runs = window.runs or 1
    return {
        "duration_seconds": duration,
        "num_power_samples": int(inside.sum()),
        "num_runs": window.runs,
        "power_watts": {
            "average": energy_j / duration if duration > 0 else math.nan,
            "peak": float(values.max()) if values.size else math.nan,
            "min": float(values.min()) if values.size else math.nan,
        },
        "energy_joules": {"total": energy_j, "per_run": energy_j / runs},
        "energy_wh": {"total": energy_j / 3600.0, "per_run": energy_j / 3600.0 / runs},
    }


def align_log(log: PowerLog, run_dir: Path | str) -> dict:
    """Estimate how late a wall-meter log is against the finest GPU or CPU channel of a run
    recorded at the same time (its samples.parquet), as a live run's alignment does."""
    from .align import USABLE, estimate_lag
    from .interfaces import Channel

    run_dir = Path(run_dir)
    meta = json.loads((run_dir / "run.json").read_text())
    channels = {
        c["name"]: Channel.from_json(c) for s in meta.get("sources", []) for c in s.get("channels", [])
    }
    samples = pd.read_parquet(run_dir / "samples.parquet")
    from .align import pick_reference, reference_signal
    from .samples import SampleSeries

    series = {}
    for name, group in samples.groupby("channel"):
        if name in channels:
            group = group.sort_values("time_s")
            series[name] = SampleSeries(group["time_s"].to_numpy(float), group["value"].to_numpy(float))
    reference = pick_reference(channels, series)
    if reference is None:
        return {"applied": False, "reason": f"{run_dir} has no GPU or CPU power channel to align against"}
    ref_t, ref_p = reference_signal(channels[reference], series[reference])
    primary = log.channels[log.primary]
    interval = _period(primary.times_s) or 1.0
    estimate = estimate_lag(ref_t, ref_p, primary.times_s, primary.values, interval)
    applied = bool(np.isfinite(estimate.correlation) and estimate.correlation >= USABLE)
    return {
        "reference": reference,
        "lag_s": estimate.lag_s,
        "correlation": estimate.correlation,
        "interval_s": interval,
        "applied": applied,
        "shift_s": (estimate.lag_s + interval / 2) if applied else 0.0,
    }


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
            behind); subtracted before integrating. Units: s.
        align_with: a run directory recorded at the same time: wall-meter logs are aligned
            against its GPU or CPU power (their lag estimated) unless ``lag_s`` is given.
    """
    if not logs:
        raise UsageError("give at least one --power-log")
    if not windows:
        raise UsageError("give the windows: --run DIR, --timing FILE or --window START,END")
    rows, reports, warnings = [], [], []
    for log in logs:
        warnings += log.warnings
        lo, hi = log.span
        alignment = None
        shift = lag_s
        if align_with is not None and not lag_s and log.kind == "wattsup-csv":
            alignment = align_log(log, align_with)
            if alignment["applied"]:
                shift = alignment["shift_s"]
            else:
                why = alignment.get("reason") or f"correlation {alignment['correlation']:.2f}"
                warnings.append(f"{log.path.name}: not aligned with {align_with} ({why})")
        for window in windows:
            if window.end_s <= window.start_s:
                raise UsageError(f"window {window.name} ends before it starts")
            for name, channel in log.channels.items():
                t = channel.times_s - shift
                if t.size == 0 or t[0] > window.start_s or t[-1] < window.end_s:
                    raise UsageError(
                        f"window {window.name} ({_iso(window.start_s)} to {_iso(window.end_s)}) is not covered by "
                        f"{log.path.name} channel {name}, which spans {_iso(lo - shift)} to {_iso(hi - shift)}"
                        + (
                            " (different time zones? give --tz)"
                            if window.end_s < lo - shift or window.start_s > hi - shift
                            else ""
                        )
                    )
                if channel.counter:
                    from .energy import counter_energy

                    result = counter_energy(t, channel.values, window.start_s, window.end_s)
                else:
                    result = power_energy(
                        t, channel.values, window.start_s, window.end_s, resolution_s=_period(t)
                    )
                rows.append(
                    {
                        "log": log.path.name,
                        "phase": window.name,
                        "channel": name,
                        "start_s": window.start_s,
                        "end_s": window.end_s,
                        "duration_s": window.end_s - window.start_s,
                        "iterations": window.runs or 1,
                        "energy_j": result.energy_j,
                        "mean_power_w": result.energy_j / (window.end_s - window.start_s),
                        "energy_per_iter_j": result.energy_j / (window.runs or 1),
                        "flags": ";".join(result.flags),
                    }
                )
                if name == log.primary:
                    report = _report_fields(LogChannel(name, t, channel.values), window, result.energy_j)
                    report["energyframe"] = {
                        "log": str(log.path),
                        "channel": name,
                        "window": window.name,
                        "start_s": window.start_s,
                        "end_s": window.end_s,
                        "flags": list(result.flags),
                        "method": "piecewise-linear power integrated over the window, edges interpolated",
                        "shift_s": shift,
                        "alignment": alignment,
                    }
                    reports.append(report)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    document = dict(reports[0]) if len(reports) == 1 else {"windows": reports}
    if warnings:
        document["warnings"] = warnings
    write_json(out / "energy_report.json", json_safe(document))
    write_csv(out / "windows.csv", pd.DataFrame(rows))
    return document


def _period(t: np.ndarray) -> float:
    return float(np.median(np.diff(t))) if t.size > 1 else 0.0


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds).isoformat(sep=" ", timespec="milliseconds")
