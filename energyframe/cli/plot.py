"""``energyframe plot``: a saved run's power trace as a PNG."""

from __future__ import annotations

from pathlib import Path

import click

from ..results.paths import click_out_path
from .params import checked_path

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click_out_path(dir_okay=False),
    callback=checked_path,
    help="PNG to write. Default: RUN_DIR/power-trace.png.",
)
@click.option("--primary-only", is_flag=True, help="Only the primary channels.")
def plot(run_dir: Path, out: Path | None, primary_only: bool) -> None:
    """Draw a saved run's power trace: every channel, windows shaded, meter lags shown."""
    from ..report.plots import power_trace
    from ..results.result import load_run

    result = load_run(run_dir)
    path = power_trace(result, out or run_dir / "power-trace.png", all_channels=not primary_only)
    click.echo(f"wrote {path}")


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook."""
    cli.add_command(plot)
