"""Plugin discovery through entry points. The only module that imports stevedore.

Here so tests can override: a test may install a package or put a ``*.dist-info`` folder on
``sys.path`` and the real discovery below finds it.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stevedore import DriverManager, ExtensionManager
from stevedore.exception import MultipleMatches, NoMatches

from .errors import PluginLoadError, PluginNotFoundError, UsageError
from .interfaces import Plugin, PowerSource, Reporter, Workload
from .options import Spec, parse_spec

POWER = "power"
WORKLOADS = "workloads"
REPORTERS = "reporters"
#: entry points of this group are functions ``register(cli: click.Group) -> None`` that add
#: commands to ``energyframe`` (simonw/llm's ``register_commands`` hook, without pluggy)
COMMANDS_GROUP = "energyframe.commands"
GROUPS = {
    POWER: "energyframe.power",
    WORKLOADS: "energyframe.workloads",
    REPORTERS: "energyframe.reporters",
}
LABELS = {POWER: "power source", WORKLOADS: "workload", REPORTERS: "reporter"}
BASES: dict[str, type] = {POWER: PowerSource, WORKLOADS: Workload, REPORTERS: Reporter}


@dataclass(frozen=True)
class PluginEntry:
    """A registered plugin, loaded or not. ``error`` says why it failed to import."""

    kind: str
    name: str
    target: str
    distribution: str | None
    version: str | None
    cls: type | None = None
    error: str | None = None


def refresh() -> None:
    """Forget the entry points stevedore cached in this process (after installing a plugin)."""
    ExtensionManager.ENTRY_POINT_CACHE.clear()


def _entry_points(kind: str) -> list[md.EntryPoint]:
    return list(md.entry_points(group=GROUPS[kind]))


def names(kind: str) -> list[str]:
    """Registered names of one kind, without importing any plugin."""
    return sorted({ep.name for ep in _entry_points(kind)})


def _dist(ep: md.EntryPoint) -> tuple[str | None, str | None]:
    """The distribution that registers ``ep`` (stevedore's cached entry points lack it)."""
    for candidate in _entry_points_by_name(ep.group, ep.name):
        dist = getattr(candidate, "dist", None)
        if dist is not None and candidate.value == ep.value:
            return dist.metadata["Name"], dist.version
    return None, None


def _entry_points_by_name(group: str, name: str) -> list[md.EntryPoint]:
    return [ep for ep in md.entry_points(group=group) if ep.name == name]


def _describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def load(kind: str, name: str) -> type:
    """Import the plugin class registered as ``name``.

    Raises:
        PluginNotFoundError: no such name; the message lists the available ones.
        PluginLoadError: the plugin's module failed to import, or two packages claim the name.
    """
    available = names(kind)
    if name not in available:
        listing = ", ".join(available) or "(none installed)"
        raise PluginNotFoundError(f"unknown {LABELS[kind]} {name!r}. Available: {listing}")

    def failed(_manager: Any, ep: md.EntryPoint, error: BaseException) -> None:
        raise PluginLoadError(
            f"{LABELS[kind]} {ep.name!r} ({ep.value}) failed to load: {_describe_error(error)}"
        ) from error

    try:
        manager = DriverManager(GROUPS[kind], name, invoke_on_load=False, on_load_failure_callback=failed)
    except MultipleMatches as e:
        owners = ", ".join(f"{ep.value}" for ep in _entry_points(kind) if ep.name == name)
        raise PluginLoadError(f"several packages register {LABELS[kind]} {name!r}: {owners}") from e
    except NoMatches as e:  # registered but vanished between listing and loading
        raise PluginNotFoundError(f"unknown {LABELS[kind]} {name!r}") from e
    cls = manager.driver
    if not (isinstance(cls, type) and issubclass(cls, BASES[kind])):
        raise PluginLoadError(
            f"{LABELS[kind]} {name!r} ({manager.extensions[0].entry_point.value}) is not a "
            f"{BASES[kind].__name__} subclass"
        )
    return cls


def entries(kind: str) -> list[PluginEntry]:
    """Every registered plugin of one kind, imported; failures are kept with their reason."""
    failures: dict[str, PluginEntry] = {}

    def failed(_manager: Any, ep: md.EntryPoint, error: BaseException) -> None:
        dist, version = _dist(ep)
        failures[ep.name] = PluginEntry(kind, ep.name, ep.value, dist, version, None, _describe_error(error))

    manager = ExtensionManager(GROUPS[kind], invoke_on_load=False, on_load_failure_callback=failed)
    out = []
    for ext in manager.extensions:
        dist, version = _dist(ext.entry_point)
        error = None
        if not (isinstance(ext.plugin, type) and issubclass(ext.plugin, BASES[kind])):
            error = f"not a {BASES[kind].__name__} subclass"
        out.append(PluginEntry(kind, ext.name, ext.entry_point.value, dist, version, ext.plugin, error))
    out.extend(failures.values())
    return sorted(out, key=lambda e: e.name)


def create(kind: str, spec: str | Spec | Plugin) -> Plugin:
    """A plugin instance from a spec string, a parsed ``Spec``, or an instance (returned as is)."""
    if isinstance(spec, Plugin):
        if not isinstance(spec, BASES[kind]):
            raise UsageError(f"{spec!r} is not a {BASES[kind].__name__}")
        return spec
    if isinstance(spec, str):
        spec = parse_spec(spec)
    cls = load(kind, spec.name)
    return cls(name=spec.name, **dict(spec.options))


def command_hooks() -> list[tuple[str, Any, str | None]]:
    """The registered command hooks as ``(name, register function or None, load error)``."""
    failures: list[tuple[str, Any, str | None]] = []

    def failed(_manager: Any, ep: md.EntryPoint, error: BaseException) -> None:
        failures.append((ep.name, None, f"{ep.value}: {_describe_error(error)}"))

    manager = ExtensionManager(COMMANDS_GROUP, invoke_on_load=False, on_load_failure_callback=failed)
    hooks: list[tuple[str, Any, str | None]] = []
    for ext in manager.extensions:
        if callable(ext.plugin):
            hooks.append((ext.name, ext.plugin, None))
        else:
            hooks.append((ext.name, None, f"{ext.entry_point.value} is not a function"))
    return sorted(hooks + failures, key=lambda h: h[0])


def power_from_cli(values: Sequence[str]) -> str | list[str] | None:
    """What repeated ``--power SPEC`` options mean: none given is ``"auto"``, ``none`` is timing
    only, anything else a list of specs (checked later, against the registered sources)."""
    if not values:
        return "auto"
    if any(v.strip().lower() == "none" for v in values):
        if len(values) > 1:
            raise UsageError("--power none cannot be combined with other power sources")
        return None
    return list(values)


def create_all(kind: str, specs: Sequence[str | Spec | Plugin]) -> list[Plugin]:
    plugins = [create(kind, s) for s in specs]
    seen: set[str] = set()
    for plugin in plugins:
        if plugin.name in seen and kind == POWER:
            # two sources of one name would write the same channels; give them distinct names
            index = 2
            while f"{plugin.name}{index}" in seen:
                index += 1
            plugin.name = f"{plugin.name}{index}"
        seen.add(plugin.name)
    return plugins
