"""Power logs recorded elsewhere, read into channels and sample series.

The one reader behind ``energyframe analyze`` and the ``replay`` power source. It recognises a
file by its content (a parquet's magic bytes, a CSV's header):

- an energyframe ``samples.parquet`` or ``samples.partial.csv`` (channels described by the
  ``run.json`` beside it, else by their units);
- a CSV of ``time_s`` (Unix seconds) and ``power_w`` or ``energy_j``;
- the earlier tool's WattsUp? CSV (``time,id,pm1,pm2,sum``, whole seconds, local time), and the
  same file as energyframe's ``wattsup`` source writes it (``raw/wattsup/wattsup.csv``);
- an ``nvidia-smi --query-gpu=timestamp,index,...,power.draw...`` CSV log, with or without units,
  and energyframe's own ``raw/nvidia-smi/nvidia-smi.csv``.

Every value is kept as written: negative or NaN power is not corrected here (``plausible``
splits it off for integration), and rows without a value (``[N/A]``) are listed apart. Lines
that are not rows of the log (garbage an instrument printed) are skipped with a warning; a file
that is empty, binary, truncated in its last row, or of no known kind is a ``UsageError`` that
names the file and the cause.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.samples import IMPLAUSIBLE, MAX_POWER_W, NEGATIVE, NOT_FINITE, SampleSeries
from ..errors import UsageError
from ..model import Channel, ClockBase, Quantity, Scope, Timing
from .smi_format import AVERAGE_WINDOW_S, POWER_FIELDS, STATE_FIELDS, header_name

#: log kinds
SAMPLES = "samples"
POWER_CSV = "power-csv"
WATTSUP_CSV = "wattsup-csv"
NVIDIA_SMI = "nvidia-smi"

#: why a row is left out of integration, beside the core's reasons (``samples.NEGATIVE``,
#: ``NOT_FINITE``, ``IMPLAUSIBLE``): a row with no value at all
MISSING = "missing"
#: what nvidia-smi and loggers print for a reading they do not have
MISSING_TEXT = {
    "",
    "[n/a]",
    "n/a",
    "[not supported]",
    "not supported",
    "[unknown error]",
    "unknown error",
    "-",
}
_OFFSET = re.compile(r"(Z|[+-]\d{2}:?\d{2})$")
_FORMATS = (
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
)
_SAMPLE_COLUMNS = ("source", "channel", "time_s", "value", "unit")
_KNOWN = (
    "an energyframe samples.parquet or samples.partial.csv, a CSV of time_s and power_w or energy_j, "
    "the earlier tool's time,id,pm1,pm2,sum CSV, or an nvidia-smi CSV log"
)


# -- time ------------------------------------------------------------------------------------


def zone(tz: str | None) -> dt.tzinfo | None:
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


def _parse_time(text: str, tz: dt.tzinfo | None) -> float | None:
    """Unix seconds, or None when ``text`` is no time this reader knows."""
    try:
        value = float(text)
        return value if math.isfinite(value) else None
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
        return None
    if offset:
        moment = moment.replace(tzinfo=zone("+00:00" if offset.group(1) == "Z" else offset.group(1)))
    elif tz is not None:
        moment = moment.replace(tzinfo=tz)
    return moment.timestamp()


def parse_time(text: str, tz: str | None = None) -> float:
    """A timestamp as Unix seconds: a number, or a date-time (with an offset, or in ``tz``)."""
    text = str(text).strip()
    value = _parse_time(text, zone(tz))
    if value is None:
        raise UsageError(f"cannot read the time {text!r} (expected e.g. 2026-02-04 10:15:23.123)")
    return value


def _times(texts: Sequence[str], tz: str | None, where: str) -> np.ndarray:
    """Unix seconds for each text (NaN where it is no time); refuses a file that mixes zones.

    Vectorised (a 20-ms nvidia-smi log has 180,000 rows an hour per GPU): numbers are Unix
    seconds; date-times are parsed by pandas in the first of ``_FORMATS`` that fits; times
    without an offset are in ``tz``, or local time with the machine's rules for each minute
    (daylight saving changes on a minute).
    """
    import pandas as pd

    text = pd.Series(list(texts), dtype=object).astype(str).str.strip()
    out = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, copy=True)
    out[~np.isfinite(out)] = np.nan
    dated = np.isnan(out)
    if not dated.any():
        return out
    parts = text[dated].str.extract(r"^(.*?)\s*(Z|[+-]\d{2}:?\d{2})?$")
    body, offset = parts[0].fillna(""), parts[1]
    parsed = pd.Series(pd.NaT, index=body.index, dtype="datetime64[ns]")
    for fmt in _likely_first(body):
        todo = parsed.isna()
        if not todo.any():
            break
        parsed[todo] = pd.to_datetime(body[todo], format=fmt, errors="coerce")
    ok = parsed.notna().to_numpy()
    with_offset = offset.notna().to_numpy()
    if (ok & with_offset).any() and (ok & ~with_offset).any():
        raise UsageError(f"{where} mixes timestamps with and without a time zone; fix the log or give --tz")
    offsets = sorted({o.replace(":", "") for o in offset[ok & with_offset]})
    if len(offsets) > 1:
        raise UsageError(f"{where} mixes time zones ({', '.join(offsets)})")
    naive = np.full(len(parsed), np.nan)
    naive[ok] = (parsed[ok].to_numpy().astype("datetime64[ns]").astype(np.int64)) / 1e9
    if offsets:
        shift = 0.0 if offsets[0] == "Z" else _offset_s(offsets[0])
        unix = naive - shift
    elif (fixed := zone(tz)) is not None:
        offset = fixed.utcoffset(None)
        assert offset is not None  # zone() makes fixed offsets only
        unix = naive - offset.total_seconds()
    else:
        minutes = np.floor(naive / 60.0) * 60.0
        unix = np.full(len(naive), np.nan)
        for minute in np.unique(minutes[ok]):
            local = (_EPOCH + dt.timedelta(seconds=float(minute))).timestamp()
            same = minutes == minute
            unix[same] = naive[same] + (local - minute)
    out[dated] = unix
    return out


_EPOCH = dt.datetime(1970, 1, 1)


def _likely_first(bodies) -> list[str]:
    """``_FORMATS`` with the one the first date-time fits first (a log keeps one format)."""
    for body in bodies[:1]:
        for fmt in _FORMATS:
            try:
                dt.datetime.strptime(body, fmt)
                return [fmt, *(f for f in _FORMATS if f != fmt)]
            except ValueError:
                continue
    return list(_FORMATS)


def _offset_s(text: str) -> float:
    sign = -1.0 if text.startswith("-") else 1.0
    digits = text[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)


def _numbers(texts: Sequence[str], hexadecimal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each text's value (as ``_number``) and whether it has one; vectorised."""
    import pandas as pd

    raw = np.array([str(t).strip() for t in texts], dtype=object)
    values = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float, copy=True)
    has = ~np.isnan(values)
    rest = np.flatnonzero(~has)
    if rest.size > 64:  # values with units ("131.60 W"): the first word, all at once
        first = pd.Series([t.split(" ", 1)[0] for t in raw[rest]], dtype=object)
        found = pd.to_numeric(first, errors="coerce").to_numpy(dtype=float)
        values[rest], has[rest] = found, ~np.isnan(found)
        rest = rest[~has[rest]]
    for i in rest:  # "[N/A]", "nan", "0x4": the few that need a closer look
        value = _number(raw[i], hexadecimal)
        if value is not None:
            values[i], has[i] = value, True
    values[~has] = np.nan
    return values, has


def _number(text: str, hexadecimal: bool = False) -> float | None:
    """A reading's value: ``131.60``, ``131.60 W``, ``-500.00``, ``nan``; None when there is none."""
    text = text.strip()
    if text.lower() in MISSING_TEXT:
        return None
    if hexadecimal and text.lower().startswith("0x"):
        try:
            return float(int(text, 16))
        except ValueError:
            return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


# -- the result --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerLog:
    """A power log as channels and sample series. Times: Unix s; values as written.

    Args:
        path: the file.
        kind: ``samples``, ``power-csv``, ``wattsup-csv`` or ``nvidia-smi``.
        channels: by name, in the log's order (STATE channels included).
        series: per channel, every row with a number, ascending in time.
        missing: per channel, the times of rows that had no value (``[N/A]``, empty, text).
        primary: the channel a report is about (``sum``, ``gpu0``, the run's first primary).
        warnings: what was repaired or skipped while reading.
        skipped_lines: lines that were not rows of the log.
        run_meta: the content of the ``run.json`` beside a samples file, if it was readable.
    """

    path: Path
    kind: str
    channels: Mapping[str, Channel]
    series: Mapping[str, SampleSeries]
    missing: Mapping[str, np.ndarray]
    primary: str
    warnings: tuple[str, ...] = ()
    skipped_lines: int = 0
    run_meta: Mapping | None = field(default=None, repr=False)

    @property
    def span(self) -> tuple[float, float]:
        """First and last sample time over every channel. Units: Unix s."""
        firsts = [float(s.times_s[0]) for s in self.series.values() if len(s)]
        lasts = [float(s.times_s[-1]) for s in self.series.values() if len(s)]
        return min(firsts), max(lasts)


@dataclass(frozen=True)
class Rejected:
    """Rows of one channel left out of integration, by reason. Units: Unix s.

    Args:
        times_s: per reason (``negative``, ``not_finite``, ``implausible``, ``missing``), when
            the rows were stamped, ascending.
        values: per reason, what the rows held (NaN for ``missing``).
    """

    times_s: Mapping[str, np.ndarray]
    values: Mapping[str, np.ndarray]

    def count(self) -> dict[str, int]:
        return {reason: int(t.size) for reason, t in self.times_s.items() if t.size}


def plausible(log: PowerLog, name: str) -> tuple[SampleSeries, Rejected]:
    """A channel's samples fit to integrate, and what was left out.

    The core's rule for a live run (``samples.invalid_reason``: a negative power or energy, a NaN
    or an infinity is no reading at all), and one more for power read from a file: above
    ``MAX_POWER_W`` (nvidia-smi printing its error value) it is no reading either.
    """

    channel, series = log.channels[name], log.series[name]
    t, v = series.times_s, series.values
    finite = np.isfinite(v)
    reasons = {NEGATIVE: finite & (v < 0) if channel.integrable else np.zeros(v.size, dtype=bool)}
    reasons[NOT_FINITE] = ~finite
    if channel.quantity == Quantity.POWER:
        reasons[IMPLAUSIBLE] = finite & (v > MAX_POWER_W)
    bad = np.zeros(v.size, dtype=bool)
    for mask in reasons.values():
        bad |= mask
    missing = log.missing.get(name, np.array([]))
    times = {reason: t[mask] for reason, mask in reasons.items()}
    values = {reason: v[mask] for reason, mask in reasons.items()}
    times[MISSING], values[MISSING] = missing, np.full(missing.size, np.nan)
    kept = series if not bad.any() else SampleSeries(t[~bad], v[~bad])
    return kept, Rejected(times, values)


# -- reading -----------------------------------------------------------------------------------


def read_log(path: Path | str, tz: str | None = None, name: str | None = None) -> PowerLog:
    """Read a power log of any kind this module knows.

    Args:
        tz: zone of date-times written without one (``local``, ``UTC``, ``+01:00``).
        name: the channel name of a ``time_s,power_w`` CSV (default: the file's stem).

    Raises:
        UsageError: the file does not exist, is empty, binary, truncated, or of no known kind.
    """
    path = Path(path)
    if not path.exists():
        raise UsageError(f"power log {path} does not exist")
    if path.is_dir():
        raise UsageError(f"power log {path} is a directory, not a file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read power log {path}: {e.strerror or e}") from e
    if not data.strip():
        raise UsageError(f"power log {path} is empty: no header and no rows")
    if data[:4] == b"PAR1" or path.suffix == ".parquet":
        return _read_parquet(path)
    return _read_csv(path, data, tz, name)


def _read_parquet(path: Path) -> PowerLog:
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises many types for a damaged file
        raise UsageError(
            f"{path} is not a readable parquet file ({_first_line(e)}): it is truncated or corrupt; "
            "write it again (or read samples.partial.csv beside it, if the run left one)"
        ) from e
    missing = [c for c in ("channel", "time_s", "value", "unit") if c not in frame.columns]
    if missing:
        raise UsageError(
            f"{path} lacks column(s) {missing} of a samples.parquet; it has {[str(c) for c in frame.columns]}"
        )
    times = pd.to_numeric(frame["time_s"], errors="coerce").to_numpy(dtype=float, copy=True)
    values = pd.to_numeric(frame["value"], errors="coerce").to_numpy(dtype=float, copy=True)
    # a float column's NaN is a NaN reading; text that is no number is no reading
    if pd.api.types.is_numeric_dtype(frame["value"]):
        has = np.ones(len(values), dtype=bool)
    else:
        has = ~np.isnan(values)
    names = frame["channel"].astype(str).to_numpy(dtype=object)
    units = frame["unit"].astype(str).to_numpy(dtype=object)
    return _samples_log(path, names, times, values, has, units, skipped=0, warnings=[])


def _read_csv(path: Path, data: bytes, tz: str | None, name: str | None) -> PowerLog:
    table = _Table.parse(path, data)
    columns = table.header
    if set(_SAMPLE_COLUMNS) <= set(columns):
        return _samples_from_table(path, table)
    if "time_s" in columns and ("power_w" in columns or "energy_j" in columns):
        return _power_csv(path, table, name or path.stem)
    if "time" in columns and any(c.startswith("pm") or c == "sum" for c in columns):
        return _wattsup(path, table, tz)
    if "timestamp" in columns and any(c.startswith("power.draw") for c in columns):
        return _nvidia_smi(path, table, tz)
    if "power_w" in columns or "energy_j" in columns:
        raise UsageError(f"{path} needs a time_s column (Unix seconds); it has {columns}")
    if "time_s" in columns:
        raise UsageError(f"{path} needs a power_w or energy_j column; it has {columns}")
    raise UsageError(
        f"{path} is not a power log energyframe knows ({_KNOWN}); its header: {_shown(table.header_text)}"
    )


@dataclass
class _Table:
    """A CSV split into its header and rows; lines that do not fit the header set apart."""

    path: Path
    header: list[str]
    header_text: str
    rows: list[tuple[int, list[str]]]
    bad: list[tuple[int, str]]
    torn: tuple[int, str] | None  # the last line, when it ends mid-row (no newline, short)
    unterminated: int | None = None  # the last row's line number, when no newline ends it

    @classmethod
    def parse(cls, path: Path, data: bytes) -> _Table:
        first = data.split(b"\n", 1)[0]
        if b"\x00" in first or _undecodable(first):
            raise UsageError(f"{path} is binary, not a CSV power log ({_KNOWN})")
        text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
        lines = text.split("\n")
        ends_with_newline = text.endswith("\n")
        if ends_with_newline:
            lines = lines[:-1]
        header_text = lines[0].rstrip("\r")
        header = [header_name(c) for c in next(csv.reader([header_text]))]
        rows, bad, torn = [], [], None
        last = len(lines) - 1
        for index in range(1, len(lines)):
            line = lines[index].rstrip("\r")
            if not line.strip():
                continue
            if "\x00" in line or "\ufffd" in line:
                bad.append((index + 1, line))
                continue
            try:
                # our logs never quote: split plainly, and leave quotes (which could swallow the
                # lines after a garbage one) to the csv module, one line at a time
                parts = line.split(",") if '"' not in line else next(csv.reader([line]))
                fields = [f.strip() for f in parts]
            except csv.Error:
                bad.append((index + 1, line))
                continue
            if len(fields) != len(header):
                if index == last and not ends_with_newline and len(fields) < len(header):
                    torn = (index + 1, line)
                else:
                    bad.append((index + 1, line))
                continue
            rows.append((index + 1, fields))
        unterminated = rows[-1][0] if rows and not ends_with_newline and rows[-1][0] == last + 1 else None
        return cls(path, header, header_text, rows, bad, torn, unterminated)

    def refuse_torn(self) -> None:
        if self.torn is not None:
            number, line = self.torn
            raise UsageError(
                f"{self.path} is truncated: its last line ({number}: {_shown(line)}) ends in the middle of a "
                "row; remove that line to analyse the rest"
            )

    def column(self, name: str) -> int:
        return self.header.index(name)


def _undecodable(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def _shown(text: str, limit: int = 80) -> str:
    """A piece of a file for a one-line message: control characters escaped, shortened."""
    shown = ascii(text[:limit])
    return shown + ("..." if len(text) > limit else "")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def _skipped_warning(path: Path, bad: list[tuple[int, str]], what: str) -> list[str]:
    if not bad:
        return []
    number, line = bad[0]
    return [
        f"{path.name}: {len(bad)} line(s) that are not {what} were skipped (first: line {number}: {_shown(line, 60)})"
    ]


def _no_rows(path: Path, table: _Table, what: str, bad: list[tuple[int, str]] | None = None) -> UsageError:
    bad = table.bad if bad is None else bad
    if bad:
        number, line = bad[0]
        return UsageError(f"{path} has no {what} (line {number}: {_shown(line, 60)} is not one)")
    return UsageError(f"power log {path} has a header but no rows")


# -- samples (energyframe's own) ---------------------------------------------------------------


def _samples_from_table(path: Path, table: _Table) -> PowerLog:
    # samples.partial.csv: a run that died mid-line leaves a short last row, which is its nature
    if not table.rows:
        raise _no_rows(path, table, "samples")
    columns = list(zip(*(fields for _line, fields in table.rows)))
    times, has_time = _numbers(columns[table.column("time_s")])
    values, has = _numbers(columns[table.column("value")])
    times[~has_time] = np.nan
    names = np.array(columns[table.column("channel")], dtype=object)
    units = np.array(columns[table.column("unit")], dtype=object)
    warnings = _skipped_warning(path, table.bad, "samples")
    return _samples_log(path, names, times, values, has, units, skipped=len(table.bad), warnings=warnings)


def _samples_log(
    path: Path,
    names: np.ndarray,
    times: np.ndarray,
    values: np.ndarray,
    has: np.ndarray,
    units: np.ndarray,
    skipped: int,
    warnings: list[str],
) -> PowerLog:
    """Channels and series of energyframe's own samples (arrays of one row per sample)."""
    meta, note = _run_meta(path)
    if note:
        warnings.append(note)
    recorded = {}
    for source in (meta or {}).get("sources", []):
        for data in source.get("channels", []):
            try:
                channel = Channel.from_json(data)
            except (KeyError, TypeError, ValueError):
                continue
            recorded[channel.name] = channel
    timed = np.isfinite(times)
    if not timed.all():
        warnings.append(f"{path.name}: {int((~timed).sum())} sample(s) without a time were skipped")
    channels, series, missing = {}, {}, {}
    for name in dict.fromkeys(names[timed]):  # in order of appearance
        rows = timed & (names == name)
        t, v, ok = times[rows], values[rows], has[rows]
        order = np.argsort(t, kind="stable")  # as the run's own sample store sorts
        t, v, ok = t[order], v[order], ok[order]
        channels[name] = _recorded_channel(recorded.get(name), name, str(units[rows][0]), t[ok])
        series[name] = SampleSeries(t[ok], v[ok])
        missing[name] = t[~ok]
    if not channels:
        what = "no sample with a time" if len(names) else "no samples (a run that measured timing only?)"
        raise UsageError(f"{path} holds {what}")
    primary = next(
        (n for n in (meta or {}).get("primary_channels", []) if isinstance(n, str) and n in channels),
        next((n for n, c in channels.items() if c.integrable), next(iter(channels), "")),
    )
    return PowerLog(path, SAMPLES, channels, series, missing, primary, tuple(warnings), skipped, meta)


def _recorded_channel(recorded: Channel | None, name: str, unit: str, t: np.ndarray) -> Channel:
    if recorded is not None:
        # the times in a samples file are Unix seconds, whatever clock the source stamped in
        return dataclasses.replace(recorded, clock=ClockBase.WALL)
    quantity = {"J": Quantity.ENERGY, "W": Quantity.POWER}.get(unit, Quantity.STATE)
    return Channel(name, quantity, Scope.OTHER, _spacing(t), ClockBase.WALL, unit=unit)


def _run_meta(path: Path) -> tuple[dict | None, str | None]:
    """The run.json beside a samples file, when there is one that reads as a run description."""
    run_json = path.with_name("run.json")
    if not run_json.is_file():
        return None, None
    try:
        meta = json.loads(run_json.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return (
            None,
            f"{run_json} cannot be read ({_first_line(e)}); channels are described by their units only",
        )
    if not isinstance(meta, dict) or not isinstance(meta.get("sources", []), list):
        return None, f"{run_json} is not a run description; channels are described by their units only"
    return meta, None


# -- time_s, power_w / energy_j ----------------------------------------------------------------


def _power_csv(path: Path, table: _Table, name: str) -> PowerLog:
    table.refuse_torn()
    column = "power_w" if "power_w" in table.header else "energy_j"
    columns = list(zip(*(fields for _n, fields in table.rows))) or [(), ()]
    t_all, timed = _numbers(columns[table.column("time_s")] if table.rows else ())
    timed &= np.isfinite(t_all)
    v_all, has = _numbers(columns[table.column(column)] if table.rows else ())
    bad = sorted(
        list(table.bad) + [(table.rows[i][0], ",".join(table.rows[i][1])) for i in np.flatnonzero(~timed)]
    )
    times, values = t_all[timed & has], v_all[timed & has]
    missing = t_all[timed & ~has]
    if not times.size and not missing.size:
        raise _no_rows(path, table, "rows with a time in seconds", bad)
    warnings = _skipped_warning(path, bad, "rows with a time")
    t, v, note = _sorted_unique(times, values, name, path.name)
    warnings += note
    quantity = Quantity.POWER if column == "power_w" else Quantity.ENERGY
    channel = Channel(name, quantity, Scope.OTHER, _spacing(t), ClockBase.WALL)
    return PowerLog(
        path,
        POWER_CSV,
        {name: channel},
        {name: SampleSeries(t, v)},
        {name: np.sort(missing)},
        name,
        tuple(warnings),
        len(bad),
    )


# -- the earlier tool's WattsUp? CSV -------------------------------------------------------------


def _wattsup(path: Path, table: _Table, tz: str | None) -> PowerLog:  # noqa: C901, PLR0915 (the WattsUp log's rules in one pass: meters not yet started, the sum only once all reported, a channel per meter)
    table.refuse_torn()
    meters = [c for c in table.header if c.startswith("pm")]
    names = meters + (["sum"] if "sum" in table.header else [])
    if not table.rows:
        raise _no_rows(path, table, "rows")
    _refuse_cut_sum(table, meters)
    texts = [fields[table.column("time")] for _n, fields in table.rows]
    times = _times(texts, tz, path.name)
    bad = list(table.bad)
    rows = []
    id_column = table.column("id") if "id" in table.header else None
    for (number, fields), t in zip(table.rows, times):
        if not math.isfinite(t):
            bad.append((number, ",".join(fields)))
            continue
        values = {c: fields[table.column(c)] for c in names}
        rows.append((t, fields[id_column] if id_column is not None else str(number), values))
    if not rows:
        number, fields = table.rows[0]
        raise UsageError(
            f"{path} line {number}: cannot read the time {fields[table.column('time')]!r} "
            "(expected e.g. 2026-02-04 10:15:23)"
        )
    warnings = _skipped_warning(path, bad, "rows of the log")
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    if order != list(range(len(rows))):
        warnings.append(f"{path.name}: rows are not in time order; sorted")
    rows = [rows[i] for i in order]
    channels, series, missing = {}, {}, {}
    duplicated = _repeated_rows(rows)
    rows = _last_of_each_second(rows)
    started = {m: False for m in meters}
    per_channel: dict[str, tuple[list, list, list]] = {n: ([], [], []) for n in names}
    for t, _id, texts_ in rows:
        readings: dict[str, float | None] = {}
        not_yet: set[str] = set()  # before a meter's first record energyframe writes it empty
        for m in meters:
            value = _number(texts_[m])
            if value is None and not started[m] and not texts_[m].strip():
                not_yet.add(m)
                continue
            started[m] = True
            readings[m] = value
        for n in names:
            if n == "sum":
                if not_yet:
                    continue  # not the wall yet: a meter has not reported
                value = None if any(readings[m] is None for m in meters) else _number(texts_["sum"])
            else:
                if n in not_yet:
                    continue
                value = readings[n]
            t_list, v_list, missing_list = per_channel[n]
            if value is None:
                missing_list.append(t)
            else:
                t_list.append(t)
                v_list.append(value)
    if duplicated:
        for n in names:
            warnings.append(
                f"{path.name}: {duplicated} duplicated timestamp(s) in {n}; their values were averaged"
            )
    period = _spacing(np.array(per_channel[names[-1]][0])) or 1.0
    for n in names:
        t_list, v_list, missing_list = per_channel[n]
        if not t_list:
            continue
        single = n == "sum" or len(names) == 1
        channels[n] = Channel(
            n,
            Quantity.POWER,
            Scope.SYSTEM_WALL,
            period,
            ClockBase.WALL,
            primary=single,
            description=("sum of the meters" if n == "sum" else f"WattsUp? meter {n}")
            + f" ({period:g}-s averages, stamped when they arrived)",
            timing=Timing.UNKNOWN,
            averaging_s=period,
        )
        series[n] = SampleSeries(np.array(t_list, dtype=float), np.array(v_list, dtype=float))
        missing[n] = np.array(missing_list, dtype=float)
    if not channels:
        raise UsageError(f"{path} has no power value in any of {names}")
    primary = "sum" if "sum" in channels else next(iter(channels))
    return PowerLog(path, WATTSUP_CSV, channels, series, missing, primary, tuple(warnings), len(bad))


def _refuse_cut_sum(table: _Table, meters: list[str]) -> None:
    """A last row with no newline whose sum is not the sum of its meters was cut mid-number."""
    if table.unterminated is None or "sum" not in table.header or not meters:
        return
    number, fields = table.rows[-1]
    values = [_number(fields[table.column(m)]) for m in meters]
    known = [v for v in values if v is not None]
    total = _number(fields[table.column("sum")])
    if total is None or len(known) < len(values):
        return
    if abs(total - sum(known)) > 0.1 * len(meters) + 0.1:  # each value printed to 0.1 W
        table.torn = (number, ",".join(fields))
        table.refuse_torn()


def _repeated_rows(rows: list[tuple[float, str, dict]]) -> int:
    """Rows that repeat an earlier row's time and id (the same record written twice)."""
    seen: set[tuple[float, str]] = set()
    repeated = 0
    for t, row_id, _values in rows:
        if (t, row_id) in seen:
            repeated += 1
        seen.add((t, row_id))
    return repeated


def _last_of_each_second(rows: list[tuple[float, str, dict]]) -> list[tuple[float, str, dict]]:
    """One row per timestamp. Rows of one record written twice (same id) are averaged; rows of
    different records stamped in the same second (energyframe writes one per meter record, the
    stamp has whole seconds) count as the last of them: every meter's state at that second's end."""
    out: list[tuple[float, str, dict]] = []
    i = 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and rows[j + 1][0] == rows[i][0]:
            j += 1
        group = rows[i : j + 1]
        last_id = group[-1][1]
        same = [g for g in group if g[1] == last_id]
        if len(same) == 1:
            out.append(group[-1])
        else:
            merged = {}
            for column in same[0][2]:
                numbers = [x for x in (_number(g[2][column]) for g in same) if x is not None]
                merged[column] = repr(float(np.mean(numbers))) if numbers else same[-1][2][column]
            out.append((rows[i][0], last_id, merged))
        i = j + 1
    return out


# -- nvidia-smi --------------------------------------------------------------------------------


def _nvidia_smi(path: Path, table: _Table, tz: str | None) -> PowerLog:  # noqa: C901 (a channel per GPU and nvidia-smi field, each with its own timing and type)
    table.refuse_torn()
    header = table.header
    power = [f for f in POWER_FIELDS if f in header]
    preferred = power[0]
    if not table.rows:
        raise _no_rows(path, table, "rows")
    columns = list(zip(*(fields for _n, fields in table.rows)))  # one tuple of texts per column
    times = _times(columns[table.column("timestamp")], tz, path.name)
    gpus = np.array(columns[table.column("index")] if "index" in header else ["0"] * len(times), dtype=object)
    good = np.isfinite(times) & np.array([g.isdigit() for g in gpus], dtype=bool)
    bad = list(table.bad) + [(table.rows[i][0], ",".join(table.rows[i][1])) for i in np.flatnonzero(~good)]
    bad.sort()
    if not good.any():
        number, fields = table.rows[0]
        raise UsageError(
            f"{path} line {number}: cannot read the time {fields[table.column('timestamp')]!r} "
            "(expected e.g. 2026/11/22 03:41:38.233)"
        )
    warnings = _skipped_warning(path, bad, "rows of nvidia-smi's log")
    names: dict[tuple[str, str], Channel] = {}
    for gpu in sorted(set(gpus[good]), key=int):
        base = f"gpu{gpu}"
        # the channels the live nvidia-smi source makes: the preferred field, and the 1-s average
        for field_name in dict.fromkeys(
            [preferred, *(["power.draw.average"] if "power.draw.average" in power else [])]
        ):
            if field_name == preferred:
                name, is_primary = base, True
            else:
                name, is_primary = f"{base}.power_average", False
            instant = field_name == "power.draw.instant"
            names[(gpu, field_name)] = Channel(
                name,
                Quantity.POWER,
                Scope.GPU,
                0.0,
                ClockBase.WALL,
                primary=is_primary,
                description=f"nvidia-smi {field_name}"
                + (
                    ""
                    if instant
                    else ": a 1-s average on Ampere and newer, placed at the middle of its second"
                ),
                timing=Timing.EXACT if instant else Timing.PERIOD_END,
                averaging_s=0.0 if instant else AVERAGE_WINDOW_S,
            )
        for field_name, (suffix, unit) in STATE_FIELDS.items():
            if field_name in header:
                names[(gpu, field_name)] = Channel(
                    f"{base}.{suffix}",
                    Quantity.STATE,
                    Scope.GPU,
                    0.0,
                    ClockBase.WALL,
                    unit=unit,
                    primary=False,
                    description=f"nvidia-smi {field_name}",
                )
    channels, series, missing = {}, {}, {}
    unsorted = False
    for (gpu, field_name), channel in names.items():
        rows = good & (gpus == gpu)
        values, has = _numbers(
            np.array(columns[table.column(field_name)], dtype=object)[rows],
            hexadecimal=channel.quantity == Quantity.STATE,
        )
        t = times[rows]
        if not has.any():
            continue  # a field this GPU never reported ([N/A] throughout): no channel
        unsorted |= bool(np.any(np.diff(t) < 0))
        t_kept, v, note = _sorted_unique(t[has], values[has], channel.name, path.name, sorted_note=False)
        warnings += note
        resolution = _spacing(t_kept)
        if channel.integrable:
            resolution = max(resolution, 0.1)  # the sensor updates every ~100 ms, whatever the -lms
        channels[channel.name] = dataclasses.replace(channel, resolution_s=resolution)
        series[channel.name] = SampleSeries(t_kept, v)
        missing[channel.name] = np.sort(t[~has])
    if unsorted:
        warnings.append(f"{path.name}: rows are not in time order; sorted")
    if not any(c.integrable for c in channels.values()):
        raise UsageError(f"{path} has no power value in any row ({', '.join(power)} are all missing)")
    primary = next((c.name for c in channels.values() if c.primary and c.integrable), "")
    if not primary:
        primary = next(c.name for c in channels.values() if c.integrable)
    return PowerLog(path, NVIDIA_SMI, channels, series, missing, primary, tuple(warnings), len(bad))


# -- shared ------------------------------------------------------------------------------------


def _sorted_unique(
    t: np.ndarray, v: np.ndarray, name: str, where: str, sorted_note: bool = True
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Ascending times; values at a repeated time averaged, with a warning."""
    notes = []
    t, v = t.astype(float), v.astype(float)
    if t.size and np.any(np.diff(t) < 0):
        if sorted_note:
            notes.append(f"{where}: rows are not in time order; sorted")
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    if t.size and np.any(np.diff(t) == 0):
        unique, inverse = np.unique(t, return_inverse=True)
        sums = np.bincount(inverse, weights=v)
        counts = np.bincount(inverse)
        notes.append(
            f"{where}: {t.size - unique.size} duplicated timestamp(s) in {name}; their values were averaged"
        )
        t, v = unique, sums / counts
    return t, v, notes


def _spacing(t: np.ndarray) -> float:
    """The median interval between samples. Units: s."""
    if t.size < 2:
        return 0.0
    steps = np.diff(t)
    steps = steps[steps > 0]
    return float(np.median(steps)) if steps.size else 0.0
