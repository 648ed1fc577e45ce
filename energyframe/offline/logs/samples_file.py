"""energyframe's own samples: a run's ``samples.parquet``, or the ``samples.partial.csv`` of a run
that died; channels described by the ``run.json`` beside them, else by their units."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np

from ...core.samples import ENERGY_UNITS, POWER_UNITS, SampleSeries, si_scale
from ...errors import StoreError, UsageError
from ...model import Channel, ClockBase, Quantity
from ...results.meta import with_declared_shapes
from .log import SAMPLES, PowerLog, in_time_order
from .table import Table, first_line, numbers, skipped_warning, unit_channel

#: the columns of energyframe's samples (``samples.SAMPLE_COLUMNS``)
COLUMNS = ("source", "channel", "time_s", "value", "unit")


def read_parquet(path: Path, data: bytes | bytearray) -> PowerLog:
    """A ``samples.parquet`` (its bytes read already: an error here is about its content)."""
    import pandas as pd

    from ...results.store import read_parquet as read_frame

    try:
        frame = read_frame(io.BytesIO(data))
    except Exception as e:  # the parquet engines raise many types for a damaged file
        raise UsageError(
            f"{path} is not a readable parquet file ({first_line(e)}): it is truncated or corrupt; "
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


def from_table(path: Path, table: Table) -> PowerLog:
    """A ``samples.partial.csv``: a run that died mid-line leaves a short last row, its nature."""
    if not table.rows:
        raise table.no_rows("samples")
    columns = table.columns()
    times, has_time = numbers(columns[table.column("time_s")])
    values, has = numbers(columns[table.column("value")])
    times[~has_time] = np.nan
    names = np.array(columns[table.column("channel")], dtype=object)
    units = np.array(columns[table.column("unit")], dtype=object)
    warnings = skipped_warning(path, table.bad, "samples")
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
    recorded = _recorded_channels(meta)
    timed = np.isfinite(times)
    if not timed.all():
        warnings.append(f"{path.name}: {int((~timed).sum())} sample(s) without a time were skipped")
    channels, series, missing, flagged = {}, {}, {}, {}
    for name in dict.fromkeys(names[timed]):  # in order of appearance
        rows = timed & (names == name)
        t, v, ok = times[rows], values[rows], has[rows]
        channel, scale = _channel(path, recorded.get(name), name, str(units[rows][0]), t[ok])
        ordered = in_time_order(t[ok], v[ok] * scale, name, path.name, steps=False)
        warnings += ordered.notes
        channels[name] = channel
        series[name] = SampleSeries(ordered.times_s, ordered.values)
        missing[name] = np.sort(t[~ok])
        if ordered.flagged:
            flagged[name] = ordered.flagged
    if not channels:
        what = "no sample with a time" if len(names) else "no samples (a run that measured timing only?)"
        raise UsageError(f"{path} holds {what}")
    primary = _primary(meta, channels)
    return PowerLog(
        path, SAMPLES, channels, series, missing, primary, tuple(warnings), skipped, meta, flagged
    )


def _primary(meta: dict | None, channels: dict[str, Channel]) -> str:
    """The log's primary channel: the run's first primary channel found, else the first that
    can be integrated, else the first."""
    return next(
        (n for n in (meta or {}).get("primary_channels", []) if isinstance(n, str) and n in channels),
        next((n for n, c in channels.items() if c.integrable), next(iter(channels), "")),
    )


def _recorded_channels(meta: dict | None) -> dict[str, Channel]:
    recorded = {}
    for source in (meta or {}).get("sources", []):
        for data in with_declared_shapes(source.get("channels", [])) if isinstance(source, dict) else ():
            try:
                channel = Channel.from_json(data)
            except (KeyError, TypeError, ValueError):
                continue
            recorded[channel.name] = channel
    return recorded


def _channel(
    path: Path, recorded: Channel | None, name: str, unit: str, t: np.ndarray
) -> tuple[Channel, float]:
    """A channel as the run described it, in the unit its rows are written in (converted to W or
    J), and the factor its values take.

    Raises:
        UsageError: a power or energy channel in a unit energyframe does not know.
    """
    if recorded is None:
        channel = unit_channel(name, unit, t)
    else:
        # the times in a samples file are Unix seconds, whatever clock the source stamped in
        channel = dataclasses.replace(recorded, clock=ClockBase.WALL)
    scale = si_scale(channel.quantity, unit)
    if scale is None:
        known = POWER_UNITS if channel.quantity == Quantity.POWER else ENERGY_UNITS
        raise UsageError(
            f"{path}: channel {name} is written in {unit!r}, a unit of {channel.quantity.value} energyframe "
            f"does not know (known: {', '.join(k for k in known if k.isascii())})"
        )
    if channel.integrable:
        channel = dataclasses.replace(channel, unit="W" if channel.quantity == Quantity.POWER else "J")
    return channel, scale


def _run_meta(path: Path) -> tuple[dict | None, str | None]:
    """The run.json beside a samples file, when there is one that reads as a run description."""
    run_json = path.with_name("run.json")
    if not run_json.is_file():
        return None, None
    from ...results.store import read_json

    try:
        meta = read_json(run_json)
    except StoreError as e:
        return None, f"{e}; channels are described by their units only"
    if not isinstance(meta, dict) or not isinstance(meta.get("sources", []), list):
        return None, f"{run_json} is not a run description; channels are described by their units only"
    return meta, None
