"""Raw samples: collected from the sources, kept on the run's monotonic timeline, written out.

While a run goes, every batch a source hands over is appended to ``samples.partial.csv`` in the
run directory and flushed, so a crash or Ctrl-C loses nothing already read; when the run ends,
the samples are written to ``samples.parquet`` and the partial file is removed.

A reading that cannot be physical (negative power or energy, NaN, infinity) is kept in the raw
record but never integrated: it is left out of the channel's series, counted, and the windows
around it are flagged (``windows.py``), so a sensor's bad day never becomes a confident number.
"""

from __future__ import annotations

import csv
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..model import Channel, Quantity, Sample
from .clock import ChannelTimeMap, ClockModel

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

#: no channel energyframe reads can report more than this; above it a reading is a sensor's
#: error value (0xFFFFFFFF mW is 4.3 MW), never power. Units: W.
MAX_POWER_W = 1e6


def invalid_reason(channel: Channel, value: float) -> str | None:
    """Why a reading of ``channel`` cannot be physical (``None`` when it can)."""
    if not math.isfinite(value):
        return NOT_FINITE
    if channel.integrable and value < 0:
        return NEGATIVE
    if channel.quantity == Quantity.POWER and value > MAX_POWER_W:
        return IMPLAUSIBLE
    return None


@dataclass
class Rejected:
    """Readings of one channel that were kept out of its series, by reason. Units: monotonic s."""

    counts: dict[str, int] = field(default_factory=dict)
    times_s: dict[str, list[float]] = field(default_factory=dict)

    def add(self, reason: str, time_s: float) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if math.isfinite(time_s):
            self.times_s.setdefault(reason, []).append(time_s)


class SampleStore:
    """Per-channel sample lists, thread-safe, with an optional append-only log on disk."""

    def __init__(self, clock: ClockModel, partial_path: Path | None = None) -> None:
        self.clock = clock
        self.channels: dict[str, Channel] = {}
        self.channel_source: dict[str, str] = {}
        self._times: dict[str, list[float]] = {}
        self._values: dict[str, list[float]] = {}
        self._rejected_raw: dict[str, list[tuple[float, float]]] = {}
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
        with self._lock:
            for channel in channels:
                if channel.name in self.channels:
                    raise ValueError(
                        f"channel {channel.name!r} of {source_name!r} already comes from "
                        f"{self.channel_source[channel.name]!r}; channel names must be unique"
                    )
                self.channels[channel.name] = channel
                self.channel_source[channel.name] = source_name
                self._times[channel.name] = []
                self._values[channel.name] = []
                self._rejected_raw[channel.name] = []

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
                value = float(s.value)
                reason = invalid_reason(channel, value)
                if reason is not None or not math.isfinite(t):
                    # kept in the raw record, never in the series that windows integrate
                    self.rejected.setdefault(s.channel, Rejected()).add(reason or NOT_FINITE, t)
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
                            repr(float(s.value)),
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

    def series(self, channel: str) -> SampleSeries:
        """The channel's samples sorted by time (sources may deliver slightly out of order)."""
        with self._lock:
            t = np.asarray(self._times[channel], dtype=float)
            v = np.asarray(self._values[channel], dtype=float)
        order = np.argsort(t, kind="stable")
        return SampleSeries(t[order], v[order])

    def all_series(self) -> Mapping[str, SampleSeries]:
        return {name: self.series(name) for name in self.channels}

    def rejected_json(self) -> dict[str, dict[str, int]]:
        """How many readings of each channel were kept out of its series, by reason (run.json)."""
        with self._lock:
            return {name: dict(r.counts) for name, r in self.rejected.items()}

    def rejected_times(self) -> dict[str, dict[str, np.ndarray]]:
        """When each channel's rejected readings were taken, by reason (monotonic s): window flags."""
        with self._lock:
            return {
                name: {reason: np.sort(np.asarray(t, dtype=float)) for reason, t in r.times_s.items()}
                for name, r in self.rejected.items()
            }

    def to_frame(self) -> pd.DataFrame:
        """Every sample, rejected readings included: ``source, channel, time_s`` (Unix s), ``value, unit``."""
        frames = []
        for name, channel in self.channels.items():
            series = self.series(name)
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
            return pd.DataFrame(
                {c: pd.Series(dtype=float if c in ("time_s", "value") else object) for c in SAMPLE_COLUMNS}
            )
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
