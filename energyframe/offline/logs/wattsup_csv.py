"""The earlier tool's WattsUp? CSV (``time,id,pm1,pm2,sum``, local time, whole seconds, a row a
second) and the same file as energyframe's ``wattsup`` source writes it
(``raw/<source>/wattsup.csv``: a row at every record of any meter, stamped to the ms).

A meter column is empty until the meter's first record, and the ``sum`` of such rows is not yet
the whole wall: neither is a reading. Every channel averages the meter's own logging period:
the one the run beside the log declared, else as its rows show it (a row a second; or, in a log
of a row per record of N meters, N rows per period), never the spacing of the ``sum`` rows.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ...core.samples import DUPLICATE, STEPPED, SampleSeries
from ...errors import UsageError
from ...model import Channel, ClockBase, Quantity, Scope, Timing
from .log import WATTSUP_CSV, PowerLog, clock_steps, unsorted_note
from .table import Table, number, skipped_warning, spacing
from .timestamps import check_unix, unix_times

Row = tuple[float, str, dict]


def read(path: Path, table: Table, tz: str | None) -> PowerLog:
    table.refuse_torn()
    meters = [c for c in table.header if c.startswith("pm")]
    names = meters + (["sum"] if "sum" in table.header else [])
    if not table.rows:
        raise table.no_rows("rows")
    _refuse_cut_sum(table, meters)
    rows, bad = _timed_rows(path, table, names, tz)
    warnings = skipped_warning(path, bad, "rows of the log")
    rows, stepped, notes = _without_steps(rows, path.name)
    warnings += notes
    rows, notes = _in_time_order(rows, path.name)
    warnings += notes
    duplicated = _repeated_rows(rows)
    per_record = _one_row_per_record(rows, meters)
    rows = _last_of_each_second(rows)
    per_channel = _readings(rows, meters, names)
    if duplicated:
        warnings += [
            f"{path.name}: {len(duplicated)} duplicated timestamp(s) in {n}; their values were averaged"
            for n in names
        ]
    period = _period(path, per_channel[names[-1]][0], len(meters), per_record)
    channels, series, missing = _channels(per_channel, names, period)
    if not channels:
        raise UsageError(f"{path} has no power value in any of {names}")
    flagged = _flagged(channels, duplicated, stepped)
    primary = "sum" if "sum" in channels else next(iter(channels))
    return PowerLog(
        path, WATTSUP_CSV, channels, series, missing, primary, tuple(warnings), len(bad), flagged=flagged
    )


def _timed_rows(
    path: Path, table: Table, names: list[str], tz: str | None
) -> tuple[list[Row], list[tuple[int, str]]]:
    """Rows as (Unix s, id, {column: text}), in the file's order, and the lines without a time.

    Raises:
        UsageError: no row has a time, or a time no date can show.
    """
    texts = [fields[table.column("time")] for _n, fields in table.rows]
    times = unix_times(texts, tz, path.name)
    bad = list(table.bad)
    rows = []
    id_column = table.column("id") if "id" in table.header else None
    where = {c: table.column(c) for c in names}
    for (line, fields), t in zip(table.rows, times):
        if not math.isfinite(t):
            bad.append((line, ",".join(fields)))
            continue
        values = {c: fields[i] for c, i in where.items()}
        rows.append((t, fields[id_column] if id_column is not None else str(line), values))
    if not rows:
        line, fields = table.rows[0]
        raise UsageError(
            f"{path} line {line}: cannot read the time {fields[table.column('time')]!r} "
            "(expected e.g. 2026-02-04 10:15:23)"
        )
    check_unix(times, f"{path}: column time")
    return rows, bad


def _without_steps(rows: list[Row], where: str) -> tuple[list[Row], np.ndarray, list[str]]:
    """The rows outside every span where the log's clock stepped back (``log.clock_steps``)."""
    t = np.array([r[0] for r in rows], dtype=float)
    keep, steps = clock_steps(t)
    notes = [step.note(where, "the log") for step in steps]
    return [r for r, k in zip(rows, keep) if k], np.sort(t[~keep]), notes


def _in_time_order(rows: list[Row], where: str) -> tuple[list[Row], list[str]]:
    """The rows sorted by time (stably), and a note when they were not."""
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    notes = [unsorted_note(where)] if order != list(range(len(rows))) else []
    return [rows[i] for i in order], notes


def _flagged(
    channels: dict, duplicated: list[float], stepped: np.ndarray
) -> dict[str, dict[str, np.ndarray]]:
    """Per channel, the times of rows merged (duplicated) or left out (clock steps), by flag."""
    if not (duplicated or stepped.size):
        return {}
    return {n: _marks(duplicated, stepped) for n in channels}


def _marks(duplicated: list[float], stepped: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    if duplicated:
        out[DUPLICATE] = np.array(sorted(duplicated), dtype=float)
    if stepped.size:
        out[STEPPED] = stepped
    return out


def _refuse_cut_sum(table: Table, meters: list[str]) -> None:
    """A last row with no newline whose sum is not the sum of its meters was cut mid-number."""
    if table.unterminated is None or "sum" not in table.header or not meters:
        return
    row_number, fields = table.rows[-1]
    values = [number(fields[table.column(m)]) for m in meters]
    known = [v for v in values if v is not None]
    total = number(fields[table.column("sum")])
    if total is None or len(known) < len(values):
        return
    if abs(total - sum(known)) > 0.1 * len(meters) + 0.1:  # each value printed to 0.1 W
        table.torn = (row_number, ",".join(fields))
        table.refuse_torn()


def _repeated_rows(rows: list[Row]) -> list[float]:
    """The times of rows that repeat an earlier row's time and id (the same record written twice)."""
    seen: set[tuple[float, str]] = set()
    repeated = []
    for t, row_id, _values in rows:
        if (t, row_id) in seen:
            repeated.append(t)
        seen.add((t, row_id))
    return repeated


def _last_of_each_second(rows: list[Row]) -> list[Row]:
    """One row per timestamp. Rows of one record written twice (same id) are averaged; rows of
    different records stamped in the same second (energyframe writes one per meter record, the
    stamp has whole seconds) count as the last of them: every meter's state at that second's end."""
    out: list[Row] = []
    for group in _stamped_together(rows):
        last_id = group[-1][1]
        same = [g for g in group if g[1] == last_id]
        out.append(group[-1] if len(same) == 1 else (group[0][0], last_id, _averaged(same)))
    return out


def _stamped_together(rows: list[Row]) -> list[list[Row]]:
    """The runs of consecutive rows that share one timestamp, in order."""
    groups = []
    i = 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and rows[j + 1][0] == rows[i][0]:
            j += 1
        groups.append(rows[i : j + 1])
        i = j + 1
    return groups


def _averaged(same: list[Row]) -> dict[str, str]:
    """The columns of one record written more than once: each column's numbers averaged, its
    last text where it has none."""
    merged = {}
    for column in same[0][2]:
        found = [x for x in (number(g[2][column]) for g in same) if x is not None]
        merged[column] = repr(float(np.mean(found))) if found else same[-1][2][column]
    return merged


def _readings(rows: list[Row], meters: list[str], names: list[str]) -> dict[str, tuple[list, list, list]]:
    """Per channel: (times, values, times without a value), leaving out a meter before its first
    record and the sum before every meter has reported."""
    started = {m: False for m in meters}
    per_channel: dict[str, tuple[list, list, list]] = {n: ([], [], []) for n in names}
    for t, _id, texts in rows:
        readings, not_yet = _meter_readings(texts, meters, started)
        for n in names:
            if n in not_yet or (n == "sum" and not_yet):
                continue  # not a reading yet: the meter (or one of the wall's) has not reported
            value = _sum_reading(texts, readings, meters) if n == "sum" else readings[n]
            t_list, v_list, missing_list = per_channel[n]
            if value is None:
                missing_list.append(t)
            else:
                t_list.append(t)
                v_list.append(value)
    return per_channel


def _meter_readings(
    texts: dict, meters: list[str], started: dict[str, bool]
) -> tuple[dict[str, float | None], set[str]]:
    """Each meter's value in one row (None: no number), and the meters that have not reported
    yet (before a meter's first record energyframe writes it empty); ``started`` keeps, across
    rows, which meters have."""
    readings: dict[str, float | None] = {}
    not_yet: set[str] = set()
    for m in meters:
        value = number(texts[m])
        if value is None and not started[m] and not texts[m].strip():
            not_yet.add(m)
            continue
        started[m] = True
        readings[m] = value
    return readings, not_yet


def _sum_reading(texts: dict, readings: dict[str, float | None], meters: list[str]) -> float | None:
    """The row's sum, when every meter has a value in it (otherwise it is not the whole wall)."""
    return None if any(readings[m] is None for m in meters) else number(texts["sum"])


def _one_row_per_record(rows: list[Row], meters: list[str]) -> bool:
    """Whether each row is written at one meter's record (energyframe's raw log: stamps to the
    ms, at most one meter's value changes from a row to the next) rather than a row a second
    holding every meter's record (the earlier tool's)."""
    times = np.array([r[0] for r in rows], dtype=float)
    if len(meters) < 2 or not np.any(times % 1.0):
        return False
    values = np.array([[_or_nan(number(r[2][m])) for m in meters] for r in rows], dtype=float)
    before, after = values[:-1], values[1:]
    changed = np.isfinite(before) & np.isfinite(after) & (before != after)
    return not np.any(changed.sum(axis=1) >= 2)


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def _period(path: Path, sum_times: list, meters: int, per_record: bool) -> float:
    """The meter's own logging period: as the run beside the log declared it, else from the
    rows (a row per record of ``meters`` meters: ``meters`` rows a period). Units: s."""
    declared = _declared_period(path)
    if declared:
        return declared
    t = np.array(sum_times, dtype=float)
    if per_record and t.size > meters:
        return float(meters * (t[-1] - t[0]) / (t.size - 1))
    return spacing(t) or 1.0


def _declared_period(path: Path) -> float | None:
    """The averaging period of the ``wattsup`` source whose raw log this is (``raw/<source>/``)."""
    meta = _run_meta_of_raw_log(path)
    for source in meta.get("sources", []) if isinstance(meta, dict) else ():
        if isinstance(source, dict) and source.get("name") == path.parent.name:
            averaging = _channels_averaging(source.get("channels", []) or [])
            if averaging is not None:
                return averaging
    return None


def _run_meta_of_raw_log(path: Path) -> object:
    """The run.json of the run whose raw log ``path`` is (``RUN/raw/<source>/``); None for a log
    elsewhere or a run.json that cannot be read."""
    if path.parent.parent.name != "raw":
        return None
    try:
        return json.loads((path.parent.parent.parent / "run.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _channels_averaging(channels: list) -> float | None:
    """The first averaging period, in s, a source's recorded channels declare (a positive number)."""
    for channel in channels:
        averaging = channel.get("averaging_s") if isinstance(channel, dict) else None
        if isinstance(averaging, (int, float)) and math.isfinite(averaging) and averaging > 0:
            return float(averaging)
    return None


def _channels(per_channel: dict[str, tuple[list, list, list]], names: list[str], period: float):
    channels, series, missing = {}, {}, {}
    for n in names:
        t_list, v_list, missing_list = per_channel[n]
        if not t_list:
            continue
        single = n == "sum" or len(names) == 1
        channels[n] = Channel(
            n,
            Quantity.POWER,
            Scope.SYSTEM_WALL,
            period,
            ClockBase.WALL,
            primary=single,
            description=("sum of the meters" if n == "sum" else f"WattsUp? meter {n}")
            + f" ({period:g}-s averages, stamped when they arrived)",
            timing=Timing.UNKNOWN,
            averaging_s=period,
        )
        series[n] = SampleSeries(np.array(t_list, dtype=float), np.array(v_list, dtype=float))
        missing[n] = np.array(missing_list, dtype=float)
    return channels, series, missing
