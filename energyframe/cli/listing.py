"""``energyframe list``: installed plugins by kind, their options as users type them, and
which failed to load (a broken plugin is shown, never hidden)."""

from __future__ import annotations

import click

CONTEXT = {"help_option_names": ["-h", "--help"]}
KINDS = ["power", "workloads", "reporters", "commands"]


@click.command("list", context_settings=CONTEXT)
@click.argument("kind", required=False, type=click.Choice(KINDS))
def list_plugins(kind: str | None) -> None:
    """List installed plugins by kind, with version, options and load errors."""
    from ..kit import registry

    kinds = [kind] if kind else KINDS
    for k in kinds:
        if k == "commands":
            _list_commands()
            continue
        click.secho(f"{registry.LABELS[k]}s ({registry.GROUPS[k]}):", bold=True)
        entries = registry.entries(k)
        if not entries:
            click.echo("  (none installed)")
        shared = {e.name for e in entries if sum(o.name == e.name for o in entries) > 1}
        for entry in entries:
            where = f"{entry.distribution} {entry.version}" if entry.distribution else entry.target
            if entry.error or entry.cls is None:
                click.echo(f"  {entry.name}  [{where}]  ", nl=False)
                click.secho(f"FAILED TO LOAD: {entry.error}", fg="red")
                continue
            name = f"{entry.name}@{entry.distribution}" if entry.name in shared and entry.distribution else entry.name
            click.echo(f"  {name}  [{where}]  {entry.cls.DESCRIPTION}")
            if k == registry.POWER:
                priority = getattr(entry.cls, "AUTO_PRIORITY", None)
                click.echo(
                    "      auto-detected: "
                    + ("never (needs options)" if priority is None else f"yes, priority {priority}")
                )
            for option in entry.cls.OPTIONS:
                click.echo(
                    f"      {option.name} ({option.describe_type()}, {option.describe_default()}): {option.help}"
                )


def _list_commands() -> None:
    """Each command hook with the commands it adds (``compare`` adds ``compare`` and ``report``),
    found by registering it on a group of its own."""
    from ..kit import registry

    click.secho(f"commands ({registry.COMMANDS_GROUP}):", bold=True)
    hooks = registry.command_hooks()
    if not hooks:
        click.echo("  (none installed)")
    for name, hook, error in hooks:
        added: list[str] = []
        if error is None:
            probe = click.Group()
            try:
                hook(probe)
                added = sorted(probe.commands)
            except Exception as e:  # a third party's bug, shown as `energyframe` shows it at start
                error = f"{type(e).__name__}: {e}"
        if error is not None:
            click.echo(f"  {name}  ", nl=False)
            click.secho(f"FAILED TO LOAD: {error}", fg="red")
        else:
            click.echo(f"  {name}  [{hook.__module__}]  adds: {', '.join(added) or '(nothing)'}")
