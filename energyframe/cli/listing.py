"""``energyframe list``: installed plugins by kind, their options as users type them, and
which failed to load (a broken plugin is shown, never hidden).

The human text is for people and may change; ``--json`` is the stable, machine-readable form
(``LIST_FORMAT``, docs/writing-plugins.md "What is stable").
"""

from __future__ import annotations

import json
from typing import Any

import click

CONTEXT = {"help_option_names": ["-h", "--help"]}
KINDS = ["power", "workloads", "reporters", "commands"]
#: the version of ``list --json``'s document; history:
#: 1 (2026-11-28): plugins (kind, group, name, qualified_name, target, distribution, version,
#:   loaded, error, description, auto_priority, options) and commands (name, target, loaded, error)
LIST_FORMAT = 1


@click.command("list", context_settings=CONTEXT)
@click.argument("kind", required=False, type=click.Choice(KINDS))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON document on stdout: every plugin, its options (type, default, help) and load errors. "
    "Stable for scripts and tests, unlike the text.",
)
def list_plugins(kind: str | None, as_json: bool) -> None:
    """List installed plugins by kind, with version, options and load errors."""
    kinds = [kind] if kind else KINDS
    if as_json:
        click.echo(json.dumps(list_document(kinds), indent=2, allow_nan=False))
        return
    for k in kinds:
        if k == "commands":
            _list_commands()
        else:
            _list_kind(k)


def _list_kind(k: str) -> None:
    from ..kit import registry
    from ..results.display import printable

    click.secho(f"{registry.LABELS[k]}s ({registry.GROUPS[k]}):", bold=True)
    entries = registry.entries(k)
    if not entries:
        click.echo("  (none installed)")
    shared = _shared_names(entries)
    for entry in entries:
        where = f"{entry.distribution} {entry.version}" if entry.distribution else entry.target
        if entry.error or entry.cls is None:
            click.echo(f"  {entry.name}  [{where}]  ", nl=False)
            click.secho(f"FAILED TO LOAD: {printable(entry.error)}", fg="red")
            continue
        click.echo(f"  {_qualified(entry, shared)}  [{where}]  {printable(entry.cls.DESCRIPTION)}")
        if k == registry.POWER:
            priority = getattr(entry.cls, "AUTO_PRIORITY", None)
            click.echo(
                "      auto-detected: " + ("never (needs options)" if priority is None else f"yes, priority {priority}")
            )
            fast = getattr(entry.cls, "FAST_POLLING", "")
            if fast:
                click.echo(f"      polls fast: {printable(fast)}")
        for option in entry.cls.OPTIONS:
            click.echo(
                f"      {option.name} ({option.describe_type()}, {option.describe_default()}): {printable(option.help)}"
            )


def _shared_names(entries: list) -> set[str]:
    """Names that more than one package registers (shown as ``name@package``)."""
    return {e.name for e in entries if sum(o.name == e.name for o in entries) > 1}


def _qualified(entry: Any, shared: set[str]) -> str:
    return f"{entry.name}@{entry.distribution}" if entry.name in shared and entry.distribution else entry.name


def _list_commands() -> None:
    """Each command hook with the commands it adds (``compare`` adds ``compare`` and ``report``),
    found by registering it on a group of its own."""
    from ..kit import registry
    from ..results.display import printable

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
            click.secho(f"FAILED TO LOAD: {printable(error)}", fg="red")
        else:
            click.echo(f"  {name}  [{hook.__module__}]  adds: {', '.join(added) or '(nothing)'}")


def list_document(kinds: list[str]) -> dict[str, Any]:
    """What ``energyframe list --json`` prints: every plugin of ``kinds`` (and the command hooks
    when ``commands`` is one of them), loaded or not, in the ``LIST_FORMAT`` document."""
    from ..kit import registry
    from ..results.store import json_safe
    from . import _version

    plugins: list[dict[str, Any]] = []
    for k in (k for k in kinds if k != "commands"):
        entries = registry.entries(k)
        shared = _shared_names(entries)
        plugins += [_plugin_record(k, entry, shared) for entry in entries]
    document: dict[str, Any] = {"format_version": LIST_FORMAT, "energyframe": _version(), "plugins": plugins}
    if "commands" in kinds:
        document["commands"] = [
            {
                "name": name,
                "target": f"{hook.__module__}:{hook.__qualname__}" if hook is not None else None,
                "loaded": error is None,
                "error": error,
            }
            for name, hook, error in registry.command_hooks()
        ]
    return json_safe(document)


def _plugin_record(kind: str, entry: Any, shared: set[str]) -> dict[str, Any]:
    from ..kit import registry

    loaded = entry.error is None and entry.cls is not None
    record: dict[str, Any] = {
        "kind": kind,
        "group": registry.GROUPS[kind],
        "name": entry.name,
        "qualified_name": _qualified(entry, shared),
        "target": entry.target,
        "distribution": entry.distribution,
        "version": entry.version,
        "loaded": loaded,
        "error": entry.error,
        "description": entry.cls.DESCRIPTION if loaded else None,
        "options": [_option_record(o) for o in entry.cls.OPTIONS] if loaded else [],
    }
    if kind == registry.POWER:
        record["auto_priority"] = getattr(entry.cls, "AUTO_PRIORITY", None) if loaded else None
        record["fast_polling"] = (getattr(entry.cls, "FAST_POLLING", "") or None) if loaded else None
    return record


def _option_record(option: Any) -> dict[str, Any]:
    """An option as a script reads it: its type and default as values, and as a user types them."""
    return {
        "name": option.name,
        "type": option.kind,
        "default": option.default,
        "default_text": option.describe_default(),
        "required": option.required,
        "choices": list(option.choices),
        "minimum": option.minimum,
        "min_items": option.min_items,
        "help": option.help,
    }
