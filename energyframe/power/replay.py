"""``replay``: play back recorded samples as if a meter produced them now.

Reads any power log ``energyframe.offline.logs`` knows: an energyframe ``samples.parquet`` (channels,
units and, from the ``run.json`` beside it, scopes, resolutions and timing), a CSV with
``time_s`` (Unix seconds) and ``power_w`` or ``energy_j``, the earlier tool's WattsUp? CSV
(``time,id,pm1,pm2,sum``) or an nvidia-smi CSV log. With ``align=start`` the recording is shifted
so that its first sample falls when the source starts, and each sample is handed over once its
time has come; ``loop=true`` repeats it. With ``align=absolute`` samples keep their own times
(for re-analysing a recorded period). Values are replayed as recorded, negative ones included;
rows a logger printed without a value (``[N/A]``) are skipped, as the live sources skip them.
Rows the reader merged (several at one instant) or could not read in their unit flag the
windows around them (``duplicate_samples``, ``invalid_reading``), as in a live run. Refused at
start, with the cause: a log whose clock steps back (which rows are true is unknown), a log
that ``align=absolute`` would play outside the run (yesterday's, another time zone's), and
``loop=true`` over a single row (no length to repeat).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.samples import STEPPED
from ..core.vocabulary import INVALID_READING
from ..core.windows import REJECTION_FLAGS
from ..errors import PowerSourceError, UsageError
from ..model import Channel, ClockBase, Quantity, Sample, Scope, SourceContext, Timing, WindowAnnotation
from ..options import Option
from ..plugin import PowerSource

#: with ``align=absolute``, a log that ends this long before the source starts (or starts this
#: long after) is another day's or another time zone's: nothing of it would fall in the run. Units: s.
FAR_S = 600.0


@dataclass
class _Track:
    channel: Channel
    times_s: np.ndarray  # relative to the recording's first sample (align=start) or Unix
    values: np.ndarray
    period_s: float  # loop length
    loop_increment: float  # counter gain per loop (0 for power)
    marks: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)  # per reason, in track time
    index: int = 0
    loops: int = 0


class ReplayPowerSource(PowerSource):
    """Replays a recording as a live source."""

    DESCRIPTION = (
        "replay samples.parquet, a CSV of time_s and power_w (or energy_j), a WattsUp? or nvidia-smi log, "
        "as a live source"
    )
    #: every rank replays (its own file, with {rank} in its name)
    PER_PROCESS = True
    OPTIONS = (
        # {rank} and {local_rank} in the name become the rank's numbers (docs/distributed.md)
        Option(
            "file",
            "path",
            required=True,
            help="samples.parquet, a CSV with time_s and power_w or energy_j, the earlier tool's "
            "time,id,pm1,pm2,sum CSV, or an nvidia-smi CSV log",
        ),
        Option(
            "align",
            "choice",
            "start",
            "start: shift to start now; absolute: keep the recorded times",
            choices=("start", "absolute"),
        ),
        Option("loop", "bool", False, "repeat the recording when it ends (align=start)"),
        Option("channels", "list", None, "replay only these channels of the log"),
        Option("prefix", "str", "", "prepended to channel names (avoids clashes with live sources)"),
        Option(
            "scope",
            "choice",
            None,
            "scope of the replayed channels (default: as recorded, else other)",
            choices=tuple(s.value for s in Scope),
        ),
        Option(
            "timing",
            "choice",
            None,
            "what the replayed timestamps mean (default: as recorded, else exact); 'unknown' "
            "estimates their lag after the run, as for a wall meter",
            choices=tuple(t.value for t in Timing),
        ),
        Option("tz", "str", "local", "zone of log times written without one: local, UTC, +01:00"),
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self._tracks: list[_Track] = []
        self._origin_s = 0.0
        self._stop_s: float | None = None
        self._file: Path = self.options["file"]
        self._wall_minus_monotonic = 0.0

    def start(self, context: SourceContext) -> Sequence[Channel]:
        path = self._file = rank_path(self.options["file"], context)
        log = _read_replay_log(path, self.options["tz"], self.name)
        for warning in log.warnings:
            context.warn(f"replay: {warning}")
        names = _chosen_channels(log, self.options["channels"], path)
        _refuse_missing_values(log, names)
        _refuse_steps(log, names, path)
        absolute = self.options["align"] == "absolute"
        self._tracks = [self._track(log.channels[n], log.series[n], absolute) for n in names]
        for track, name in zip(self._tracks, names):
            track.marks = dict(log.flagged.get(name, {}))
        self._tracks = [t for t in self._tracks if t.times_s.size]
        if not self._tracks:
            raise PowerSourceError(f"replay file {str(path)!r} holds no energy or power samples to replay")
        self._refuse_what_never_plays(path, absolute)
        if not absolute:
            self._play_from_now()
        self._wall_minus_monotonic = time.time() - time.monotonic()
        return [t.channel for t in self._tracks]

    def _play_from_now(self) -> None:
        """Shift every track (and its marks) so that the recording's first sample is now."""
        first = min(float(t.times_s[0]) for t in self._tracks)
        for track in self._tracks:
            track.times_s = track.times_s - first
            track.marks = {r: m - first for r, m in track.marks.items()}
        self._origin_s = time.monotonic()

    def _refuse_what_never_plays(self, path: Path, absolute: bool) -> None:
        """A recording that would leave every window uncovered is refused with its cause.

        Raises:
            PowerSourceError: ``align=absolute`` far from now; ``loop=true`` over a single row.
        """
        if self.options["loop"] and not absolute:
            single = [t.channel.name for t in self._tracks if t.times_s.size < 2]
            if single:
                raise PowerSourceError(
                    f"replay file {str(path)!r} has a single sample of {single[0]!r}: loop=true needs two or more "
                    "to know how long the recording lasts"
                )
        if absolute:
            self._refuse_another_time(path)

    def _refuse_another_time(self, path: Path) -> None:
        """With ``align=absolute``, refuse a recording that ends ``FAR_S`` before now or starts
        ``FAR_S`` after it (another day's, another time zone's).

        Raises:
            PowerSourceError: naming its span, how far from now it lies, and what to do.
        """
        first = min(float(t.times_s[0]) for t in self._tracks)
        last = max(float(t.times_s[-1]) for t in self._tracks)
        now = time.time()
        if not (last < now - FAR_S or first > now + FAR_S):
            return
        ended = last < now
        when = "ended" if ended else "starts"
        apart = now - last if ended else first - now
        raise PowerSourceError(
            f"replay file {str(path)!r} with align=absolute spans {_local(first)} to {_local(last)}, which "
            f"{when} {_duration(apart)} {'before' if ended else 'after'} now ({_local(now)}): no sample "
            "would fall in the run. Use align=start to play it from now, or tz= if its times are another "
            "zone's"
        )

    def _track(self, recorded: Channel, series, absolute: bool) -> _Track:
        times, values = series.times_s, series.values
        spacing = float(np.median(np.diff(times))) if times.size > 1 else 0.0
        channel = self._replayed(recorded, spacing, absolute)
        duration = float(times[-1] - times[0]) if times.size else 0.0
        period = duration + spacing
        increment = 0.0
        if recorded.quantity == Quantity.ENERGY and duration > 0:
            increment = float(values[-1] - values[0]) * period / duration
        return _Track(channel, times, values, period, increment)

    def _replayed(self, recorded: Channel, spacing_s: float, absolute: bool) -> Channel:
        """The channel as replayed: renamed with the prefix, the scope and timing the options
        give (else as recorded), its resolution and averaging from the rows' spacing where the
        recording does not say them, on the wall clock with ``align=absolute``."""
        description = f"replayed from {self._file}" + (
            f": {recorded.description}" if recorded.description else ""
        )
        timing = Timing(self.options["timing"]) if self.options["timing"] else recorded.timing
        return dataclasses.replace(
            recorded.renamed(lambda name: self.options["prefix"] + name),
            scope=Scope(self.options["scope"]) if self.options["scope"] else recorded.scope,
            resolution_s=recorded.resolution_s or spacing_s,
            clock=ClockBase.WALL if absolute else ClockBase.MONOTONIC,
            description=description,
            timing=timing,
            averaging_s=recorded.averaging_s or (spacing_s if timing != Timing.EXACT else 0.0),
        )

    def _now(self) -> float:
        """The recording's current time: Unix seconds, or seconds since the source started."""
        if self.options["align"] == "absolute":
            return time.time()
        return time.monotonic() - self._origin_s

    def read(self) -> list[Sample]:
        absolute = self.options["align"] == "absolute"
        now = self._now() if self._stop_s is None else self._stop_s
        out: list[Sample] = []
        for track in self._tracks:
            while True:
                if track.index >= track.times_s.size:
                    if not self.options["loop"] or absolute or track.period_s <= 0:
                        break
                    track.index = 0
                    track.loops += 1
                offset = track.loops * track.period_s
                t = float(track.times_s[track.index]) + offset
                if t > now:
                    break
                value = float(track.values[track.index]) + track.loops * track.loop_increment
                out.append(Sample(track.channel.name, t if absolute else t + self._origin_s, value))
                track.index += 1
        out.sort(key=lambda s: s.time_s)
        return out

    def stop(self) -> None:
        if self._stop_s is None:
            self._stop_s = self._now()

    def info(self) -> Mapping[str, Any]:
        return {"file": str(self._file), "channels": [t.channel.name for t in self._tracks]}

    def annotate(self, channel, start_s, end_s, series) -> WindowAnnotation:
        """Flag a window near rows the reader merged or could not read, as a live run would."""
        track = next((t for t in self._tracks if t.channel.name == channel.name), None)
        if track is None or not track.marks:
            return WindowAnnotation()
        if self.options["align"] == "absolute":
            start, end = start_s + self._wall_minus_monotonic, end_s + self._wall_minus_monotonic
        else:
            start, end = start_s - self._origin_s, end_s - self._origin_s
        margin = max(channel.resolution_s, 1e-6)
        flags: list[str] = []
        for reason, times in track.marks.items():
            flag = REJECTION_FLAGS.get(reason, INVALID_READING)
            if flag not in flags and _near(times, start - margin, end + margin, track.period_s if self.options["loop"] else 0.0):
                flags.append(flag)
        return WindowAnnotation(flags=tuple(flags))


def _near(times: np.ndarray, lo: float, hi: float, period_s: float) -> bool:
    """Whether a time of ``times`` (or of a later loop of them, ``period_s`` apart) lies in [lo, hi]."""
    if not times.size:
        return False
    loops = range(max(0, math.floor(lo / period_s) - 1), math.floor(hi / period_s) + 1) if period_s > 0 else (0,)
    for k in loops:
        i = int(np.searchsorted(times, lo - k * period_s, side="left"))
        if i < times.size and times[i] <= hi - k * period_s:
            return True
    return False


def _read_replay_log(path: Path, tz: str, name: str):
    """The power log at ``path`` (``offline.logs.read_log``).

    Raises:
        PowerSourceError: the file is missing, or cannot be read as a power log.
    """
    from ..offline.logs import read_log

    if not path.exists():
        raise PowerSourceError(f"replay file {str(path)!r} does not exist")
    try:
        return read_log(path, tz=tz, name=name)
    except UsageError as e:
        raise PowerSourceError(str(e)) from e
    except Exception as e:
        raise PowerSourceError(f"cannot read replay file {str(path)!r}: {e}") from e


def _chosen_channels(log, wanted: Sequence[str] | None, path: Path) -> list[str]:
    """The log's channels to replay, in its order: all, or those of the ``channels`` option.

    Raises:
        PowerSourceError: the option names a channel the log lacks.
    """
    names = list(log.channels)
    if not wanted:
        return names
    unknown = set(wanted) - set(names)
    if unknown:
        raise PowerSourceError(f"{path} has no channel(s) {sorted(unknown)}; it has {sorted(names)}")
    return [n for n in names if n in wanted]


def _refuse_missing_values(log, names: Sequence[str]) -> None:
    """A file made for replaying (samples.parquet, a ``time_s`` CSV) has a number in every row;
    a logger's ``[N/A]`` (WattsUp?, nvidia-smi logs) is skipped.

    Raises:
        PowerSourceError: a channel of such a file with a missing or non-numeric value.
    """
    from ..offline.logs import POWER_CSV, SAMPLES

    if log.kind not in (SAMPLES, POWER_CSV):
        return
    for name in names:
        skipped = log.missing[name].size or (log.kind == POWER_CSV and log.skipped_lines)
        if skipped or not np.all(np.isfinite(log.series[name].values)):
            raise PowerSourceError(f"channel {name!r} of the replay file has missing or non-numeric values")


def _refuse_steps(log, names: Sequence[str], path: Path) -> None:
    """A log whose clock steps back cannot be replayed: which of its rows are true is unknown.

    Raises:
        PowerSourceError: naming the channel and the span its rows claim twice.
    """
    for name in names:
        stepped = log.flagged.get(name, {}).get(STEPPED)
        if stepped is not None and len(stepped):
            raise PowerSourceError(
                f"replay file {str(path)!r}: the clock of {name!r} steps back, so rows before and after the step "
                f"both claim {_local(float(stepped[0]))} to {_local(float(stepped[-1]))}; which are true is unknown: "
                "cut the log at the step and replay each part"
            )


def _local(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    for unit, size in (("day", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}" + ("s" if unit == "day" and seconds >= 2 * size else "")
    return f"{seconds:.0f} s"


def rank_path(path: Path, context: SourceContext) -> Path:
    """``path`` with ``{rank}`` and ``{local_rank}`` replaced by this process's numbers."""
    text = str(path).replace("{rank}", str(context.rank)).replace("{local_rank}", str(context.local_rank))
    return Path(text)
