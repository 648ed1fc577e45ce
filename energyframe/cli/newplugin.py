"""``energyframe new-plugin NAME --kind power|workload|reporter``: a plugin package to start from."""

from __future__ import annotations

from pathlib import Path

import click

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.command("new-plugin", context_settings=CONTEXT)
@click.argument("name")
@click.option(
    "--kind", type=click.Choice(["power", "workload", "reporter"]), required=True, help="The kind of plugin."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),  # a str: click would turn "" into the current directory
    default=".",
    show_default=True,
    help="Where to write the package folder energyframe-NAME.",
)
def new_plugin(name: str, kind: str, out: str) -> None:
    """Write a plugin package: its module, the entry point, and tests that use the plugin kit.

    \b
    energyframe new-plugin hwmon-gpu --kind power
    cd energyframe-hwmon-gpu && pip install -e . && python -m pytest tests
    """
    from ..errors import UsageError
    from ..kit.scaffold import write_plugin

    if out.strip() == "":
        raise UsageError("--out is empty; give a folder for the package")
    folder, files = write_plugin(name, kind, Path(out))
    click.echo(f"wrote {folder}:")
    for path in files:
        click.echo(f"  {path.relative_to(folder)}")
    click.echo(f"next: pip install -e {folder} && python -m pytest {folder / 'tests'}; `energyframe list` shows {name}")


def register_commands(cli: click.Group) -> None:
    cli.add_command(new_plugin)
