"""Plugin discovery through entry points, and turning specs into plugins. The only module that
imports stevedore.

Here so tests can override: a test may install a package or put a ``*.dist-info`` folder on
``sys.path`` and the real discovery below finds it. Power sources are resolved here too: a
``--power`` value, ``"auto"`` (detection) or specs become started-able ``PowerSource``s.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import inspect
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stevedore import DriverManager, ExtensionManager
from stevedore.exception import NoMatches

from ..errors import PluginLoadError, PluginNotFoundError, UsageError
from ..options import Spec, parse_spec, resolve_options
from ..results.provenance import _named_distribution, _packages_distributions, entry_point_distribution
from .contract import Plugin, PowerSource, Reporter, Workload

log = logging.getLogger("energyframe")

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
BASES: dict[str, type[Plugin]] = {POWER: PowerSource, WORKLOADS: Workload, REPORTERS: Reporter}


@dataclass(frozen=True)
class PluginEntry:
    """A registered plugin, loaded or not. ``error`` says why it failed to import."""

    kind: str
    name: str
    target: str
    distribution: str | None
    version: str | None
    cls: type[Plugin] | None = None
    error: str | None = None


def refresh() -> None:
    """Forget the entry points stevedore cached in this process (after installing a plugin)."""
    ExtensionManager.ENTRY_POINT_CACHE.clear()
    _packages_distributions.cache_clear()
    _named_distribution.cache_clear()


def _entry_points(kind: str) -> list[md.EntryPoint]:
    return list(md.entry_points(group=GROUPS[kind]))


def names(kind: str) -> list[str]:
    """Registered names of one kind, without importing any plugin."""
    return sorted({ep.name for ep in _entry_points(kind)})


#: how alike a typed name and a registered one must be to be suggested (difflib's ratio)
SUGGEST_CUTOFF = 0.6


def suggestions(name: str, candidates: Sequence[str]) -> list[str]:
    """The registered names closest to a mistyped ``name``, closest first (at most three)."""
    return difflib.get_close_matches(name, list(candidates), n=3, cutoff=SUGGEST_CUTOFF)


def unknown_message(kind: str, name: str) -> str:
    """``unknown workload 'resnet'. Did you mean 'resnet50' or 'resnet18'? Available: ...``: the
    closest names first, then every registered one."""
    available = names(kind)
    close = suggestions(name, available)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {LABELS[kind]} {name!r}.{hint} Available: {', '.join(available) or '(none installed)'}"


def _describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _normalized(distribution: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _distribution(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is not None:
        return str(dist.metadata["Name"])
    name, _version = entry_point_distribution(ep)
    return name or ep.value.split(":")[0].split(".")[0]


def qualified(name: str, ep: md.EntryPoint) -> str:
    """``name@distribution``: the name that picks one package's plugin when several register
    ``name``."""
    return f"{name}@{_distribution(ep)}"


_WARNED: set[tuple[str, str]] = set()


def _chosen(kind: str, name: str, eps: list[md.EntryPoint]) -> md.EntryPoint:
    """Of several packages registering ``name``: the one that is not energyframe itself, with a
    warning (a plugin a user installed was there first, and their runs keep meaning it);
    between several other packages no choice is right, and the user must qualify the name."""
    others = [ep for ep in eps if _normalized(_distribution(ep)) != "energyframe"]
    choices = ", ".join(sorted(qualified(name, ep) for ep in eps))
    if len(others) != 1:
        raise UsageError(f"several packages register {LABELS[kind]} {name!r}; choose one: {choices}")
    if (kind, name) not in _WARNED:
        _WARNED.add((kind, name))
        log.warning(
            "warning: %s %r is registered by several packages (%s); using %s (say %s for another)",
            LABELS[kind],
            name,
            ", ".join(_distribution(ep) for ep in eps),
            qualified(name, others[0]),
            " or ".join(qualified(name, ep) for ep in eps if ep is not others[0]),
        )
    return others[0]


def load(kind: str, name: str) -> type[Plugin]:
    """Import the plugin class registered as ``name``, or ``name@distribution`` to pick one
    package's when several register the name.

    Raises:
        PluginNotFoundError: no such name; the message lists the available ones.
        PluginLoadError: the plugin's module failed to import.
        UsageError: several packages other than energyframe register the name.
    """
    short, _, wanted = name.partition("@")
    registered = [ep for ep in _entry_points(kind) if ep.name == short]
    eps = list({ep.value: ep for ep in registered}.values())  # one target registered twice is one plugin
    if not eps:
        raise PluginNotFoundError(unknown_message(kind, short))
    if wanted:
        eps = _of_distribution(kind, short, eps, wanted)
    cls = _imported(kind, short, registered, eps)
    if not (isinstance(cls, type) and issubclass(cls, BASES[kind])):
        raise PluginLoadError(f"{LABELS[kind]} {short!r} ({eps[0].value}) is not a {BASES[kind].__name__} subclass")
    return cls


def _of_distribution(kind: str, name: str, eps: list[md.EntryPoint], wanted: str) -> list[md.EntryPoint]:
    """The entry points of ``name`` that the distribution ``wanted`` registers (``name@wanted``).

    Raises:
        PluginNotFoundError: it registers none; the message lists who does.
    """
    picked = [ep for ep in eps if _normalized(_distribution(ep)) == _normalized(wanted)]
    if not picked:
        listing = ", ".join(sorted(qualified(name, ep) for ep in eps))
        raise PluginNotFoundError(
            f"no package {wanted!r} registers {LABELS[kind]} {name!r}; registered: {listing}"
        )
    return picked


def _imported(kind: str, name: str, registered: list[md.EntryPoint], eps: list[md.EntryPoint]) -> Any:
    """The plugin's class: through stevedore when one entry point has the name, else the one
    entry point picked or chosen among several (``_chosen``)."""
    if len(registered) == 1:
        return _driver(kind, name)
    return _load_entry_point(kind, eps[0] if len(eps) == 1 else _chosen(kind, name, eps))


def _driver(kind: str, name: str) -> Any:
    """The one plugin registered as ``name``, loaded through stevedore."""

    def failed(_manager: Any, ep: md.EntryPoint, error: BaseException) -> None:
        raise PluginLoadError(
            f"{LABELS[kind]} {ep.name!r} ({ep.value}) failed to load: {_describe_error(error)}"
        ) from error

    try:
        manager = DriverManager(GROUPS[kind], name, invoke_on_load=False, on_load_failure_callback=failed)
    except NoMatches as e:  # registered but vanished between listing and loading
        raise PluginNotFoundError(f"unknown {LABELS[kind]} {name!r}") from e
    return manager.driver


def _load_entry_point(kind: str, ep: md.EntryPoint) -> Any:
    """One of several entry points sharing a name (stevedore loads by name only)."""
    try:
        return ep.load()
    except Exception as e:
        raise PluginLoadError(
            f"{LABELS[kind]} {ep.name!r} ({ep.value}) failed to load: {_describe_error(e)}"
        ) from e


def entries(kind: str) -> list[PluginEntry]:
    """Every registered plugin of one kind, imported; failures are kept with their reason."""
    failures: dict[str, PluginEntry] = {}

    def failed(_manager: Any, ep: md.EntryPoint, error: BaseException) -> None:
        dist, version = entry_point_distribution(ep)
        failures[ep.name] = PluginEntry(kind, ep.name, ep.value, dist, version, None, _describe_error(error))

    manager = ExtensionManager(GROUPS[kind], invoke_on_load=False, on_load_failure_callback=failed)
    out = []
    for ext in manager.extensions:
        dist, version = entry_point_distribution(ext.entry_point)
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
    options = dict(spec.options)
    short = spec.name.partition("@")[0]
    if any(o.name == "name" for o in cls.OPTIONS):
        _check_name_option(cls, f"{LABELS[kind]} {short!r}")
    elif "name" in options and not getattr(cls, "FORWARDS_OPTIONS", False):
        # not an option of this plugin: refuse it as the unknown key it is (not taken as its name);
        # a plugin that hands undeclared options on (per-layer, to its model) checks them there
        resolve_options(cls.OPTIONS, {"name": options["name"]}, f"{LABELS[kind]} {short!r}")
    # the name positionally: a plugin may declare an option called 'name' (torchvision:name=...)
    return cls(short, **options)


def name_option_problem(cls: type, owner: str) -> str | None:
    """Why a plugin's option called ``name`` would collide with the plugin's own name, or
    ``None`` when it cannot: the plugin declares no such option, or its constructor takes its own
    name positionally (``def __init__(self, name=None, /, **options)``, as ``Plugin`` does), so
    ``torchvision:name=convnext_tiny`` is the option."""
    if not any(getattr(o, "name", None) == "name" for o in getattr(cls, "OPTIONS", ())):
        return None
    try:
        parameter = inspect.signature(cls).parameters.get("name")
    except (TypeError, ValueError):  # no signature to read: let the call say what is wrong
        return None
    if parameter is None or parameter.kind == parameter.POSITIONAL_ONLY:
        return None
    return (
        f"{owner} declares an option called 'name', but its constructor takes its own name by keyword: "
        "its package must take it positionally (def __init__(self, name=None, /, **options)) or rename the option"
    )


def _check_name_option(cls: type, owner: str) -> None:
    """A plugin that declares an option called ``name`` must take its own name positionally, or
    the option would collide with it."""
    problem = name_option_problem(cls, owner)
    if problem is not None:
        raise PluginLoadError(problem)


def create_workload(spec: str | Spec | Workload) -> Workload:
    """``create(WORKLOADS, spec)``, typed as the workload it is."""
    workload = create(WORKLOADS, spec)
    assert isinstance(workload, Workload)  # create checks the class against the group's base
    return workload


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


def power_from_cli(values: Sequence[str]) -> str | list[str]:
    """What repeated ``--power SPEC`` options mean: none given is ``"auto"``, ``none`` is timing
    only, anything else a list of specs (checked later, against the registered sources)."""
    if not values:
        return "auto"
    if any(v.strip().lower() == "none" for v in values):
        if len(values) > 1:
            raise UsageError("--power none cannot be combined with other power sources")
        return "none"
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


PowerArg = str | Spec | PowerSource


def auto_power_sources() -> tuple[list[PowerSource], list[str]]:
    """The sources this machine has: per scope, the available one of highest priority.

    Every installed power plugin is imported to ask it; returns the chosen sources and one note
    per plugin saying whether it loaded, whether it is available here, and which was chosen.
    """
    best: dict[str, tuple[int, str, type[PowerSource]]] = {}
    notes = []
    for entry in entries(POWER):
        note, available = _detected(entry)
        notes.append(note)
        if available is None or available.AUTO_PRIORITY is None:
            continue
        priority, scope = available.AUTO_PRIORITY, available.AUTO_SCOPE.value
        if scope not in best or priority > best[scope][0]:
            best[scope] = (priority, entry.name, available)
    sources = [cls(name=name) for _, name, cls in sorted(best.values(), key=lambda b: b[1])]
    return sources, notes


def _detected(entry: PluginEntry) -> tuple[str, type[PowerSource] | None]:
    """What asking one installed power plugin found: a note, and its class when it is available
    here (``None`` where it failed to load, is never auto-detected, its detection raised, or it
    found nothing)."""
    cls = entry.cls
    if cls is None or entry.error or not issubclass(cls, PowerSource):
        return f"{entry.name}: failed to load ({entry.error})", None
    if getattr(cls, "AUTO_PRIORITY", None) is None:
        return f"{entry.name}: never auto-detected (needs options, e.g. a port or a file)", None
    try:
        found = cls.detect()
    except Exception as e:  # detection must never break a run
        return f"{entry.name}: detection failed ({type(e).__name__}: {e})", None
    note = f"{entry.name}: {'available' if found.available else 'not available'} ({found.reason})"
    return note, cls if found.available else None


def resolve_power(power: str | Sequence[PowerArg]) -> tuple[list[PowerSource], list[str]]:
    """``"auto"``: detect; ``"none"``: timing only; else specs or instances.

    Returns the sources (not started) and notes for run.json (what auto-detection found).

    Raises:
        UsageError: an unknown source or option, two sources that claim one device, or
            ``None`` or an empty list (timing only is said one way: ``"none"``).
    """
    if power == "auto":
        return _auto_detected()
    if isinstance(power, str) and power.strip().lower() == "none":
        return [], []
    if power is None or (not isinstance(power, (str, Spec, PowerSource)) and len(power) == 0):
        # one spelling of "timing only", the CLI's
        raise UsageError(f"power={power!r} names no power source; for timing only say power='none'")
    if isinstance(power, (str, Spec, PowerSource)):
        power = [power]
    sources = [s for s in create_all(POWER, list(power)) if isinstance(s, PowerSource)]
    check_exclusive(sources)
    return sources, []


def _auto_detected() -> tuple[list[PowerSource], list[str]]:
    """``power="auto"``: the detected sources, and notes that say what was found (logged: the
    reason nothing was, as a warning a notebook shows)."""
    sources, notes = auto_power_sources()
    chosen = ", ".join(s.name for s in sources) or "none (timing only)"
    notes = [f"power sources auto-detected: {chosen}", *notes]
    if sources:
        log.info(notes[0])
    else:  # a notebook shows warnings without any logging set-up: say why nothing was found
        log.warning("no power source found, measuring time only: %s", "; ".join(notes[1:]) or "none installed")
    for note in notes[1:]:
        log.debug("  %s", note)
    return sources, notes


def check_exclusive(sources: Sequence[PowerSource]) -> None:
    """Refuse two sources (or one source twice) claiming the same device: it would be counted twice.

    Raises:
        UsageError: naming the device and the sources that claim it.
    """
    owner: dict[str, str] = {}
    for source in sources:
        for resource in source.resources():
            if resource in owner:
                raise UsageError(
                    f"{resource} is claimed by power source {owner[resource]!r} and by {source.name!r}: "
                    "one device measured twice would be counted twice"
                )
            owner[resource] = source.name
