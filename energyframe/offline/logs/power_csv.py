"""A CSV of ``time_s`` (Unix seconds) and ``power_w`` or ``energy_j``: one channel, named after
the file, exact timing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.samples import SampleSeries
from ...model import Channel, ClockBase, Quantity, Scope
from .log import POWER_CSV, PowerLog, in_time_order, unsorted_note
from .table import Table, numbers, skipped_warning, spacing
from .timestamps import check_unix


def read(path: Path, table: Table, name: str) -> PowerLog:
    table.refuse_torn()
    column = "power_w" if "power_w" in table.header else "energy_j"
    columns = table.columns()
    t_all, timed = numbers(columns[table.column("time_s")])
    timed &= np.isfinite(t_all)
    v_all, has = numbers(columns[table.column(column)])
    bad = sorted(
        list(table.bad) + [(table.rows[i][0], ",".join(table.rows[i][1])) for i in np.flatnonzero(~timed)]
    )
    check_unix(t_all[timed], f"{path}: column time_s")
    times, values = t_all[timed & has], v_all[timed & has]
    missing = t_all[timed & ~has]
    if not times.size and not missing.size:
        raise table.no_rows("rows with a time in seconds", bad)
    warnings = skipped_warning(path, bad, "rows with a time")
    ordered = in_time_order(times, values, name, path.name)
    if ordered.unsorted:
        warnings.append(unsorted_note(path.name))
    warnings += ordered.notes
    quantity = Quantity.POWER if column == "power_w" else Quantity.ENERGY
    channel = Channel(name, quantity, Scope.OTHER, spacing(ordered.times_s), ClockBase.WALL)
    return PowerLog(
        path,
        POWER_CSV,
        {name: channel},
        {name: SampleSeries(ordered.times_s, ordered.values)},
        {name: np.sort(missing)},
        name,
        tuple(warnings),
        len(bad),
        flagged={name: ordered.flagged} if ordered.flagged else {},
    )
