"""``ef.load_runs``: many saved runs as one table, one row per run, phase and primary channel
(``energyframe runs`` prints it)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import EnergyFrameError, UsageError
from ..results.meta import RunMeta
from ..results.store import RUN_JSON

#: the table's columns, in order
RUN_COLUMNS = [
    "run",
    "status",
    "reason",
    "started_at",
    "workload",
    "device",
    "phase",
    "channel",
    "trials",
    "iterations",
    "time_per_iter_s",
    "time_iqr_s",
    "energy_per_iter_j",
    "energy_iqr_j",
    "energy_uncertainty_j",
    "mean_power_w",
    "flags",
    "path",
]


def run_directories(root: Path) -> Iterator[Path]:
    """Every run directory under ``root`` (``root`` itself if it is one), outermost only."""
    if (root / RUN_JSON).is_file():
        yield root
        return
    found = sorted(p.parent for p in root.rglob(RUN_JSON))
    kept: list[Path] = []
    for path in found:
        if not any(parent in kept for parent in path.parents):
            kept.append(path)
            yield path


def load_runs(root: Path | str = "runs") -> pd.DataFrame:
    """Every run saved under ``root`` as one table: a row per run, phase and primary channel
    (one row for a run with no finished window), with its status, workload, device, time and
    energy per iteration (median and IQR over trials), and the energy's uncertainty where the
    run recorded one. A run that cannot be read is a row with status ``unreadable`` and why.

    Raises:
        UsageError: ``root`` is not a directory.
    """
    from ..results.result import load_run

    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory of runs")
    rows: list[dict[str, Any]] = []
    for path in run_directories(root):
        try:
            result = load_run(path)
        except EnergyFrameError as e:
            rows.append({"run": path.name, "status": "unreadable", "reason": str(e), "path": str(path)})
            continue
        rows.extend(_rows(path, result))
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def _rows(path: Path, result) -> list[dict[str, Any]]:
    meta = result.run_meta
    common = {
        "run": path.name,
        "status": result.status,
        "reason": result.reason,
        "started_at": meta.started_at,
        "workload": meta.workload.name if meta.workload else None,
        "device": _device(meta),
        "path": str(path),
    }
    summaries = result.primary_summaries() or list(result.summaries)
    if not summaries:
        return [common]
    return [{**common, **_figures(s)} for s in summaries]


def _figures(s) -> dict[str, Any]:
    return {
        "phase": s.phase,
        "channel": s.channel or None,
        "trials": s.trials,
        "iterations": s.iterations,
        "time_per_iter_s": s.time_per_iter_s.median,
        "time_iqr_s": s.time_per_iter_s.iqr,
        "energy_per_iter_j": _finite(s.energy_per_iter_j.median),
        "energy_iqr_j": _finite(s.energy_per_iter_j.iqr),
        # the 95 % bound of the median energy per iteration (``PhaseSummary.energy_bound``)
        "energy_uncertainty_j": _finite(s.energy_bound.total_j) if s.energy_bound is not None else None,
        "mean_power_w": _finite(s.mean_power_w.median),
        "flags": ",".join(s.flags),
    }


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _device(meta: RunMeta) -> str | None:
    """The GPUs the sources measured, else the workload's device."""
    names = [str(gpu["name"]) for gpu in meta.gpus]
    if names:
        return ", ".join(dict.fromkeys(names))
    device = meta.workload_info.get("device")
    return str(device) if device else None
