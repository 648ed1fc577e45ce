"""What the tracker reporters (``mlflow``, ``tensorboard``, ``wandb``) log of a run, computed once:
its params, a metric per phase and primary channel, and a metric per window.

Names are ``<phase>/<channel>/<figure>`` (``<phase>/<figure>`` without a channel); a window's are
``window/<phase>/<channel>/<figure>``, stepped by trial. Characters a tracker refuses become ``_``
(MLflow's rule, the strictest: letters, digits, ``_ - . /`` and spaces).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..results.result import RunResult

#: what MLflow takes in a metric or param name; anything else becomes "_"
NAME_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")
#: the longest param value logged (MLflow keeps 6000 characters; a spec list can be long)
MAX_PARAM_CHARS = 500
#: a window's figures, by windows.csv's column
WINDOW_FIGURES = ("duration_s", "energy_j", "mean_power_w", "energy_bound_j", "dynamic_energy_j")


#: folders trackers keep inside a run directory for themselves (W&B's run files and logs): not
#: part of the run, so not uploaded as its artifacts
TRACKER_FOLDERS = ("wandb",)


def run_files(run_dir: Path) -> list[Path]:
    """The run directory's files, as paths relative to it, without the trackers' own folders."""
    return sorted(
        p.relative_to(run_dir)
        for p in Path(run_dir).rglob("*")
        if p.is_file() and p.relative_to(run_dir).parts[0] not in TRACKER_FOLDERS
    )


def metric_name(*parts: str) -> str:
    """``parts`` joined with ``/``, each made safe for every tracker."""
    return "/".join(NAME_CHARS.sub("_", str(p)) for p in parts if p != "")


@dataclass(frozen=True)
class WindowPoint:
    """One window's figures: a tracker's step (the trial) and time (its start, Unix s)."""

    step: int
    time_s: float
    values: Mapping[str, float]


@dataclass(frozen=True)
class Tracked:
    """A run as the trackers log it.

    Args:
        name: the run's name (its directory's, or ``energyframe``).
        params: what the run was: workload, options, sources, status, versions.
        metrics: per phase and primary channel: median time, energy, power per iteration, the
            energy's 95 % bound, trials, and energy per unit of work.
        windows: every primary window, in the order they started.
    """

    name: str
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    windows: list[WindowPoint] = field(default_factory=list)


def tracked(result: RunResult, run_dir: Path | None) -> Tracked:
    """What the trackers log of ``result`` (saved in ``run_dir``, or not saved)."""
    return Tracked(
        run_dir.name if run_dir is not None else "energyframe",
        params(result, run_dir),
        phase_metrics(result),
        window_points(result),
    )


def params(result: RunResult, run_dir: Path | None) -> dict[str, str]:
    """What the run was, as a tracker's params: names made safe, values cut to
    ``MAX_PARAM_CHARS``."""
    out = {**_run_params(result), **_option_params(result)}
    out.update({f"version.{k}": str(v) for k, v in result.run_meta.versions.items() if v})
    if run_dir is not None:
        out["run_dir"] = str(run_dir)
    return {metric_name(k): v[:MAX_PARAM_CHARS] for k, v in out.items()}


def _run_params(result: RunResult) -> dict[str, str]:
    """The run's status (with its reason), workload, power sources and primary channels."""
    meta = result.run_meta
    out = {
        "status": result.status,
        "workload": meta.workload.name if meta.workload else "(measured block)",
        "power": ", ".join(s.name for s in meta.sources) or "none (timing only)",
        "primary_channels": ", ".join(meta.primary_channels) or "-",
    }
    if result.reason:
        out["reason"] = result.reason
    return out


def _option_params(result: RunResult) -> dict[str, str]:
    """The workload's options (``workload.KEY``) and each power source's
    (``power.SOURCE.KEY``)."""
    meta = result.run_meta
    out = {}
    if meta.workload is not None:
        out.update({f"workload.{k}": str(v) for k, v in meta.workload.options.items()})
    for s in meta.sources:
        out.update({f"power.{s.name}.{k}": str(v) for k, v in s.options.items()})
    return out


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def phase_metrics(result: RunResult) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in result.primary_summaries():
        figures = {
            "trials": float(s.trials),
            "time_per_iter_s": s.time_per_iter_s.median,
            "energy_per_iter_j": s.energy_per_iter_j.median,
            "energy_per_iter_bound_j": s.energy_bound.total_j if s.energy_bound is not None else math.nan,
            "mean_power_w": s.mean_power_w.median,
        }
        if s.dynamic_energy_per_iter_j is not None:
            figures["dynamic_energy_per_iter_j"] = s.dynamic_energy_per_iter_j.median
        for unit, amount in s.work.items():
            if amount:
                figures[f"energy_per_{unit}_j"] = s.energy_per_iter_j.median / amount
        for figure, value in figures.items():
            if _finite(value):
                out[metric_name(s.phase, s.channel, figure)] = float(value)
    return out


def window_points(result: RunResult) -> list[WindowPoint]:
    """Every window on a primary channel (or without one: timing only), by start."""
    w = result.windows
    if w.empty:
        return []
    primary = set(result.run_meta.primary_channels)
    channel = w["channel"].fillna("").astype(str)
    rows = w[channel.isin(primary) | (channel == "")].sort_values("start_s", kind="stable")
    points = []
    for row in rows.to_dict("records"):
        ch = "" if pd.isna(row.get("channel")) else str(row["channel"])
        values = {
            metric_name("window", str(row["phase"]), ch, figure): float(row[figure])
            for figure in WINDOW_FIGURES
            if figure in row and _finite(_float(row[figure]))
        }
        if values:
            points.append(WindowPoint(int(row["trial"]), float(row["start_s"]), values))
    return points


def _float(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
