"""``replay``: play back recorded samples as if a meter produced them now.

Reads an energyframe ``samples.parquet`` (channels, units and, from the ``run.json`` beside it,
scopes and resolutions) or a CSV with ``time_s`` (Unix seconds) and ``power_w`` or ``energy_j``.
With ``align=start`` the recording is shifted so that its first sample falls when the source
starts, and each sample is handed over once its time has come; ``loop=true`` repeats it.
With ``align=absolute`` samples keep their own times (for re-analysing a recorded period).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PowerSourceError
from ..interfaces import Channel, ClockBase, PowerSource, Quantity, Sample, Scope, SourceContext, Timing
from ..options import Option

_QUANTITY_BY_UNIT = {"J": Quantity.ENERGY, "W": Quantity.POWER}


@dataclass
class _Track:
    channel: Channel
    times_s: np.ndarray  # relative to the recording's first sample (align=start) or Unix
    values: np.ndarray
    period_s: float  # loop length
    loop_increment: float  # counter gain per loop (0 for power)
    index: int = 0
    loops: int = 0


class ReplayPowerSource(PowerSource):
    """Replays a recording as a live source."""

    DESCRIPTION = "replay samples.parquet, or a CSV of time_s and power_w (or energy_j), as a live source"
    #: every rank replays (its own file, with {rank} in its name)
    PER_PROCESS = True
    OPTIONS = (
        # {rank} and {local_rank} in the name become the rank's numbers (docs/distributed.md)
        Option(
            "file", "path", required=True, help="samples.parquet, or CSV with time_s and power_w or energy_j"
        ),
        Option(
            "align",
            "choice",
            "start",
            "start: shift to start now; absolute: keep the recorded times",
            choices=("start", "absolute"),
        ),
        Option("loop", "bool", False, "repeat the recording when it ends (align=start)"),
        Option("channels", "list", None, "replay only these channels of a samples.parquet"),
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
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self._tracks: list[_Track] = []
        self._origin_s = 0.0
        self._stop_s: float | None = None
        self._file: Path = self.options["file"]

    def start(self, context: SourceContext) -> Sequence[Channel]:
        path = self._file = rank_path(self.options["file"], context)
        if not path.exists():
            raise PowerSourceError(f"replay file {str(path)!r} does not exist")
        try:
            frame = self._load(path)
        except PowerSourceError:
            raise
        except Exception as e:
            raise PowerSourceError(f"cannot read replay file {str(path)!r}: {e}") from e
        absolute = self.options["align"] == "absolute"
        self._tracks = self._build_tracks(frame, self._recorded_channels(path), absolute)
        if not self._tracks:
            raise PowerSourceError(f"replay file {str(path)!r} holds no energy or power samples to replay")
        first = min(float(t.times_s[0]) for t in self._tracks)
        if not absolute:
            for track in self._tracks:
                track.times_s = track.times_s - first
            self._origin_s = time.monotonic()
        return [t.channel for t in self._tracks]

    def _load(self, path: Path) -> pd.DataFrame:
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
            missing = {"channel", "time_s", "value", "unit"} - set(frame.columns)
            if missing:
                raise PowerSourceError(f"{path} lacks column(s) {sorted(missing)} of a samples.parquet")
            wanted = self.options["channels"]
            if wanted:
                unknown = set(wanted) - set(frame["channel"])
                if unknown:
                    raise PowerSourceError(
                        f"{path} has no channel(s) {sorted(unknown)}; it has {sorted(set(frame['channel']))}"
                    )
                frame = frame[frame["channel"].isin(wanted)]
            return frame[["channel", "time_s", "value", "unit"]]
        frame = pd.read_csv(path)
        if "time_s" not in frame.columns:
            raise PowerSourceError(
                f"{path} needs a time_s column (Unix seconds); it has {list(frame.columns)}"
            )
        for column, unit in (("power_w", "W"), ("energy_j", "J")):
            if column in frame.columns:
                return pd.DataFrame(
                    {"channel": self.name, "time_s": frame["time_s"], "value": frame[column], "unit": unit}
                )
        raise PowerSourceError(f"{path} needs a power_w or energy_j column; it has {list(frame.columns)}")

    @staticmethod
    def _recorded_channels(path: Path) -> Mapping[str, dict]:
        """Channel descriptions from the run.json next to a samples.parquet, if there is one."""
        run_json = path.with_name("run.json")
        if path.suffix != ".parquet" or not run_json.exists():
            return {}
        try:
            meta = json.loads(run_json.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return {c["name"]: c for s in meta.get("sources", []) for c in s.get("channels", [])}

    def _build_tracks(
        self, frame: pd.DataFrame, recorded: Mapping[str, dict], absolute: bool
    ) -> list[_Track]:
        tracks = []
        for name, group in frame.groupby("channel", sort=True):
            unit = str(group["unit"].iloc[0])
            quantity = _QUANTITY_BY_UNIT.get(unit, Quantity.STATE)
            times = pd.to_numeric(group["time_s"], errors="coerce").to_numpy(dtype=float)
            values = pd.to_numeric(group["value"], errors="coerce").to_numpy(dtype=float)
            if not np.all(np.isfinite(times)) or not np.all(np.isfinite(values)):
                raise PowerSourceError(
                    f"channel {name!r} of the replay file has missing or non-numeric values"
                )
            order = np.argsort(times, kind="stable")
            times, values = times[order], values[order]
            spacing = float(np.median(np.diff(times))) if times.size > 1 else 0.0
            info = recorded.get(str(name), {})
            scope = self.options["scope"] or info.get("scope", Scope.OTHER.value)
            timing = Timing(self.options["timing"] or info.get("timing", Timing.EXACT.value))
            channel = Channel(
                name=self.options["prefix"] + str(name),
                quantity=quantity,
                scope=Scope(scope),
                resolution_s=float(info.get("resolution_s") or spacing),
                clock=ClockBase.WALL if absolute else ClockBase.MONOTONIC,
                unit=unit,
                primary=bool(info.get("primary", True)),
                timing=timing,
                averaging_s=float(info.get("averaging_s") or (spacing if timing != Timing.EXACT else 0.0)),
                description=f"replayed from {self._file}"
                + (f": {info['description']}" if info.get("description") else ""),
            )
            duration = float(times[-1] - times[0])
            period = duration + spacing
            increment = 0.0
            if quantity == Quantity.ENERGY and duration > 0:
                increment = float(values[-1] - values[0]) * period / duration
            tracks.append(_Track(channel, times, values, period, increment))
        return tracks

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


def rank_path(path: Path, context: SourceContext) -> Path:
    """``path`` with ``{rank}`` and ``{local_rank}`` replaced by this process's numbers."""
    text = str(path).replace("{rank}", str(context.rank)).replace("{local_rank}", str(context.local_rank))
    return Path(text)
