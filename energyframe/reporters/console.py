"""``console``: the summary table, the run's status, warnings and where it was saved."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..display import derived_table, summary_table
from ..interfaces import Reporter
from ..options import Option
from ..results import RunResult


class ConsoleReporter(Reporter):
    """Prints a rich table: phase, time/iter, energy/iter, mean power, spread, trials."""

    DESCRIPTION = "print the summary table (phase, time/iter, energy/iter, power, spread, trials)"
    OPTIONS = (
        Option("all_channels", "bool", False, "also show secondary channels (e.g. 1-s average power)"),
    )

    def __init__(self, name: str | None = None, console: Console | None = None, **options) -> None:
        super().__init__(name, **options)
        self.console = console

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        # a pipe or a file gets a wide table rather than rich's 80 columns
        console = self.console or Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
        rows = list(result.summaries) if self.options["all_channels"] else result.primary_summaries()
        console.print(summary_table(rows))
        for table in result.derived:
            console.print(derived_table(table))
        for s in rows:
            for unit, amount in s.work.items():
                energy, time_s = s.energy_per_iter_j.median, s.time_per_iter_s.median
                if amount and s.channel:
                    console.print(
                        escape(f"{s.phase} [{s.channel}]: {energy / amount:.4g} J/{unit}, ")
                        + escape(f"{amount / time_s:.4g} {unit}/s")
                    )
        for warning in result.warnings:
            console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
        if not result.complete:
            console.print(f"[red]run incomplete:[/red] {escape(str(result.reason))}")
        if run_dir is not None:
            console.print(escape(f"saved in {run_dir}"))
