"""The windows an offline analysis integrates over: a run directory's (``windows.csv``, or the
journal of a run that died), the earlier tool's timing JSON, or ``START,END`` as given."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.clock import ClockModel
from ..errors import UsageError
from .logs import parse_time
from .logs.timestamps import check_unix


@dataclass(frozen=True)
class Window:
    """A window to analyse. Units: Unix s.

    Args:
        name: how messages name it (``phase#trial`` for a run's windows).
        runs: iterations in the window (the earlier tool's ``num_runs``), for per-run figures.
        phase, trial: its row in windows.csv (``phase`` defaults to ``name``).
    """

    name: str
    start_s: float
    end_s: float
    runs: int | None = None
    phase: str = ""
    trial: int = 0


#: the columns of a run's windows.csv that make a window; those after the first are numbers
RUN_WINDOW_COLUMNS = ["phase", "trial", "start_s", "end_s", "iterations"]


def windows_from_run(directory: Path | str) -> list[Window]:
    """A run directory's windows (one per phase and trial) from its windows.csv."""
    from ..results.store import WINDOWS_CSV, WINDOWS_PARTIAL, read_windows

    directory = _run_directory(directory)
    path = directory / WINDOWS_CSV
    if not path.exists() and (directory / WINDOWS_PARTIAL).exists():
        return _journal_windows(directory)
    if not path.exists():
        raise UsageError(
            f"{directory} has no windows.csv: it is not a run directory, or its run measured nothing"
        )
    frame = read_windows(directory)
    missing = [c for c in RUN_WINDOW_COLUMNS if c not in frame.columns]
    if missing:
        raise UsageError(f"{path} lacks the column(s) {missing} of a run's windows.csv")
    out = [_row_window(path, row) for row in frame.drop_duplicates(["phase", "trial"]).itertuples()]
    if not out:
        raise UsageError(f"{path} holds no window")
    return check_windows(out, f"{path}: its windows' start_s or end_s")


def _run_directory(directory: Path | str) -> Path:
    """``directory``, once it is one."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(
            f"run directory {directory} does not exist"
            if not directory.exists()
            else f"{directory} is not a directory"
        )
    return directory


def _row_window(path: Path, row: Any) -> Window:
    """One row of a run's windows.csv as a window, named ``phase#trial``."""
    numbers = {
        c: pd.to_numeric(pd.Series([getattr(row, c)]), errors="coerce").iloc[0]
        for c in RUN_WINDOW_COLUMNS[1:]
    }
    bad = [c for c, v in numbers.items() if not np.isfinite(v)]
    if bad:
        raise UsageError(
            f"{path} row {row.Index + 2} ({row.phase}) has no number in {bad}: the file is damaged"
        )
    return Window(
        f"{row.phase}#{int(numbers['trial'])}",
        float(numbers["start_s"]),
        float(numbers["end_s"]),
        int(numbers["iterations"]),
        str(row.phase),
        int(numbers["trial"]),
    )


def _journal_windows(directory: Path) -> list[Window]:
    """The windows a run that died had closed, from its journal (``windows.partial.csv``)."""
    from ..results.load import journal_records
    from ..results.store import WINDOWS_PARTIAL, read_meta

    meta = read_meta(directory)
    try:
        clock = ClockModel.from_json(dict(meta.get("clock") or {}))
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(
            f"{directory / 'run.json'} has no clock anchors ({e}): its windows cannot be read"
        ) from e
    records = journal_records(directory / WINDOWS_PARTIAL, clock)
    if not records:
        raise UsageError(f"{directory / WINDOWS_PARTIAL} holds no finished window")
    return [
        Window(
            f"{r.phase}#{r.trial}",
            float(clock.to_unix(r.start_s)),
            float(clock.to_unix(r.end_s)),
            r.iterations,
            r.phase,
            r.trial,
        )
        for r in records
    ]


def windows_from_timing(path: Path | str, tz: str | None = None) -> list[Window]:
    """The earlier tool's timing JSON: start_timestamp, end_timestamp, num_runs."""
    path = Path(path)
    data = _timing_object(path)
    missing = [k for k in ("start_timestamp", "end_timestamp") if k not in data]
    if missing:
        raise UsageError(f"{path} lacks {', '.join(missing)} (expected the earlier tool's timing JSON)")
    runs = data.get("num_runs")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise UsageError(f"{path}: num_runs should be a whole number of runs, not {runs!r}")
    try:
        start, end = parse_time(data["start_timestamp"], tz), parse_time(data["end_timestamp"], tz)
    except UsageError as e:
        raise UsageError(f"{path}: {e}") from e
    return [Window(path.stem, start, end, runs)]


def _timing_object(path: Path) -> dict[str, Any]:
    """The JSON object a timing file holds; each way it can fail to be one, said."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise UsageError(f"timing file {path} does not exist") from e
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read timing file {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise UsageError(f"{path} is not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e
    if not isinstance(data, dict):
        raise UsageError(
            f"{path} is not the earlier tool's timing JSON (an object), it holds a {type(data).__name__}"
        )
    return data


def window_from_text(text: str, tz: str | None = None) -> Window:
    parts = text.split(",")
    if len(parts) != 2:
        raise UsageError(f"a window is START,END, got {text!r}")
    try:
        return Window(text, parse_time(parts[0], tz), parse_time(parts[1], tz))
    except UsageError as e:
        raise UsageError(f"window {text!r}: {e}") from e


def check_windows(windows: list[Window], where: str) -> list[Window]:
    """``windows``, once every edge is a time a date can show.

    Raises:
        UsageError: naming ``where`` and the edge.
    """
    edges = np.array([t for w in windows for t in (w.start_s, w.end_s)], dtype=float)
    check_unix(edges, where)
    return windows
