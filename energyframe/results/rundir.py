"""A saved run as the comparison and the reports see it: the ``RunResult`` plus what lies beside
it in the run directory (its path, what kind of thing each phase is, the workload's files)."""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .result import RunResult

#: derived table -> (its column naming the phase, the kind of row it makes): the tables every
#: pipeline and per-layer run writes (a pipeline defined in a script cannot be imported later to
#: say so itself); other workloads say what their phases are through ``Workload.phase_kinds``
PHASE_TABLES = {"layers": ("stage", "layer"), "stages": ("stage", "stage")}


@dataclass(frozen=True)
class SavedRun:
    """A loaded run directory.

    Args:
        path: the run directory.
        label: how tables name it (the directory's name unless given).
        result: run.json, windows.csv and samples as ``load_run`` reads them (``RunResult.load``).
        kinds: phase -> ``layer``, ``stage``, ``configuration`` or ``op`` (plain phases absent).
        workload: the class of the workload that made the run, as run.json names it (``None``
            when it cannot be imported here): it draws the run's own report figures.
    """

    path: Path
    label: str
    result: RunResult
    kinds: Mapping[str, str] = field(default_factory=dict)
    workload: type | None = None

    def workload_figures(self) -> Sequence[Any]:
        """The figures the run's workload adds to its report (``Workload.report_figures``)."""
        hook = getattr(self.workload, "report_figures", None)
        return list(hook(self.path, self.result)) if hook is not None else []

    @property
    def primary_channels(self) -> set[str]:
        return set(self.result.run_meta.primary_channels)

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


def workload_class(result: RunResult) -> type | None:
    """The workload class run.json names (``workload.class``), imported; ``None`` when it is not
    importable here (a workload defined in a script, or a plugin not installed)."""
    workload = result.run_meta.workload
    path = workload.class_name if workload is not None else None
    if not isinstance(path, str) or "." not in path:
        return None
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception:  # any import error: the report goes on without the workload's figures
        return None
    return cls if isinstance(cls, type) else None


def load(path: Path | str, label: str | None = None) -> SavedRun:
    """Read a run directory as every command does (``RunResult.load``, the one loader in
    ``results/load.py``); ``StoreError`` if it is not one."""
    path = Path(path)
    result = RunResult.load(path)
    kinds: dict[str, str] = {}
    for table in result.derived:
        if table.name in PHASE_TABLES:
            column, kind = PHASE_TABLES[table.name]
            for row in table.rows:
                if row.get(column) is not None:
                    kinds.setdefault(str(row[column]), kind)
    workload = workload_class(result)
    hook = getattr(workload, "phase_kinds", None)
    if hook is not None:
        for phase, kind in hook(path, result).items():
            kinds.setdefault(phase, kind)
    return SavedRun(
        path=path,
        label=label or path.resolve().name or str(path),
        result=result,
        kinds=kinds,
        workload=workload,
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
