"""Times in power logs: Unix seconds, or date-times with or without a zone, one or a column."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence

import numpy as np

from ...errors import UsageError

_OFFSET = re.compile(r"(Z|[+-]\d{2}:?\d{2})$")
_FORMATS = (
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
)
_EPOCH = dt.datetime(1970, 1, 1)
#: Unix seconds a log or a window may hold: 1970 to the end of year 9999 (what a date-time can
#: show). Milliseconds read as seconds land far beyond. Units: s.
LATEST_UNIX_S = 253402300799.0


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
    """A timestamp as Unix seconds: a number, or a date-time (with an offset, or in ``tz``).

    Raises:
        UsageError: no time, or a number outside 1970 to 9999 (milliseconds given as seconds).
    """
    text = str(text).strip()
    value = _parse_time(text, zone(tz))
    if value is None:
        raise UsageError(f"cannot read the time {text!r} (expected e.g. 2026-02-04 10:15:23.123)")
    check_unix(np.array([value]), f"the time {text!r}")
    return value


def check_unix(times: np.ndarray, what: str) -> None:
    """Refuse times that no date can show (a column of milliseconds read as seconds).

    Raises:
        UsageError: naming ``what``, the value and the range.
    """
    finite = times[np.isfinite(times)]
    if not finite.size:
        return
    low, high = float(finite.min()), float(finite.max())
    bad = high if high > LATEST_UNIX_S else low if low < 0 else None
    if bad is None:
        return
    milliseconds = LATEST_UNIX_S < bad < 1000 * LATEST_UNIX_S
    hint = " (milliseconds? times are Unix seconds)" if milliseconds else ""
    raise UsageError(
        f"{what} holds {bad:.6g}, which is no time in Unix seconds{hint}: times must lie between 0 "
        f"(1970) and {LATEST_UNIX_S:.0f} (the end of 9999)"
    )


def iso(seconds: float) -> str:
    """Unix seconds as a local date-time to the ms, for messages (``nothing`` when not a time)."""
    if not math.isfinite(seconds) or not 0 <= seconds <= LATEST_UNIX_S:
        return "nothing" if not math.isfinite(seconds) else f"{seconds:.6g} s"
    try:
        return dt.datetime.fromtimestamp(seconds).isoformat(sep=" ", timespec="milliseconds")
    except (OverflowError, OSError, ValueError):  # beyond what this platform's time functions show
        return f"{seconds:.6g} s"


def unix_times(texts: Sequence[str], tz: str | None, where: str) -> np.ndarray:
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
    out[dated] = _to_unix(naive, ok, offsets[0] if offsets else None, tz)
    return out


def _to_unix(naive: np.ndarray, ok: np.ndarray, offset: str | None, tz: str | None) -> np.ndarray:
    """Date-times read as if in UTC, moved by their written offset, ``tz``, or local rules."""
    if offset is not None:
        return naive - (0.0 if offset == "Z" else _offset_s(offset))
    fixed = zone(tz)
    if fixed is not None:
        shift = fixed.utcoffset(None)
        assert shift is not None  # zone() makes fixed offsets only
        return naive - shift.total_seconds()
    minutes = np.floor(naive / 60.0) * 60.0
    unix = np.full(len(naive), np.nan)
    for minute in np.unique(minutes[ok]):
        local = (_EPOCH + dt.timedelta(seconds=float(minute))).timestamp()
        same = minutes == minute
        unix[same] = naive[same] + (local - minute)
    return unix


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
