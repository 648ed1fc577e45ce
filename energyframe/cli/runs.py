"""``energyframe runs``: every run saved under a folder, one row per run, phase and channel
(the table ``ef.load_runs`` returns)."""

from __future__ import annotations

import math
from pathlib import Path

import click

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.command(context_settings=CONTEXT)
@click.argument("folder", type=click.Path(path_type=Path), default=Path("runs"), required=False)
@click.option("--csv", "as_csv", is_flag=True, help="Write the table as CSV on stdout instead.")
def runs(folder: Path, as_csv: bool) -> None:
    """List the runs saved under FOLDER (default: runs/)."""
    from rich.console import Console
    from rich.table import Table

    from ..offline.runs import load_runs
    from ..results.display import si

    table = load_runs(folder)
    if as_csv:
        click.echo(table.to_csv(index=False), nl=False)
        return
    if table.empty:
        click.echo(f"no runs under {folder}")
        return
    shown = Table(title=f"runs under {folder}")
    for column in ("run", "status", "workload", "device", "phase", "channel", "trials", "time/iter", "energy/iter"):
        shown.add_column(column, justify="right" if column in ("trials", "time/iter", "energy/iter") else "left")
    for row in table.itertuples(index=False):
        shown.add_row(
            row.run,
            row.status if row.status == "complete" else f"{row.status}: {row.reason or ''}",
            str(row.workload or "-"),
            str(row.device or "-"),
            str(row.phase or "-"),
            str(row.channel or "-"),
            "-" if _missing(row.trials) else str(int(row.trials)),
            "-" if _missing(row.time_per_iter_s) else si(row.time_per_iter_s, "s"),
            "-" if _missing(row.energy_per_iter_j) else si(row.energy_per_iter_j, "J"),
        )
    Console(width=max(100, Console().width)).print(shown)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook."""
    cli.add_command(runs)
