"""A saved run as the comparison and the reports see it: the ``RunResult`` plus what lies beside
it in the run directory (its path, what kind of thing each phase is, the workload's files)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .result import RunResult

#: derived table -> (its column naming the phase, the kind of row it makes)
PHASE_TABLES = {"layers": ("stage", "layer"), "stages": ("stage", "stage"), "replayed_ops": ("op", "op")}
SWEEP_JSON = "benchmark_results.json"
REPLAY_JSON = "comparison_report.json"


@dataclass(frozen=True)
class SavedRun:
    """A loaded run directory.

    Args:
        path: the run directory.
        label: how tables name it (the directory's name unless given).
        result: run.json, windows.csv and samples as ``RunResult.load`` reads them.
        kinds: phase -> ``layer``, ``stage``, ``configuration`` or ``op`` (plain phases absent).
        sweep: benchmark_results.json, when the run is a kernel sweep.
        replay: comparison_report.json, when the run replayed a trace.
    """

    path: Path
    label: str
    result: RunResult
    kinds: Mapping[str, str] = field(default_factory=dict)
    sweep: Mapping[str, Any] | None = None
    replay: Mapping[str, Any] | None = None

    @property
    def primary_channels(self) -> set[str]:
        return set(self.result.meta.get("primary_channels", []))

    def derived_figures(self) -> dict[str, float]:
        """The numbers of the workload's one-row tables (pipeline totals, the replay prediction),
        as ``table.column`` -> value: figures computed from medians, without trials."""
        out: dict[str, float] = {}
        for table in self.result.derived:
            if len(table.rows) != 1:
                continue
            row = table.rows[0]
            columns = list(table.display) or list(row)
            for column in columns:
                value = row.get(column)
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if math.isfinite(float(value)):
                    out[f"{table.name}.{column}"] = float(value)
        return out


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def load(path: Path | str, label: str | None = None) -> SavedRun:
    """Read a run directory (``StoreError`` if it is not one)."""
    path = Path(path)
    result = RunResult.load(path)
    kinds: dict[str, str] = {}
    for table in result.derived:
        if table.name in PHASE_TABLES:
            column, kind = PHASE_TABLES[table.name]
            for row in table.rows:
                if row.get(column) is not None:
                    kinds.setdefault(str(row[column]), kind)
    sweep = _read_json(path / SWEEP_JSON)
    for bench in (sweep or {}).get("benchmarks", []):
        if bench.get("phase"):
            kinds.setdefault(str(bench["phase"]), "configuration")
    return SavedRun(
        path=path,
        label=label or path.resolve().name or str(path),
        result=result,
        kinds=kinds,
        sweep=sweep,
        replay=_read_json(path / REPLAY_JSON),
    )


def load_all(paths, labels=()) -> list[SavedRun]:
    """Several run directories; labels default to their names, made unique with parent folders."""
    paths = [Path(p) for p in paths]
    labels = list(labels)
    if not labels:
        labels = [p.resolve().name for p in paths]
        if len(set(labels)) != len(labels):
            labels = [str(p) for p in paths]
    return [load(p, label) for p, label in zip(paths, labels)]
