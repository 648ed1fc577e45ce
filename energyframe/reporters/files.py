"""``csv`` and ``json``: the per-phase summary as a file (or on stdout with ``path=-``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from ..model import join_flags
from ..options import Option
from ..plugin import Reporter
from ..results.result import RunResult
from ..results.store import json_safe, write_csv, write_json

SPREAD_FIELDS = ("n", "median", "q1", "q3", "iqr", "cv", "min", "max")


def summary_frame(result: RunResult) -> pd.DataFrame:
    """One row per phase and channel, with the spread of each figure in its own columns."""
    rows = []
    for s in result.summaries:
        row = {"phase": s.phase, "channel": s.channel, "trials": s.trials, "iterations": s.iterations}
        for label, spread in (
            ("time_per_iter_s", s.time_per_iter_s),
            ("energy_per_iter_j", s.energy_per_iter_j),
            ("mean_power_w", s.mean_power_w),
            ("dynamic_energy_per_iter_j", s.dynamic_energy_per_iter_j),
        ):
            for field in SPREAD_FIELDS:
                row[f"{label}_{field}"] = getattr(spread, field) if spread is not None else None
        row["flags"] = join_flags(s.flags)
        rows.append(row)
    return pd.DataFrame(rows)


def _target(path: str | None, run_dir: Path | None, default_name: str) -> Path | None:
    """``None`` for stdout."""
    if path == "-":
        return None
    if path:
        return Path(path)
    if run_dir is None:
        return None
    return run_dir / default_name


#: where the csv reporter writes when the workload's own ``summary`` table (a pipeline's or a
#: per-layer run's totals) already is summary.csv
PHASE_SUMMARY_CSV = "phase-summary.csv"


def csv_name(result: RunResult) -> str:
    """summary.csv, unless the run derived a table of that name: then phase-summary.csv, so that
    neither file overwrites the other."""
    derived = {t.name for t in result.derived}
    return PHASE_SUMMARY_CSV if "summary" in derived else "summary.csv"


class CSVReporter(Reporter):
    """Writes summary.csv: per phase and channel, median, quartiles, IQR, CV, n."""

    DESCRIPTION = "write summary.csv (per phase and channel, with spread) into the run directory"
    OPTIONS = (
        Option(
            "path",
            "str",
            None,
            "file to write (default: RUN_DIR/summary.csv, or RUN_DIR/phase-summary.csv where the "
            "workload's own summary.csv is there; - for stdout)",
        ),
    )

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        frame = summary_frame(result)
        target = _target(self.options["path"], run_dir, csv_name(result))
        if target is None:
            frame.to_csv(sys.stdout, index=False)
        else:
            write_csv(target, frame)


class JSONReporter(Reporter):
    """Writes summary.json: status, per-phase summaries, idle baseline, warnings."""

    DESCRIPTION = "write summary.json (status, per-phase summaries, warnings) into the run directory"
    OPTIONS = (Option("path", "str", None, "file to write (default: RUN_DIR/summary.json; - for stdout)"),)

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        data = {
            "status": result.status,
            "reason": result.reason,
            "workload": result.run_meta.workload.name if result.run_meta.workload else None,
            "phases": [s.to_json() for s in result.summaries],
            "idle_baseline": {k: v.to_json() for k, v in result.run_meta.idle_baseline.items()},
            "warnings": result.warnings,
        }
        target = _target(self.options["path"], run_dir, "summary.json")
        if target is None:
            json.dump(json_safe(data), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            write_json(target, data)
