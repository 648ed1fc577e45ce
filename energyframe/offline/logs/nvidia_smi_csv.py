"""An ``nvidia-smi --query-gpu=timestamp,index,...,power.draw...`` CSV log, with or without
units, and energyframe's own ``raw/nvidia-smi/nvidia-smi.csv``: the live ``nvidia-smi``
source's channels, power read by the source's own rule (``smi_format.power_reading``)."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np

from ...core.samples import STEPPED, SampleSeries
from ...errors import UsageError
from ...model import Channel, ClockBase, Quantity, Scope, Timing
from ..smi_format import (
    AVERAGE_WINDOW_S,
    POWER_FIELDS,
    STATE_FIELDS,
    check_power_header,
    header_name,
    header_unit,
    power_readings,
)
from .log import NVIDIA_SMI, UNIT, PowerLog, clock_steps, in_time_order, unsorted_note
from .table import Table, numbers, skipped_warning, spacing
from .timestamps import check_unix, unix_times


def read(path: Path, table: Table, tz: str | None) -> PowerLog:
    table.refuse_torn()
    units = _power_units(path, table)
    if not table.rows:
        raise table.no_rows("rows")
    columns = table.columns()
    times = unix_times(columns[table.column("timestamp")], tz, path.name)
    gpus = np.array(
        columns[table.column("index")] if "index" in table.header else ["0"] * len(times), dtype=object
    )
    good, bad = _readable_rows(path, table, times, gpus)
    warnings = skipped_warning(path, bad, "rows of nvidia-smi's log")
    good, stepped, notes = _without_steps(times, gpus, good, path.name)
    warnings += notes
    reader = _Reader(path, table, columns, times, gpus, good, units, stepped)
    for (gpu, field_name), channel in _channels(table.header, sorted(set(gpus[good]), key=int)).items():
        reader.add(gpu, field_name, channel)
    if reader.unsorted:
        warnings.append(unsorted_note(path.name))
    warnings += reader.warnings
    channels = reader.channels
    if not any(c.integrable for c in channels.values()):
        power = [f for f in POWER_FIELDS if f in table.header]
        raise UsageError(f"{path} has no power value in any row ({', '.join(power)} are all missing)")
    return PowerLog(
        path,
        NVIDIA_SMI,
        channels,
        reader.series,
        reader.missing,
        _primary(channels),
        tuple(warnings),
        len(bad),
        flagged=reader.flagged,
    )


def _readable_rows(
    path: Path, table: Table, times: np.ndarray, gpus: np.ndarray
) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Which rows have a time and a GPU index, and the lines skipped (the table's and theirs).

    Raises:
        UsageError: no row has both, or a time no date can show.
    """
    good = np.isfinite(times) & np.array([g.isdigit() for g in gpus], dtype=bool)
    bad = sorted(
        list(table.bad) + [(table.rows[i][0], ",".join(table.rows[i][1])) for i in np.flatnonzero(~good)]
    )
    if not good.any():
        line, fields = table.rows[0]
        raise UsageError(
            f"{path} line {line}: cannot read the time {fields[table.column('timestamp')]!r} "
            "(expected e.g. 2026/11/22 03:41:38.233)"
        )
    check_unix(times[good], f"{path}: column timestamp")
    return good, bad


def _primary(channels: dict[str, Channel]) -> str:
    """The first primary power channel with values, else the first power channel with values."""
    primary = next((c.name for c in channels.values() if c.primary and c.integrable), "")
    return primary or next(c.name for c in channels.values() if c.integrable)


def _power_units(path: Path, table: Table) -> dict[str, str | None]:
    """Each power column's unit, as its header names it.

    Raises:
        UsageError: a unit of power energyframe does not know.
    """
    units = {}
    for cell in next(csv.reader([table.header_text])):
        name = header_name(cell)
        if name in POWER_FIELDS:
            units[name] = header_unit(cell)
            why = check_power_header(name, units[name])
            if why:
                raise UsageError(f"{path}: {why}")
    return units


def _without_steps(
    times: np.ndarray, gpus: np.ndarray, good: np.ndarray, where: str
) -> tuple[np.ndarray, dict[str, np.ndarray], list[str]]:
    """Each GPU's rows outside the spans where the log's clock stepped back (``log.clock_steps``)."""
    keep = good.copy()
    stepped: dict[str, np.ndarray] = {}
    notes = []
    for gpu in dict.fromkeys(gpus[good]):
        rows = np.flatnonzero(good & (gpus == gpu))
        kept, steps = clock_steps(times[rows])
        if not steps:
            continue
        keep[rows[~kept]] = False
        stepped[gpu] = np.sort(times[rows[~kept]])
        notes += [step.note(where, f"GPU {gpu}") for step in steps]
    return keep, stepped, notes


def _channels(header: list[str], gpus: list[str]) -> dict[tuple[str, str], Channel]:
    """The channels the live nvidia-smi source makes: the preferred power field, the 1-s average,
    and the state fields, per GPU."""
    power = [f for f in POWER_FIELDS if f in header]
    preferred = power[0]
    fields = dict.fromkeys([preferred, *(["power.draw.average"] if "power.draw.average" in power else [])])
    out: dict[tuple[str, str], Channel] = {}
    for gpu in gpus:
        for field_name in fields:
            out[(gpu, field_name)] = _power_channel(f"gpu{gpu}", field_name, field_name == preferred)
        for field_name, (suffix, unit) in STATE_FIELDS.items():
            if field_name in header:
                out[(gpu, field_name)] = Channel(
                    f"gpu{gpu}.{suffix}",
                    Quantity.STATE,
                    Scope.GPU,
                    0.0,
                    ClockBase.WALL,
                    unit=unit,
                    primary=False,
                    description=f"nvidia-smi {field_name}",
                )
    return out


def _power_channel(base: str, field_name: str, preferred: bool) -> Channel:
    """A GPU's channel of one power field: the preferred one named as the GPU, the 1-s average
    (``.power_average``) placed at the middle of its second."""
    instant = field_name == "power.draw.instant"
    return Channel(
        base if preferred else f"{base}.power_average",
        Quantity.POWER,
        Scope.GPU,
        0.0,
        ClockBase.WALL,
        primary=preferred,
        description=f"nvidia-smi {field_name}"
        + ("" if instant else ": a 1-s average on Ampere and newer, placed at the middle of its second"),
        timing=Timing.EXACT if instant else Timing.PERIOD_END,
        averaging_s=0.0 if instant else AVERAGE_WINDOW_S,
    )


@dataclasses.dataclass
class _Reader:
    """Each channel's series from the log's columns, as channels are added."""

    path: Path
    table: Table
    columns: list[tuple[str, ...]]
    times: np.ndarray
    gpus: np.ndarray
    good: np.ndarray
    units: dict[str, str | None]
    stepped: dict[str, np.ndarray]
    channels: dict[str, Channel] = dataclasses.field(default_factory=dict)
    series: dict[str, SampleSeries] = dataclasses.field(default_factory=dict)
    missing: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    flagged: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)
    unsorted: bool = False

    def add(self, gpu: str, field_name: str, channel: Channel) -> None:
        rows = self.good & (self.gpus == gpu)
        texts = np.array(self.columns[self.table.column(field_name)], dtype=object)[rows]
        t = self.times[rows]
        if channel.quantity == Quantity.POWER:
            values, has, refused, why = power_readings(texts, self.units.get(field_name))
        else:
            values, has = numbers(texts, hexadecimal=True)
            refused, why = np.zeros(t.size, dtype=bool), None
        if not has.any():
            return  # a field this GPU never reported ([N/A] throughout): no channel
        ordered = in_time_order(t[has], values[has], channel.name, self.path.name, steps=False)
        self.unsorted |= bool(np.any(np.diff(t) < 0))
        self.warnings += ordered.notes
        flagged = dict(ordered.flagged)
        if refused.any():
            flagged[UNIT] = np.sort(t[refused])
            self.warnings.append(
                f"{self.path.name}: {int(refused.sum())} value(s) of {channel.name} were left out ({why}); "
                "the windows around them are flagged invalid_reading"
            )
        if gpu in self.stepped:
            flagged[STEPPED] = self.stepped[gpu]
        resolution = spacing(ordered.times_s)
        if channel.integrable:
            resolution = max(resolution, 0.1)  # the sensor updates every ~100 ms, whatever the -lms
        self.channels[channel.name] = dataclasses.replace(channel, resolution_s=resolution)
        self.series[channel.name] = SampleSeries(ordered.times_s, ordered.values)
        self.missing[channel.name] = np.sort(t[~has & ~refused])
        if flagged:
            self.flagged[channel.name] = flagged
