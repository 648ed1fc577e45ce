"""A run as Markdown (report.md): for a lab notebook, a pull request or an issue."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..results.display import cell, md_code, md_table, md_text, relative_iqr, si, singular
from ..results.result import RunResult


def run_markdown(result: RunResult, run_dir: Path | None = None, all_channels: bool = False) -> str:  # noqa: C901 (the page's sections in order, each only when the run has it)
    """The run's facts, summary (median, IQR, trials), flags, status, warnings and derived tables."""
    from ..compare.comparability import gpu_models

    meta = result.run_meta
    workload = meta.workload
    name = workload.name if workload else "run"
    lines = [f"# {md_text(name)}: {md_text(result.status)}", ""]
    facts = [("status", result.status + (f": {result.reason}" if result.reason else ""))]
    if run_dir is not None:
        facts.append(("run directory", str(run_dir)))
    facts += [
        ("workload", f"{name} {json.dumps(dict(workload.options) if workload else {})}"),
        ("power sources", ", ".join(s.name for s in meta.sources) or "none (timing only)"),
    ]
    models = gpu_models(meta)
    if models:
        facts.append(("GPU", ", ".join(models)))
    facts += [("started", str(meta.started_at or "-")), ("ended", str(meta.ended_at or "-"))]
    version = meta.versions.get("energyframe")
    if version:
        facts.append(("energyframe", str(version)))
    if meta.exit_code is not None:
        facts.append(("exit code of the measured command", str(meta.exit_code)))
    code = {"run directory", "workload"}
    lines += [f"- **{md_text(k)}**: {md_code(v) if k in code else md_text(v)}" for k, v in facts]
    rows = list(result.summaries) if all_channels else result.primary_summaries()
    lines += ["", "## Summary", ""]
    if rows:
        body = []
        for s in rows:
            dyn = s.dynamic_energy_per_iter_j
            body.append(
                [
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
            )
        columns = [
            "phase",
            "channel",
            "trials",
            "iters",
            "time/iter",
            "IQR",
            "energy/iter",
            "IQR",
            "power",
            "dyn. energy/iter",
            "flags",
        ]
        lines += md_table(columns, body, [False, False] + [True] * 8 + [False])
        lines += ["", "Medians over the trials; IQR as a share of the median. Flags: docs/result-format.md."]
    else:
        lines.append("No phase summaries (no window finished).")
    work_lines = []
    for s in rows:
        for unit, amount in s.work.items():
            energy, time_s = s.energy_per_iter_j.median, s.time_per_iter_s.median
            if amount and s.channel and math.isfinite(energy):
                work_lines.append(
                    f"- {md_text(s.phase)} \\[{md_text(s.channel)}\\]: {energy / amount:.4g} J/{md_text(singular(unit))}, "
                    f"{amount / time_s:.4g} {md_text(unit)}/s"
                )
    if work_lines:
        lines += ["", *work_lines]
    for derived in result.derived:
        columns = list(derived.display)
        if not columns:
            for row in derived.rows:
                columns += [c for c in row if c not in columns]
        lines += ["", f"## {md_text(derived.title)}", ""]
        lines += md_table(columns, [[cell(c, row.get(c)) for c in columns] for row in derived.rows])
        if derived.note:
            lines += ["", md_text(derived.note)]
    if result.warnings:
        lines += ["", "## Warnings", ""] + [f"- {md_text(w)}" for w in result.warnings]
    if not result.complete:
        lines += ["", f"**Run incomplete:** {md_text(result.reason)}"]
    return "\n".join(lines) + "\n"
