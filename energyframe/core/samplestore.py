"""The samples a run collects: every batch a source hands over, mapped onto the run's monotonic
timeline, kept per channel and, while the run goes, appended to ``samples.partial.csv`` in the
run directory and flushed, so a crash or Ctrl-C loses nothing already read; when the run ends,
the samples are written to ``samples.parquet`` and the partial file is removed. Each reading
passes the rule of ``samples.py`` as it arrives.
"""

from __future__ import annotations

import csv
import errno
import math
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import PowerSourceError, StoreError
from ..model import Channel, Sample
from .clock import ClockModel
from .samples import (
    DUPLICATE,
    NOT_FINITE,
    SAMPLE_COLUMNS,
    Rejected,
    SampleSeries,
    empty_samples_frame,
    in_si,
    invalid_reason,
    merge_duplicates,
)

#: how far out of time order a reading may arrive and still be found by ``series_since``: a
#: stalled source is failed after a few seconds, long before this. Units: s.
LATE_SLACK_S = 30.0


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
            try:
                self._partial_file = open(partial_path, "w", newline="")  # noqa: SIM115 (closed by close())
                self._writer = csv.writer(self._partial_file)
                self._writer.writerow(SAMPLE_COLUMNS)
                self._partial_file.flush()
            except OSError as e:  # a full disk at the very start: said as the store says it
                self.close()
                full = e.errno == errno.ENOSPC
                raise StoreError(
                    f"cannot write {partial_path}: {'no space left on the device' if full else e.strerror or e}"
                ) from e

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
                channel, t, value = self._keep(source_name, s)
                added += 1
                if self._writer is not None:
                    rows.append((source_name, s.channel, repr(self.clock.to_unix(t)), repr(value), channel.unit))
            if rows and self._writer is not None and self._partial_file is not None:
                self._writer.writerows(rows)
                self._partial_file.flush()
        return added

    def _keep(self, source_name: str, s: Sample) -> tuple[Channel, float, float]:
        """One reading of ``source_name`` on the monotonic timeline, in W or J, in its channel's
        series, or, where it cannot be physical, kept out of it (the lock held). Returns its
        channel, time and value."""
        channel = self.channels.get(s.channel)
        if channel is None or self.channel_source[s.channel] != source_name:
            raise ValueError(f"source {source_name!r} sent a sample for unknown channel {s.channel!r}")
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
        return channel, t, value

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
