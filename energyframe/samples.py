"""Raw samples: collected from the sources, kept on the run's monotonic timeline, written out.

While a run goes, every batch a source hands over is appended to ``samples.partial.csv`` in the
run directory and flushed, so a crash or Ctrl-C loses nothing already read; when the run ends,
the samples are written to ``samples.parquet`` and the partial file is removed.
"""

from __future__ import annotations

import csv
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .clock import ChannelTimeMap, ClockModel
from .interfaces import Channel, Sample

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


class SampleStore:
    """Per-channel sample lists, thread-safe, with an optional append-only log on disk."""

    def __init__(self, clock: ClockModel, partial_path: Path | None = None) -> None:
        self.clock = clock
        self.channels: dict[str, Channel] = {}
        self.channel_source: dict[str, str] = {}
        self._times: dict[str, list[float]] = {}
        self._values: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self._partial_path = partial_path
        self._partial_file = None
        self._writer = None
        if partial_path is not None:
            self._partial_file = open(partial_path, "w", newline="")
            self._writer = csv.writer(self._partial_file)
            self._writer.writerow(SAMPLE_COLUMNS)
            self._partial_file.flush()

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
                self._times[s.channel].append(t)
                self._values[s.channel].append(float(s.value))
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
            if rows:
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

    def to_frame(self) -> pd.DataFrame:
        """Every sample: ``source, channel, time_s`` (Unix seconds), ``value, unit``."""
        frames = []
        for name, channel in self.channels.items():
            series = self.series(name)
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
                self._partial_file.close()
                self._partial_file = None
                self._writer = None

    def discard_partial(self) -> None:
        """Remove the append-only log once the samples are safely in samples.parquet."""
        self.close()
        if self._partial_path is not None and self._partial_path.exists():
            self._partial_path.unlink()
