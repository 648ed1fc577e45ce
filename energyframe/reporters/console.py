"""``console``: the summary table, the run's status, warnings and where it was saved.

``energyframe show`` prints a saved run through this same reporter (with ``facts`` and, on
request, ``windows``), so a run reads the same when it ends and when it is looked at later.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from ..core.summary import PhaseSummary
from ..options import Option
from ..plugin import Reporter, RunResult
from ..results.display import (
    cell_text,
    derived_table,
    precision_lines,
    singular,
    summary_table,
    windows_table,
)

#: a pipe or a file gets a table this wide rather than rich's 80 columns
PIPE_WIDTH = 160


class ConsoleReporter(Reporter):
    """Prints a rich table: phase, time/iter, energy/iter, mean power, spread, trials."""

    DESCRIPTION = "print the summary table (phase, time/iter, energy/iter, power, spread, trials)"
    OPTIONS = (
        Option("all_channels", "bool", False, "also show secondary channels (e.g. 1-s average power)"),
        Option("wide", "bool", False, "every column on its own (default: fit the terminal)"),
        Option("facts", "bool", False, "first the run's facts: status, workload, sources, times"),
        Option("windows", "bool", False, "also every window, start relative to the first"),
        Option(
            "grid_g_per_kwh",
            "float",
            None,
            "also show CO2e per iteration at this grid carbon intensity (yours: it is never guessed). Units: g/kWh",
            minimum=0.0,
        ),
    )

    def __init__(self, name: str | None = None, console: Console | None = None, **options) -> None:
        super().__init__(name, **options)
        self.console = console

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        console = self.console or Console(file=sys.stdout, width=None if sys.stdout.isatty() else PIPE_WIDTH)
        if self.options["facts"]:
            self._facts(console, result, run_dir)
        rows = list(result.summaries) if self.options["all_channels"] else result.primary_summaries()
        self._summary(console, result, rows)
        for table in result.derived:
            console.print(derived_table(table))
        for line in _work_lines(rows) + _carbon_lines(rows, self.options["grid_g_per_kwh"]):
            console.print(line)
        if self.options["windows"] and not result.windows.empty:
            primary = list(result.run_meta.primary_channels)
            console.print(windows_table(result.windows, self.options["all_channels"], primary))
        self._ending(console, result, run_dir)

    def _summary(self, console: Console, result: RunResult, rows: Sequence[PhaseSummary]) -> None:
        """The summary table (fit to the console unless ``wide``), then how close each phase came
        to the precision the run asked for."""
        if rows:
            console.print(summary_table(rows, wide=self.options["wide"] or console.width >= PIPE_WIDTH))
        else:
            console.print("no phase summaries (no window finished)")
        precision = (result.meta.get("config") or {}).get("precision_pct")
        if precision:
            for line in precision_lines(rows, float(precision)):
                console.print(cell_text(line))

    def _ending(self, console: Console, result: RunResult, run_dir: Path | None) -> None:
        """The warnings, whether the run is incomplete, and where it was saved (unless the facts
        said so first)."""
        for warning in result.warnings:
            console.print(f"[yellow]warning:[/yellow] {cell_text(warning)}")
        if not result.complete:
            console.print(f"[red]run incomplete:[/red] {cell_text(str(result.reason))}")
        if run_dir is not None and not self.options["facts"]:
            console.print(cell_text(f"saved in {run_dir}"))

    @staticmethod
    def _facts(console: Console, result: RunResult, run_dir: Path | None) -> None:
        lines = [*_what_ran(result, run_dir), *_how_it_ended(result), *time_lines(result.run_meta.timings_s)]
        if result.windows_origin:
            lines.append(f"windows:  {len(result.windows)} rows rebuilt from {result.windows_origin}")
        for line in lines:
            console.print(cell_text(line), soft_wrap=True)


def _what_ran(result: RunResult, run_dir: Path | None) -> list[str]:
    """``show``'s first facts: the run directory, status, workload, power sources (with what
    sampling cost), start and end."""
    meta = result.run_meta
    lines = [f"run:      {run_dir}"] if run_dir is not None else []
    status = result.status + (f" ({result.reason})" if result.reason else "")
    lines.append(f"status:   {status}")
    if meta.workload is not None:
        lines.append(f"workload: {meta.workload.name} {dict(meta.workload.options)}")
    sources = ", ".join(s.name + _sampler_cost(s.info) for s in meta.sources)
    lines.append(f"power:    {sources or 'none (timing only)'}")
    lines.append(f"started:  {meta.started_at}   ended: {meta.ended_at or '-'}")
    return lines


def _how_it_ended(result: RunResult) -> list[str]:
    """The measured command's exit code, and samples recovered from a journal by a run that did
    not finish."""
    lines = []
    if result.run_meta.exit_code is not None:
        lines.append(f"exit code of the measured command: {result.run_meta.exit_code}")
    origin = result.samples_origin
    if origin and origin != "samples.parquet":
        lines.append(f"samples:  {len(result.samples)} recovered from {origin} (the run did not finish)")
    return lines


def _work_lines(rows: Sequence[PhaseSummary]) -> list[str]:
    """Energy per unit of work and work per second, for each phase on a channel that declared
    its work."""
    lines = []
    for s in rows:
        energy, time_s = s.energy_per_iter_j.median, s.time_per_iter_s.median
        for unit, amount in s.work.items():
            if amount and s.channel:
                lines.append(
                    cell_text(f"{s.phase} [{s.channel}]: {energy / amount:.4g} J/{singular(unit)}, ")
                    + cell_text(f"{amount / time_s:.4g} {unit}/s")
                )
    return lines


def _carbon_lines(rows: Sequence[PhaseSummary], grid_g_per_kwh: float | None) -> list[str]:
    """CO2e per iteration of each phase on a channel with energy, at the grid intensity the user
    gave (none without one: it is never guessed). Units: g/kWh."""
    if grid_g_per_kwh is None:
        return []
    lines = []
    for s in rows:
        if s.channel and s.energy_per_iter_j.n:
            grams = s.energy_per_iter_j.median / 3.6e6 * grid_g_per_kwh
            lines.append(
                cell_text(f"{s.phase} [{s.channel}]: {grams:.4g} g CO2e per iteration at {grid_g_per_kwh:g} g/kWh")
            )
    return lines


#: the spans of run.json's ``timings_s`` that are the work itself: the measured windows, and what
#: the workload does to prepare and release them (it would do so without a meter too); every other
#: span is what measuring added
WORK_SPANS = ("windows", "setup", "phase_setup", "teardown")
#: ``timings_s`` keys that are totals, not spans
TOTALS = ("run", "process", "before_run")
#: spans shorter than this are summed into "the rest". Units: s.
SHORT_SPAN_S = 0.05


def time_lines(timings: Mapping[str, Any]) -> list[str]:
    """``show``'s account of a run's wall time from run.json's ``timings_s``: the total, split
    into the work, what measuring added around it and the process's start-up (interpreter,
    imports: ``before_run``), each with its spans, longest first; the parts add up to the total.
    """
    if not timings.get("run"):
        return []
    spans = _spans(timings)
    startup = _startup_s(timings)
    total = float(timings["run"]) + startup
    work, work_parts = _span_group(spans, [k for k in spans if k in WORK_SPANS])
    added, added_parts = _span_group(spans, [k for k in spans if k not in WORK_SPANS])
    line = f"time:     {total:.1f} s = work {work:.1f} s" + _in_parentheses(work_parts)
    line += f" + measuring {added:.1f} s" + _in_parentheses(added_parts)
    if startup:
        line += f" + start-up {startup:.1f} s"
    beyond = added + startup
    share = f" ({100 * beyond / total:.0f} % of the run)" if total > 0 else ""
    return [line, f"beyond the work: {beyond:.1f} s{share}"]


def _spans(timings: Mapping[str, Any]) -> dict[str, float]:
    """The spans of ``timings_s`` (its durations, not its totals), with ``other``: what the run's
    total leaves unlisted. Units: s."""
    spans = {k: float(v) for k, v in timings.items() if k not in TOTALS and isinstance(v, (int, float)) and v >= 0}
    unlisted = float(timings["run"]) - sum(spans.values())
    if unlisted > 0.0 and "other" not in spans:  # a run.json written before "other" was kept
        spans["other"] = unlisted
    return spans


def _startup_s(timings: Mapping[str, Any]) -> float:
    """The process's start-up before the run, counted only where the process's total is known.
    Units: s."""
    startup = timings.get("before_run")
    return float(startup) if isinstance(startup, (int, float)) and timings.get("process") else 0.0


def _span_group(spans: Mapping[str, float], names: list[str]) -> tuple[float, str]:
    """The total of the spans ``names``, and their text: the spans of ``SHORT_SPAN_S`` or more,
    longest first, then the rest summed. Units: s."""
    shown = sorted(((k, spans[k]) for k in names if spans[k] >= SHORT_SPAN_S), key=lambda kv: -kv[1])
    rest = sum(spans[k] for k in names) - sum(v for _, v in shown)
    parts = [f"{k} {v:.1f} s" for k, v in shown] + ([f"the rest {rest:.1f} s"] if rest >= 0.05 else [])
    return sum(spans[k] for k in names), ", ".join(parts)


def _in_parentheses(text: str) -> str:
    """`` (text)``, or nothing for no text."""
    return f" ({text})" if text else ""


def _sampler_cost(info: Mapping[str, Any]) -> str:
    """`` (sampler: 3.1 % of a core)`` for a source that reported what acquiring cost."""
    cost = info.get("acquisition") if isinstance(info, Mapping) else None
    share = cost.get("cpu_share") if isinstance(cost, Mapping) else None
    if not isinstance(share, (int, float)):
        return ""
    return f" (sampler: {100 * share:.1f} % of a core)"
