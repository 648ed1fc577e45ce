"""Raw samples: collected from the sources, kept on the run's monotonic timeline, written out.

While a run goes, every batch a source hands over is appended to ``samples.partial.csv`` in the
run directory and flushed, so a crash or Ctrl-C loses nothing already read; when the run ends,
the samples are written to ``samples.parquet`` and the partial file is removed.

A reading that cannot be physical (negative power or energy, NaN, infinity) is kept in the raw
record but never integrated: it is left out of the channel's series, counted, and the windows
around it are flagged (``windows.py``), so a sensor's bad day never becomes a confident number.
Two readings of one channel at one instant are averaged and the windows around them flagged
``duplicate_samples``. A channel declared in mW (or uJ, kWh, ...) is kept in W (J): its readings
are converted as they arrive; a unit of power or energy not in ``POWER_UNITS`` /
``ENERGY_UNITS`` is refused when the channel is registered. ``accept`` applies the same rules to
a whole stream at once (a log read offline).
"""

from __future__ import annotations

import csv
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import PowerSourceError
from ..model import Channel, Quantity, Sample
from .clock import ChannelTimeMap, ClockModel

PARTIAL_NAME = "samples.partial.csv"
#: how far out of time order a reading may arrive and still be found by ``series_since``: a
#: stalled source is failed after a few seconds, long before this. Units: s.
LATE_SLACK_S = 30.0
SAMPLE_COLUMNS = ["source", "channel", "time_s", "value", "unit"]


def _recent_start(times: list[float], cut_s: float) -> int:
    """The index after the last reading (in arrival order) stamped before ``cut_s``: the recent
    readings start there. Searched from the end in numpy chunks that double, so a window's
    live number costs its own readings, a few array operations rather than a Python loop."""
    i, step = len(times), 1024
    while i > 0:
        lo = max(i - step, 0)
        before = np.flatnonzero(np.asarray(times[lo:i], dtype=float) < cut_s)
        if before.size:
            return lo + int(before[-1]) + 1
        i, step = lo, step * 2
    return 0


@dataclass(frozen=True)
class SampleSeries:
    """One channel's samples, ascending in time, on the run's monotonic timeline. Units: s."""

    times_s: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.times_s.size)

    def between(self, start_s: float, end_s: float) -> SampleSeries:
        """The samples with ``start_s <= t <= end_s``."""
        lo = int(np.searchsorted(self.times_s, start_s, side="left"))
        hi = int(np.searchsorted(self.times_s, end_s, side="right"))
        return SampleSeries(self.times_s[lo:hi], self.values[lo:hi])

    def shifted(self, time_map: ChannelTimeMap) -> SampleSeries:
        if time_map.is_identity:
            return self
        return SampleSeries(time_map.apply(self.times_s), self.values)


NEGATIVE = "negative"
NOT_FINITE = "not_finite"
IMPLAUSIBLE = "implausible"
#: a reading stamped at the same instant as another of its channel (two rows for one GPU at one
#: timestamp, a plugin giving two values at once): which one is true is unknown, so the readings
#: of one instant are averaged and the windows around them flagged
DUPLICATE = "duplicate"
#: offline: a log row without a value (``[N/A]``, an empty field)
MISSING = "missing"
#: offline: a log row inside the span over which the log's clock stepped back (rows before and
#: after the step both claim those times; which are true is unknown)
STEPPED = "clock_step"

#: no channel energyframe reads can report more than this; above it a reading is a sensor's
#: error value (0xFFFFFFFF mW is 4.3 MW), never power. Units: W.
MAX_POWER_W = 1e6

#: the units a channel may declare, and one of each in the unit energyframe integrates (W, J)
POWER_UNITS = {"W": 1.0, "mW": 1e-3, "kW": 1e3, "uW": 1e-6, "\u00b5W": 1e-6}
ENERGY_UNITS = {"J": 1.0, "mJ": 1e-3, "kJ": 1e3, "uJ": 1e-6, "\u00b5J": 1e-6, "Wh": 3600.0, "kWh": 3.6e6}


def si_scale(quantity: Quantity, unit: str) -> float | None:
    """What one ``unit`` of a reading of ``quantity`` is in W or J (1 for STATE, whatever its
    unit); None for a unit of power or energy this table does not know."""
    table = {Quantity.POWER: POWER_UNITS, Quantity.ENERGY: ENERGY_UNITS}.get(quantity)
    if table is None:
        return 1.0
    return table.get(unit.strip() or ("W" if quantity == Quantity.POWER else "J"))


def in_si(channel: Channel) -> tuple[Channel, float]:
    """The channel as it is integrated (unit W or J) and the factor its readings take.

    Raises:
        ValueError: a power or energy channel declaring a unit this table does not know.
    """
    scale = si_scale(channel.quantity, channel.unit)
    if scale is None:
        known = POWER_UNITS if channel.quantity == Quantity.POWER else ENERGY_UNITS
        raise ValueError(
            f"channel {channel.name!r} declares its {channel.quantity.value} in {channel.unit!r}, a unit "
            f"energyframe does not know (known: {', '.join(k for k in known if k.isascii())})"
        )
    if not channel.integrable:
        return channel, 1.0
    unit = "W" if channel.quantity == Quantity.POWER else "J"
    return (channel if channel.unit == unit else replace(channel, unit=unit)), scale


def invalid_reason(channel: Channel, value: float) -> str | None:
    """Why a reading of ``channel`` cannot be physical (``None`` when it can)."""
    if not math.isfinite(value):
        return NOT_FINITE
    if channel.integrable and value < 0:
        return NEGATIVE
    if channel.quantity == Quantity.POWER and value > MAX_POWER_W:
        return IMPLAUSIBLE
    return None


def invalid_reasons(channel: Channel, values: np.ndarray) -> np.ndarray:
    """``invalid_reason`` of every value at once: the reason, or ``""`` where it can be physical."""
    v = np.asarray(values, dtype=float)
    out = np.full(v.size, "", dtype=object)
    finite = np.isfinite(v)
    out[~finite] = NOT_FINITE
    if channel.integrable:
        out[finite & (v < 0)] = NEGATIVE
    if channel.quantity == Quantity.POWER:
        out[finite & (v > MAX_POWER_W)] = IMPLAUSIBLE
    return out


def merge_duplicates(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Readings sorted by time (stable), those of one instant replaced by their mean.

    Returns:
        times, values, and the instant of every reading that was merged into another (one entry
        per extra reading: two readings at 5.0 s give ``[5.0]``). Units: s.
    """
    t, v = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    if t.size > 1 and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    if t.size < 2:
        return t, v, np.array([])
    same = np.diff(t) == 0
    if not same.any():
        return t, v, np.array([])
    unique, inverse = np.unique(t, return_inverse=True)
    sums = np.bincount(inverse, weights=v)
    counts = np.bincount(inverse)
    return unique, sums / counts, t[1:][same]


@dataclass
class Rejected:
    """Readings of one channel that were kept out of its series (or merged), by reason.

    Args:
        counts: per reason, how many readings (those without a usable time included).
        times_s: per reason, when the readings were taken (on the timeline of the series).
        values: per reason, what they held (NaN for a row without a value).
    """

    counts: dict[str, int] = field(default_factory=dict)
    times_s: dict[str, list[float]] = field(default_factory=dict)
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, reason: str, time_s: float, value: float = math.nan) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if math.isfinite(time_s):
            self.times_s.setdefault(reason, []).append(time_s)
            self.values.setdefault(reason, []).append(value)

    def extend(self, reason: str, times_s: np.ndarray, values: np.ndarray | None = None) -> None:
        """Add many readings of one reason (``values`` NaN when not given)."""
        t = np.asarray(times_s, dtype=float)
        if not t.size:
            return
        v = np.full(t.size, math.nan) if values is None else np.asarray(values, dtype=float)
        self.counts[reason] = self.counts.get(reason, 0) + int(t.size)
        timed = np.isfinite(t)
        self.times_s.setdefault(reason, []).extend(t[timed].tolist())
        self.values.setdefault(reason, []).extend(v[timed].tolist())

    def count(self) -> dict[str, int]:
        """How many readings, per reason that has any."""
        return {reason: n for reason, n in self.counts.items() if n}

    def times(self) -> dict[str, np.ndarray]:
        """When, per reason, ascending (what ``compute_windows`` flags windows by)."""
        return {r: np.sort(np.asarray(t, dtype=float)) for r, t in self.times_s.items() if t}

    def first(self, reason: str) -> tuple[float, float]:
        """The earliest reading of ``reason``: (time, value)."""
        t = np.asarray(self.times_s.get(reason, ()), dtype=float)
        if not t.size:
            return math.nan, math.nan
        i = int(np.argmin(t))
        return float(t[i]), float(self.values[reason][i])


def accept(channel: Channel, times: np.ndarray, values: np.ndarray) -> tuple[SampleSeries, Rejected]:
    """A whole stream of ``channel`` split by the rule a live run applies reading by reading
    (``SampleStore``): readings that cannot be physical, or have no time, are kept out; readings
    of one instant are averaged. Returns the series to integrate and what was left out."""
    t, v = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    reasons = invalid_reasons(channel, v)
    reasons[(reasons == "") & ~np.isfinite(t)] = NOT_FINITE
    rejected = Rejected()
    for reason in dict.fromkeys(reasons[reasons != ""]):
        mask = reasons == reason
        rejected.extend(str(reason), t[mask], v[mask])
    ok = reasons == ""
    kept_t, kept_v, merged = merge_duplicates(t[ok], v[ok])
    rejected.extend(DUPLICATE, merged)
    return SampleSeries(kept_t, kept_v), rejected


def empty_samples_frame() -> pd.DataFrame:
    """A samples table with no row (``SAMPLE_COLUMNS``, typed)."""
    return pd.DataFrame({c: pd.Series(dtype=float if c in ("time_s", "value") else object) for c in SAMPLE_COLUMNS})


class SampleStore:
    """Per-channel sample lists, thread-safe, with an optional append-only log on disk."""

    def __init__(self, clock: ClockModel, partial_path: Path | None = None) -> None:
        self.clock = clock
        self.channels: dict[str, Channel] = {}
        self.channel_source: dict[str, str] = {}
        self._times: dict[str, list[float]] = {}
        self._values: dict[str, list[float]] = {}
        self._rejected_raw: dict[str, list[tuple[float, float]]] = {}
        self._scale: dict[str, float] = {}  # what one declared unit is in W or J
        self._lock = threading.Lock()
        self.rejected: dict[str, Rejected] = {}
        self._partial_path = partial_path
        self._partial_file = None
        self._writer = None
        if partial_path is not None:
            self._partial_file = open(partial_path, "w", newline="")  # noqa: SIM115 (closed by close())
            self._writer = csv.writer(self._partial_file)
            self._writer.writerow(SAMPLE_COLUMNS)
            self._partial_file.flush()

    @property
    def partial_path(self) -> Path | None:
        return self._partial_path

    def register(self, source_name: str, channels: Iterable[Channel]) -> None:
        """Take ``channels`` in; a power or energy channel declared in another unit than W or J
        (``mW``, ``uJ``) is kept in W or J, its readings converted as they arrive.

        Raises:
            ValueError: a channel name already taken.
            PowerSourceError: a unit of power or energy energyframe does not know.
        """
        converted = []
        for channel in channels:
            try:
                converted.append((channel.name, *in_si(channel)))
            except ValueError as e:
                raise PowerSourceError(f"{e}: source {source_name!r} cannot be integrated") from e
        with self._lock:
            for name, channel, scale in converted:
                if name in self.channels:
                    raise ValueError(
                        f"channel {name!r} of {source_name!r} already comes from "
                        f"{self.channel_source[name]!r}; channel names must be unique"
                    )
                self.channels[name] = channel
                self.channel_source[name] = source_name
                self._scale[name] = scale
                self._times[name] = []
                self._values[name] = []
                self._rejected_raw[name] = []

    def add(self, source_name: str, samples: Iterable[Sample]) -> int:
        """Map ``samples`` onto the monotonic timeline, keep them, and log them to disk."""
        rows = []
        added = 0
        with self._lock:
            for s in samples:
                channel = self.channels.get(s.channel)
                if channel is None or self.channel_source[s.channel] != source_name:
                    raise ValueError(
                        f"source {source_name!r} sent a sample for unknown channel {s.channel!r}"
                    )
                t = self.clock.to_monotonic(s.time_s, channel.clock)
                value = float(s.value) * self._scale[s.channel]
                reason = invalid_reason(channel, value)
                if reason is not None or not math.isfinite(t):
                    # kept in the raw record, never in the series that windows integrate
                    self.rejected.setdefault(s.channel, Rejected()).add(reason or NOT_FINITE, t, value)
                    self._rejected_raw[s.channel].append((t, value))
                else:
                    self._times[s.channel].append(t)
                    self._values[s.channel].append(value)
                added += 1
                if self._writer is not None:
                    rows.append(
                        (
                            source_name,
                            s.channel,
                            repr(self.clock.to_unix(t)),
                            repr(value),
                            channel.unit,
                        )
                    )
            if rows and self._writer is not None and self._partial_file is not None:
                self._writer.writerows(rows)
                self._partial_file.flush()
        return added

    def count(self, channel: str | None = None) -> int:
        with self._lock:
            if channel is not None:
                return len(self._times[channel])
            return sum(len(v) for v in self._times.values())

    def last_time(self, channel: str) -> float | None:
        with self._lock:
            times = self._times[channel]
            return max(times[-8:]) if times else None

    def _raw(self, channel: str) -> SampleSeries:
        """The channel's accepted readings sorted by time (sources may deliver slightly out of
        order), readings of one instant each kept."""
        with self._lock:
            t = np.asarray(self._times[channel], dtype=float)
            v = np.asarray(self._values[channel], dtype=float)
        order = np.argsort(t, kind="stable")
        return SampleSeries(t[order], v[order])

    def series(self, channel: str) -> SampleSeries:
        """The channel's samples sorted by time, readings of one instant averaged (``DUPLICATE``)."""
        raw = self._raw(channel)
        t, v, _merged = merge_duplicates(raw.times_s, raw.values)
        return SampleSeries(t, v)

    def all_series(self) -> Mapping[str, SampleSeries]:
        return {name: self.series(name) for name in self.channels}

    def series_since(self, channel: str, since_s: float) -> SampleSeries:
        """``series(channel)`` from ``since_s`` on, reading only the recent readings (those
        delivered up to ``LATE_SLACK_S`` out of order included): the live number of a window
        costs its own samples, not the whole run's so far."""
        with self._lock:
            times, values = self._times[channel], self._values[channel]
            i = _recent_start(times, since_s - LATE_SLACK_S)
            t = np.asarray(times[i:], dtype=float)
            v = np.asarray(values[i:], dtype=float)
        order = np.argsort(t, kind="stable")
        merged_t, merged_v, _ = merge_duplicates(t[order], v[order])
        return SampleSeries(merged_t, merged_v).between(since_s, math.inf)

    def _all_rejected(self) -> dict[str, Rejected]:
        """Every channel's rejected readings, and the readings merged into another of their instant."""
        with self._lock:
            out = {
                name: Rejected(dict(r.counts), {k: list(t) for k, t in r.times_s.items()}, {})
                for name, r in self.rejected.items()
            }
        for name in [n for n, c in self.channels.items() if c.integrable]:
            raw = self._raw(name)
            merged = merge_duplicates(raw.times_s, raw.values)[2]
            if merged.size:
                out.setdefault(name, Rejected()).extend(DUPLICATE, merged)
        return out

    def rejected_json(self) -> dict[str, dict[str, int]]:
        """How many readings of each channel were kept out of its series (or merged), by reason
        (run.json)."""
        return {name: r.count() for name, r in self._all_rejected().items()}

    def rejected_times(self) -> dict[str, dict[str, np.ndarray]]:
        """When each channel's rejected (or merged) readings were taken, by reason (monotonic s):
        window flags."""
        return {name: r.times() for name, r in self._all_rejected().items()}

    def to_frame(self) -> pd.DataFrame:
        """Every sample, rejected readings included: ``source, channel, time_s`` (Unix s), ``value, unit``."""
        frames = []
        for name, channel in self.channels.items():
            series = self._raw(name)
            with self._lock:
                bad = list(self._rejected_raw.get(name, ()))
            if bad:
                t = np.concatenate([series.times_s, [b[0] for b in bad]])
                v = np.concatenate([series.values, [b[1] for b in bad]])
                order = np.argsort(t, kind="stable")
                series = SampleSeries(t[order], v[order])
            frames.append(
                pd.DataFrame(
                    {
                        "source": self.channel_source[name],
                        "channel": name,
                        "time_s": self.clock.to_unix(series.times_s),
                        "value": series.values,
                        "unit": channel.unit,
                    }
                )
            )
        if not frames:
            return empty_samples_frame()
        return pd.concat(frames, ignore_index=True)

    def close(self) -> None:
        with self._lock:
            if self._partial_file is not None:
                try:
                    self._partial_file.close()
                except OSError:  # a full disk: the failure that caused it was already reported
                    pass
                self._partial_file = None
                self._writer = None

    def discard_partial(self) -> None:
        """Remove the append-only log once the samples are safely in samples.parquet."""
        self.close()
        if self._partial_path is not None and self._partial_path.exists():
            self._partial_path.unlink()
