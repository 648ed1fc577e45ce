"""Raw samples: a channel's series on the run's monotonic timeline, and the rule a reading must
pass to be integrated (``samplestore.py`` applies it as a run collects them).

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

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..model import Channel, Quantity
from .clock import ChannelTimeMap

PARTIAL_NAME = "samples.partial.csv"
SAMPLE_COLUMNS = ["source", "channel", "time_s", "value", "unit"]


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
