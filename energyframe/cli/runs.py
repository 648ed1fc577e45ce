"""``energyframe runs``: every run saved under a folder, one row per run, phase and channel
(the table ``ef.load_runs`` returns)."""

from __future__ import annotations

import math
from pathlib import Path

import click

CONTEXT = {"help_option_names": ["-h", "--help"]}


#: a pipe or a file gets the table at its natural width: no value cut to fit 80 columns
PIPE_WIDTH = 1000


@click.command(context_settings=CONTEXT)
@click.argument("folder", type=click.Path(path_type=Path), default=Path("runs"), required=False)
@click.option("--csv", "as_csv", is_flag=True, help="Write the table as CSV on stdout instead.")
def runs(folder: Path, as_csv: bool) -> None:
    """List the runs saved under FOLDER (default: runs/)."""
    from rich.console import Console

    from ..offline.runs import load_runs
    from ..results.display import printable

    table = load_runs(folder)
    if as_csv:
        click.echo(printable(table.to_csv(index=False), lines=True), nl=False)
        return
    if table.empty:
        click.echo(f"no runs under {printable(folder)}")
        return
    console = Console()
    Console(width=console.width if console.is_terminal else PIPE_WIDTH).print(_runs_table(table, folder))


#: the columns of the table, and which of them hold figures (right-aligned)
COLUMNS = (
    ("run", False),
    ("status", False),
    ("workload", False),
    ("device", False),
    ("phase", False),
    ("channel", False),
    ("trials", True),
    ("time/iter", True),
    ("energy/iter", True),
)


def _runs_table(table, folder: Path):
    """``load_runs``'s table for people: a row per run, phase and channel."""
    from rich.table import Table

    from ..results.display import cell_text

    shown = Table(title=cell_text(f"runs under {folder}"), title_justify="left")
    for column, figure in COLUMNS:
        shown.add_column(column, justify="right" if figure else "left", overflow="fold")
    for row in table.itertuples(index=False):
        shown.add_row(*_row_cells(row))
    return shown


def _row_cells(row) -> list[str]:
    """One row's cells: its status with the reason when it is not complete, ``-`` for what the
    run did not record."""
    from ..results.display import cell_text, si

    status = row.status if row.status == "complete" else f"{row.status}: {_text(row.reason, '')}"
    return [
        cell_text(row.run),
        cell_text(status),
        *(cell_text(_text(value)) for value in (row.workload, row.device, row.phase, row.channel)),
        "-" if _missing(row.trials) else str(int(row.trials)),
        "-" if _missing(row.time_per_iter_s) else si(row.time_per_iter_s, "s"),
        "-" if _missing(row.energy_per_iter_j) else si(row.energy_per_iter_j, "J"),
    ]


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _text(value, missing: str = "-") -> str:
    """A text cell: ``missing`` for a value the run did not record (None or NaN), never ``nan``."""
    return missing if _missing(value) or value == "" else str(value)


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook."""
    cli.add_command(runs)
