"""``energyframe show``: a saved run, printed by the console reporter (the same table a run
prints when it ends), with its facts; a run that died is rebuilt from its journals."""

from __future__ import annotations

from pathlib import Path

import click

from .params import FiniteFloat

#: ``--grid-intensity``, shared by ``show`` and ``run``
grid_intensity_option = click.option(
    "--grid-intensity",
    type=FiniteFloat(min=0, max=5000),
    default=None,
    metavar="G_PER_KWH",
    help="Also show CO2e per iteration at this grid carbon intensity (g/kWh; never guessed).",
)

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--all-channels", is_flag=True, help="Also show secondary channels.")
@click.option("--windows", "show_windows", is_flag=True, help="Also print every window.")
@click.option("--wide", is_flag=True, help="Every column on its own (default: fit the terminal).")
@grid_intensity_option
def show(run_dir: Path, all_channels: bool, show_windows: bool, wide: bool, grid_intensity: float | None) -> None:
    """Print a saved run."""
    from ..reporters.console import ConsoleReporter
    from ..results.result import load_run

    result = load_run(run_dir)
    reporter = ConsoleReporter(
        all_channels=all_channels, windows=show_windows, wide=wide, facts=True, grid_g_per_kwh=grid_intensity
    )
    reporter.report(result, run_dir)
