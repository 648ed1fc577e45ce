"""Where a log's samples belong in time: the live run's placement (``assemble.place_samples``:
half a period for a ``PERIOD_END`` reading, ``MeterAligner`` for a wall meter), plus what only
an offline analysis knows: a lag the user states, the time maps a run recorded for its own
samples, and a reference taken from another run's samples."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.align import Alignment, MeterAligner, averaging_period
from ..core.clock import ChannelTimeMap, ClockModel
from ..core.pipeline import timing_maps
from ..core.samples import SampleSeries
from ..core.vocabulary import MLPERF_MIN_WINDOW_S, SHORT_FOR_METER
from ..core.windows import WindowRecord
from ..errors import PowerSourceError, UsageError
from ..model import Channel, Sample, Scope, SourceContext, Timing, WindowAnnotation
from ..plugin import PowerSource


def stated_lag(channels: Mapping[str, Channel], lag_s: float) -> dict[str, ChannelTimeMap]:
    """Every channel moved by a lag the user states, on top of what its timing implies (half
    the period a reading averages: ``timing_maps`` and ``Alignment.time_map``, the live run's)."""
    fixed = timing_maps(channels)
    out = {}
    for name, channel in channels.items():
        if channel.timing == Timing.UNKNOWN:
            stated = Alignment(name, None, lag_s, 0.0, math.nan, True, {})
            out[name] = stated.time_map(averaging_period(channel), 0.0)
        else:
            out[name] = ChannelTimeMap(fixed.get(name, ChannelTimeMap()).lag_s + lag_s)
    return out


def recorded_map(data: Mapping, meta: Mapping | None, ref_s: float, name: str) -> ChannelTimeMap:
    """The time map a run applied to its own channel, moved onto the offline timeline."""
    try:
        lag = float(data.get("lag_s") or 0.0)
        drift = float(data.get("drift") or 0.0)
        reference = float(data.get("reference_s") or 0.0)
        clock = ClockModel.from_json(dict((meta or {}).get("clock") or {}))
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"run.json's time map of {name} or its clock is damaged ({e})") from e
    return ChannelTimeMap(lag, drift, clock.to_unix(reference) - ref_s)


@dataclass(frozen=True)
class Reference:
    """Channels measured on a run's own clock, to align a wall-meter log against (``--run``),
    or why there are none. Series on the offline timeline."""

    run_name: str
    channels: Mapping[str, Channel]
    series: Mapping[str, SampleSeries]
    why_not: str | None = None


class LogAligner(MeterAligner):
    """``place_samples``' aligner for a log: a stated lag, else the run's own time maps, else the
    live ``MeterAligner`` against a run's reference channels; without a reference a wall
    meter moves by half its interval, as in a live run with nothing to align against.

    ``how`` says, per channel it moved, how (energy_report.json's ``placement``).
    """

    def __init__(
        self,
        where: str,
        lag_s: float | None = None,
        recorded: Mapping[str, ChannelTimeMap] | None = None,
        reference: Reference | None = None,
    ) -> None:
        super().__init__()
        self.where = where
        self.lag_s = lag_s
        self.recorded = dict(recorded or {})
        self.reference = reference
        self.how: dict[str, str] = {}

    def __call__(self, channels, series, records) -> dict[str, ChannelTimeMap]:
        if self.lag_s is not None:
            return self._stated(channels, self.lag_s)
        maps = {n: m for n, m in self.recorded.items() if n in channels}
        self.how.update({n: "the run's own time map" for n in maps})
        unknown = _unplaced_meters(channels, maps)
        if not unknown:
            return maps
        if self.reference is None or not self.reference.channels:
            maps.update(self._unaligned(unknown))
            return maps
        maps.update(self._aligned(unknown, series, records))
        return maps

    def _stated(self, channels: Mapping[str, Channel], lag_s: float) -> dict[str, ChannelTimeMap]:
        """Every channel moved by the lag the user stated (``stated_lag``)."""
        maps = stated_lag(channels, lag_s)
        for name, time_map in maps.items():
            self.how[name] = f"--lag {lag_s:g} s" + half_text(time_map.lag_s - lag_s)
        return maps

    def _unaligned(self, unknown: Mapping[str, Channel]) -> dict[str, ChannelTimeMap]:
        maps = {}
        for name, channel in unknown.items():
            interval = averaging_period(channel)
            maps[name] = Alignment(name, None, math.nan, 0.0, math.nan, False, {}).time_map(interval, 0.0)
            self.how[name] = (
                f"moved by half its {interval:g}-s interval only (not aligned: give --run or --lag)"
            )
        if self.reference is not None and self.reference.why_not:
            self.warnings.append(
                f"{self.where}: not aligned with {self.reference.run_name} ({self.reference.why_not})"
            )
        return maps

    def _aligned(
        self,
        unknown: Mapping[str, Channel],
        series: Mapping[str, SampleSeries],
        records: Sequence[WindowRecord],
    ) -> dict[str, ChannelTimeMap]:
        """The live aligner over the log's wall meters and the run's reference channels."""
        assert self.reference is not None
        ref = {
            n: c
            for n, c in self.reference.channels.items()
            if c.timing != Timing.UNKNOWN and n not in unknown
        }
        both_channels = {**ref, **unknown}
        both_series = {**{n: self.reference.series[n] for n in ref}, **{n: series[n] for n in unknown}}
        maps = super().__call__(both_channels, both_series, records)
        self.warnings = []  # said here, in an offline analysis's words
        for name, a in self.alignments.items():
            self._say(name, a, averaging_period(unknown[name]), self.reference.run_name)
        return {n: m for n, m in maps.items() if n in unknown}

    def _say(self, name: str, a: Alignment, interval_s: float, run_name: str) -> None:
        """How one wall meter was placed (``how``), and a warning where it was not aligned."""
        if a.reference is None:
            self.how[name] = f"moved by half its {interval_s:g}-s interval only (not aligned)"
            self.warnings.append(
                f"{self.where}: not aligned with {run_name} ({run_name} has no "
                "GPU or CPU power channel to align against)"
            )
        elif a.applied:
            self.how[name] = (
                f"aligned with {a.reference} of {run_name}: lag {a.lag_s:+.3f} s + half its {interval_s:g}-s interval"
            )
        else:
            self.how[name] = (
                f"moved by half its {interval_s:g}-s interval only (correlation with {a.reference} too low)"
            )
            self.warnings.append(
                f"{self.where}: not aligned with {run_name} (correlation {a.correlation:.2f} "
                f"with {a.reference}); its samples are only moved to the middle of their intervals: give "
                "--lag S if you know the lag"
            )

    def alignment_of(self, name: str, time_map: ChannelTimeMap, interval_s: float) -> dict[str, Any] | None:
        """energy_report.json's ``alignment`` of one channel (None when it was not aligned)."""
        if name in self.alignments and self.alignments[name].reference is not None:
            a = self.alignments[name]
            return {
                "reference": a.reference,
                "channel": name,
                "lag_s": a.lag_s,
                "drift": a.drift,
                "correlation": a.correlation,
                "interval_s": interval_s,
                "applied": a.applied,
                "shift_s": time_map.lag_s,
                **a.detail,
            }
        if self.reference is not None and self.lag_s is None and name in self.how:
            why = self.reference.why_not or f"{self.reference.run_name} has no GPU or CPU power channel"
            return {"applied": False, "reason": why}
        return None


def _unplaced_meters(
    channels: Mapping[str, Channel], maps: Mapping[str, ChannelTimeMap]
) -> dict[str, Channel]:
    """The integrable channels of unknown timing (wall meters) that no time map places yet."""
    return {
        n: c for n, c in channels.items() if c.timing == Timing.UNKNOWN and c.integrable and n not in maps
    }


def half_text(half: float) -> str:
    return f", + {half:g} s: a reading placed at the middle of the {2 * half:g} s it averages" if half else ""


def placement_text(channel: Channel, time_map: ChannelTimeMap, how: Mapping[str, str]) -> str:
    """How a channel's samples were placed, in words."""
    if channel.name in how:
        return how[channel.name]
    return half_text(time_map.lag_s)[2:] if time_map.lag_s else "as recorded"


class LogSource(PowerSource):
    """A power log in the place of the source that recorded it: what the live source adds to a
    window and a log still shows (a wall meter's windows shorter than MLPerf Power's minimum,
    as the ``wattsup`` source flags them)."""

    DESCRIPTION = "a power log read offline"

    def start(self, context: SourceContext) -> Sequence[Channel]:
        raise PowerSourceError(f"{self.name} is a log read offline; it is not started")

    def read(self) -> list[Sample]:
        return []

    def stop(self) -> None:
        pass

    def annotate(self, channel, start_s, end_s, series) -> WindowAnnotation:
        if channel.scope == Scope.SYSTEM_WALL and end_s - start_s < MLPERF_MIN_WINDOW_S:
            return WindowAnnotation(flags=(SHORT_FOR_METER,))
        return WindowAnnotation()
