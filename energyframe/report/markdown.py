"""A run as Markdown (report.md): for a lab notebook, a pull request or an issue.

The page's sections in order, each only when the run has it: the facts, the summary, the work
rates, the workload's derived tables, the warnings, and whether the run is incomplete.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from ..core.summary import PhaseSummary
from ..results.display import cell, derived_columns, md_code, md_table, md_text, relative_iqr, si, singular
from ..results.result import RunResult

#: the summary table's columns, and which of them are figures (right-aligned)
SUMMARY_COLUMNS = (
    ("phase", False),
    ("channel", False),
    ("trials", True),
    ("iters", True),
    ("time/iter", True),
    ("IQR", True),
    ("energy/iter", True),
    ("IQR", True),
    ("power", True),
    ("dyn. energy/iter", True),
    ("flags", False),
)
#: facts whose value is a path or an option set, shown as inline code
CODE_FACTS = {"run directory", "workload"}


def run_markdown(result: RunResult, run_dir: Path | None = None, all_channels: bool = False) -> str:
    """The run's facts, summary (median, IQR, trials), flags, status, warnings and derived tables."""
    workload = result.run_meta.workload
    name = workload.name if workload else "run"
    rows = list(result.summaries) if all_channels else result.primary_summaries()
    lines = [f"# {md_text(name)}: {md_text(result.status)}", ""]
    lines += [
        f"- **{md_text(k)}**: {md_code(v) if k in CODE_FACTS else md_text(v)}"
        for k, v in _facts(result, run_dir, name)
    ]
    lines += ["", "## Summary", "", *_summary_section(rows)]
    work_lines = _work_lines(rows)
    if work_lines:
        lines += ["", *work_lines]
    for derived in result.derived:
        lines += _derived_section(derived)
    if result.warnings:
        lines += ["", "## Warnings", ""] + [f"- {md_text(w)}" for w in result.warnings]
    if not result.complete:
        lines += ["", f"**Run incomplete:** {md_text(result.reason)}"]
    return "\n".join(lines) + "\n"


def _facts(result: RunResult, run_dir: Path | None, name: str) -> list[tuple[str, str]]:
    """The run at a glance, as (fact, value): what ran and where, then when and by what."""
    return _what_ran(result, run_dir, name) + _when_and_by_what(result)


def _what_ran(result: RunResult, run_dir: Path | None, name: str) -> list[tuple[str, str]]:
    """Status, run directory, workload with its options, power sources, GPU models."""
    from ..compare.comparability import gpu_models

    meta = result.run_meta
    facts = [("status", result.status + (f": {result.reason}" if result.reason else ""))]
    if run_dir is not None:
        facts.append(("run directory", str(run_dir)))
    options = dict(meta.workload.options) if meta.workload else {}
    facts += [
        ("workload", f"{name} {json.dumps(options)}"),
        ("power sources", ", ".join(s.name for s in meta.sources) or "none (timing only)"),
    ]
    models = gpu_models(meta)
    if models:
        facts.append(("GPU", ", ".join(models)))
    return facts


def _when_and_by_what(result: RunResult) -> list[tuple[str, str]]:
    """Start and end, the energyframe version, the measured command's exit code."""
    meta = result.run_meta
    facts = [("started", str(meta.started_at or "-")), ("ended", str(meta.ended_at or "-"))]
    version = meta.versions.get("energyframe")
    if version:
        facts.append(("energyframe", str(version)))
    if meta.exit_code is not None:
        facts.append(("exit code of the measured command", str(meta.exit_code)))
    return facts


def _summary_section(rows: Sequence[PhaseSummary]) -> list[str]:
    """The summary table with its legend, or why there is none."""
    if not rows:
        return ["No phase summaries (no window finished)."]
    columns = [name for name, _ in SUMMARY_COLUMNS]
    right = [figure for _, figure in SUMMARY_COLUMNS]
    lines = md_table(columns, [_summary_row(s) for s in rows], right)
    return [
        *lines,
        "",
        "Medians over the trials; IQR as a share of the median. Flags: docs/result-format.md.",
    ]


def _summary_row(s: PhaseSummary) -> list[str]:
    """One phase on one channel: medians with their IQR as a share, the flags."""
    dyn = s.dynamic_energy_per_iter_j
    return [
        s.phase,
        s.channel or "(timing only)",
        str(s.trials),
        str(s.iterations),
        si(s.time_per_iter_s.median, "s"),
        relative_iqr(s.time_per_iter_s),
        si(s.energy_per_iter_j.median, "J"),
        relative_iqr(s.energy_per_iter_j),
        si(s.mean_power_w.median, "W"),
        si(dyn.median, "J") if dyn else "-",
        ", ".join(s.flags),
    ]


def _work_lines(rows: Sequence[PhaseSummary]) -> list[str]:
    """Energy per unit of work and work per second, for each phase that declared its work and
    has a finite energy on a channel."""
    lines = []
    for s in rows:
        energy, time_s = s.energy_per_iter_j.median, s.time_per_iter_s.median
        measured = bool(s.channel) and math.isfinite(energy)
        for unit, amount in s.work.items():
            if amount and measured:
                lines.append(
                    f"- {md_text(s.phase)} \\[{md_text(s.channel)}\\]: {energy / amount:.4g} J/{md_text(singular(unit))}, "
                    f"{amount / time_s:.4g} {md_text(unit)}/s"
                )
    return lines


def _derived_section(derived) -> list[str]:
    """A workload's derived table under its title, with its note."""
    columns = derived_columns(derived)
    lines = ["", f"## {md_text(derived.title)}", ""]
    lines += md_table(columns, [[cell(c, row.get(c)) for c in columns] for row in derived.rows])
    if derived.note:
        lines += ["", md_text(derived.note)]
    return lines
