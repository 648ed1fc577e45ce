"""run.json as a typed, frozen object: ``RunMeta`` and its sections (docs/result-format.md).

``RunMeta.from_json`` takes the mapping a ``run.json`` holds, brings a file of an earlier format
version up to this one (``update_to_2``, ...) and checks every field energyframe reads: a wrong
type is one ``MetaError`` naming the key, what was expected and what is there. ``to_json`` gives
the mapping back in the current format. Keys this version does not know (a plugin's own, or a
section's newer fields) are kept, so a file read and written again loses nothing: top-level ones
in ``RunMeta.extensions``, a section's own in its ``extra``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..core.clock import ClockModel
from ..core.summary import PhaseSummary
from ..model import Channel, DerivedTable, Quantity

# History of run.json's format (the run directory's; windows.csv and samples.parquet have kept
# their columns):
#   1 - 2026-11-22: first version. Sections were added under the same number as features came
#       (derived and config.min_window_periods; config.guard_s, sync_pulse, runs; the channels'
#       timing and averaging_s; rejected_samples; timings_s; alignment, distributed, fusion), so a
#       version-1 file may lack any of them.
#   2 - 2026-11-26: every section is written (an empty one as {} or [], a missing value as null),
#       and ``pid``, the process that ran the run, is a field (version 1 had it only inside the
#       reason "running (pid N)"). 2026-11-29: a channel says what shapes it between its ticks
#       (``shaped_by``) and what it is derived from (``derived_from``); a source whose channels
#       say neither (written before) is read with the relation energyframe then found by name
#       (``with_declared_shapes``).
FORMAT_VERSION = 2

COMPLETE = "complete"
INCOMPLETE = "incomplete"
#: a run that is going (or died) says so in its reason: "running (pid N); ..."
RUNNING_PREFIX = "running (pid "


class MetaError(ValueError):
    """A field of run.json is not what energyframe writes: ``where`` (``'status'``,
    ``sources[0].channels[1].quantity``) should be ``expected``."""

    def __init__(self, where: str, value: Any, expected: str) -> None:
        self.where, self.value, self.expected = where, value, expected
        shown = repr(where) if where.isidentifier() else where  # a top-level key is quoted
        super().__init__(f"{shown} should be {expected}, not {described(value)}")


class FormatVersionError(ValueError):
    """run.json's format version is newer than this energyframe's, or not a version at all."""


def described(value: Any) -> str:
    """A JSON value in a few words: ``a list``, ``a number (3)``, ``null``."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    kind = {str: "a string", bool: "a boolean"}.get(type(value), "a number")
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return f"{kind} ({text[:40]})"


# -- readers: one per JSON type; each returns the typed value or raises MetaError ---------------
Reader = Callable[[Any, str], Any]


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise MetaError(where, value, "a string")
    return value


def _optional(read: Reader, expected: str) -> Reader:
    def reader(value: Any, where: str) -> Any:
        if value is None:
            return None
        try:
            return read(value, where)
        except MetaError as e:
            if e.where != where:
                raise
            raise MetaError(where, value, f"{expected} or null") from None

    return reader


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MetaError(where, value, "a whole number")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetaError(where, value, "a number")
    return float(value)


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise MetaError(where, value, "true or false")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MetaError(where, value, "an object")
    return dict(value)


def _list_of(read: Reader) -> Reader:
    def reader(value: Any, where: str) -> tuple:
        if not isinstance(value, (list, tuple)):
            raise MetaError(where, value, "a list")
        return tuple(read(item, f"{where}[{i}]") for i, item in enumerate(value))

    return reader


def _map_of(read: Reader) -> Reader:
    def reader(value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise MetaError(where, value, "an object")
        return {str(k): read(v, f"{where}[{str(k)!r}]") for k, v in value.items()}

    return reader


_OPT_STRING = _optional(_string, "a string")
_OPT_WHOLE = _optional(_whole, "a whole number")
_OPT_NUMBER = _optional(_number, "a number")
_OPT_FLAG = _optional(_flag, "true or false")
_STRINGS = _list_of(_string)


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _plain(value: Any) -> Any:
    """A typed value back into JSON's types."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _field(read: Reader, default: Any = None, *, key: str | None = None, omit_none: bool = False,
           factory: Callable[[], Any] | None = None) -> Any:  # fmt: skip
    """A dataclass field read from JSON key ``key`` (its own name by default) with ``read``."""
    metadata = {"read": read, "key": key, "omit_none": omit_none}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


class _Section:
    """A part of run.json read field by field; keys it does not know are kept in ``extra``."""

    extra: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Any, where: str = ""):
        if not isinstance(data, Mapping):
            raise MetaError(where or "run.json", data, "an object")
        values: dict[str, Any] = {}
        known = set()
        for f in fields(cls):  # type: ignore[arg-type]
            if "read" not in f.metadata:
                continue
            key = f.metadata["key"] or f.name
            known.add(key)
            if key in data:
                values[f.name] = f.metadata["read"](data[key], _key(where, key))
        values["extra"] = {str(k): v for k, v in data.items() if k not in known}
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            if "read" not in f.metadata:
                continue
            value = getattr(self, f.name)
            if value is None and f.metadata["omit_none"]:
                continue
            out[f.metadata["key"] or f.name] = _plain(value)
        out.update(self.extra)
        return out


def _section(cls: type[_Section]) -> Reader:
    return lambda value, where: cls.from_json(value, where)


# -- sections -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClockRecord(_Section):
    """The run's (wall, monotonic) anchors and how far the wall clock moved. Units: s."""

    anchor_wall_s: float | None = _field(_OPT_NUMBER)
    anchor_monotonic_s: float | None = _field(_OPT_NUMBER)
    anchor_uncertainty_s: float | None = _field(_OPT_NUMBER, omit_none=True)
    end_wall_s: float | None = _field(_OPT_NUMBER, omit_none=True)
    end_monotonic_s: float | None = _field(_OPT_NUMBER, omit_none=True)
    wall_minus_monotonic_change_s: float | None = _field(_OPT_NUMBER, omit_none=True)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float | None:
        """From the anchor to the end, on the monotonic clock (None while unknown)."""
        if self.end_monotonic_s is None or self.anchor_monotonic_s is None:
            return None
        return self.end_monotonic_s - self.anchor_monotonic_s

    def model(self) -> ClockModel | None:
        """The clock model that maps the run's times (None without both anchors)."""
        if self.anchor_wall_s is None or self.anchor_monotonic_s is None:
            return None
        anchors = {"anchor_wall_s": self.anchor_wall_s, "anchor_monotonic_s": self.anchor_monotonic_s}
        anchors["anchor_uncertainty_s"] = self.anchor_uncertainty_s or 0.0
        if self.end_wall_s is not None and self.end_monotonic_s is not None:
            anchors.update(end_wall_s=self.end_wall_s, end_monotonic_s=self.end_monotonic_s)
        return ClockModel.from_json(anchors)


_QUANTITIES = tuple(q.value for q in Quantity)


def _channel(value: Any, where: str) -> Channel:
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        raise MetaError(where, value, "an object with a name")
    if value.get("quantity") not in _QUANTITIES:
        raise MetaError(f"{where}.quantity", value.get("quantity"), "energy, power or state")
    for key in ("resolution_s", "averaging_s"):
        _OPT_NUMBER(value.get(key), f"{where}.{key}")
    try:
        return Channel.from_json(value)
    except (TypeError, ValueError) as e:
        raise MetaError(where, value, f"a channel ({e})") from e


@dataclass(frozen=True)
class PluginRecord(_Section):
    """A plugin as the run used it: name, class, package and version, options, what it said."""

    name: str = _field(_string, "")
    class_name: str | None = _field(_OPT_STRING, key="class", omit_none=True)
    distribution: str | None = _field(_OPT_STRING, omit_none=True)
    version: str | None = _field(_OPT_STRING, omit_none=True)
    options: Mapping[str, Any] = _field(_object, factory=dict)
    info: Mapping[str, Any] | None = _field(_optional(_object, "an object"), omit_none=True)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceRecord(PluginRecord):
    """A power source as the run used it, with its channels (and, with several ranks, its rank);
    its ``info`` is always written."""

    info: Mapping[str, Any] = _field(_object, factory=dict)
    channels: tuple[Channel, ...] = _field(_list_of(_channel), factory=tuple)
    rank: int | None = _field(_OPT_WHOLE, omit_none=True)

    @classmethod
    def from_json(cls, data: Any, where: str = ""):
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
            raise MetaError(where, data, "an object with a name")
        if "channels" in data:
            data = {**data, "channels": with_declared_shapes(data["channels"])}
        return super().from_json(data, where)

    @property
    def gpus(self) -> list[Mapping[str, Any]]:
        """The GPUs this source measured, as its ``info`` describes them."""
        return [g for g in self.info.get("gpus") or [] if isinstance(g, Mapping)]


@dataclass(frozen=True)
class ConfigRecord(_Section):
    """The run's settings: trials, window lengths, warm-up, pauses, idle baseline. Units: s."""

    trials: int | None = _field(_OPT_WHOLE)
    runs: int | None = _field(_OPT_WHOLE)
    min_window_s: float | None = _field(_OPT_NUMBER)
    min_window_periods: float | None = _field(_OPT_NUMBER)
    warmup: int | None = _field(_OPT_WHOLE)
    warmup_s: float | None = _field(_OPT_NUMBER)
    cooldown_s: float | None = _field(_OPT_NUMBER)
    idle_s: float | None = _field(_OPT_NUMBER)
    guard_s: float | None = _field(_OPT_NUMBER)
    sync_pulse: bool | None = _field(_OPT_FLAG)
    max_iterations: int | None = _field(_OPT_WHOLE)
    min_window_s_used: float | None = _field(_OPT_NUMBER)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def items(self) -> list[tuple[str, Any]]:
        """Every setting as (name, value), as written (unset ones left out)."""
        return list(self.to_json().items())


@dataclass(frozen=True)
class IdleRecord(_Section):
    """A channel's idle baseline: its mean power over the idle window."""

    power_w: float | None = _field(_OPT_NUMBER)
    duration_s: float | None = _field(_OPT_NUMBER)
    flags: tuple[str, ...] = _field(_STRINGS, factory=tuple)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TimeMapRecord(_Section):
    """The correction applied to a channel's times: ``t - lag_s - drift (t - reference_s)``."""

    lag_s: float | None = _field(_OPT_NUMBER)
    drift: float | None = _field(_OPT_NUMBER)
    reference_s: float | None = _field(_OPT_NUMBER)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankRecord(_Section):
    """One rank of a run of several: where it ran, its clock offset, how it ended."""

    rank: int = _field(_whole, 0)
    local_rank: int | None = _field(_OPT_WHOLE, omit_none=True)
    host: str | None = _field(_OPT_STRING, omit_none=True)
    pid: int | None = _field(_OPT_WHOLE, omit_none=True)
    clock_offset_s: float | None = _field(_OPT_NUMBER, omit_none=True)
    status: str | None = _field(_OPT_STRING, omit_none=True)
    reason: str | None = _field(_OPT_STRING, omit_none=True)
    channels: tuple[str, ...] = _field(_STRINGS, factory=tuple)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TotalRecord(_Section):
    """The ``total`` channel of a run of several ranks and the channels it adds up."""

    channel: str = _field(_string, "total")
    of: tuple[str, ...] = _field(_STRINGS, factory=tuple)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DistributedRecord(_Section):
    """A run of several ranks (docs/distributed.md)."""

    world_size: int = _field(_whole, 1)
    backend: str | None = _field(_OPT_STRING)
    launcher: str | None = _field(_OPT_STRING)
    timeout_s: float | None = _field(_OPT_NUMBER, omit_none=True)
    hosts: tuple[str, ...] = _field(_STRINGS, factory=tuple)
    ranks: tuple[RankRecord, ...] = _field(_list_of(_section(RankRecord)), factory=tuple)
    missing_ranks: tuple[int, ...] = _field(_list_of(_whole), factory=tuple)
    total: TotalRecord | None = _field(_optional(_section(TotalRecord), "an object"), omit_none=True)
    extra: Mapping[str, Any] = field(default_factory=dict)


_SPREADS = ("time_per_iter_s", "energy_per_iter_j", "mean_power_w", "dynamic_energy_per_iter_j")


def _phase(value: Any, where: str) -> PhaseSummary:
    if not isinstance(value, Mapping):
        raise MetaError(where, value, "an object")
    for key in ("phase", "channel"):
        _string(value.get(key), f"{where}.{key}")
    for key in ("trials", "iterations"):
        _whole(value.get(key), f"{where}.{key}")
    for key in _SPREADS:
        _spread(value.get(key), key, f"{where}.{key}")
    _STRINGS(value.get("flags", []), f"{where}.flags")
    _object(value.get("work", {}), f"{where}.work")
    try:
        return PhaseSummary.from_json(dict(value))
    except (KeyError, TypeError, ValueError) as e:
        raise MetaError(where, value, f"a phase summary ({type(e).__name__}: {e})") from e


#: the one spread a phase summary may lack: the dynamic energy, of a run without an idle baseline
_OPTIONAL_SPREADS = ("dynamic_energy_per_iter_j",)


def _spread(value: Any, key: str, where: str) -> None:
    """Check a phase summary's spread ``key``: an object of numbers (or nulls).

    Raises:
        MetaError: it is not, or it is missing where it may not be.
    """
    if value is None and key in _OPTIONAL_SPREADS:
        return
    if not isinstance(value, Mapping) or not all(_number_or_null(v) for v in value.values()):
        raise MetaError(where, value, "an object of numbers (n, median, q1, q3, ...)")


def _number_or_null(value: Any) -> bool:
    return value is None or isinstance(value, (int, float)) and not isinstance(value, bool)


def _derived(value: Any, where: str) -> DerivedTable:
    if (
        not isinstance(value, Mapping)
        or not isinstance(value.get("name"), str)
        or not isinstance(value.get("rows", []), list)
        or not all(isinstance(r, Mapping) for r in value.get("rows", []))
    ):
        raise MetaError(where, value, "an object with a name and a list of rows")
    try:
        return DerivedTable.from_json(value)
    except (KeyError, TypeError, ValueError) as e:
        raise MetaError(where, value, f"a derived table ({e})") from e


# -- the whole file -----------------------------------------------------------------------------
@dataclass(frozen=True)
class RunMeta(_Section):
    """run.json, typed (docs/result-format.md describes each field).

    ``extensions`` holds the top-level keys this version does not know (a plugin's own, a
    newer writer's); they are written back as they were.
    """

    status: str = _field(_string, INCOMPLETE)
    reason: str | None = _field(_OPT_STRING)
    started_at: str | None = _field(_OPT_STRING)
    ended_at: str | None = _field(_OPT_STRING)
    pid: int | None = _field(_OPT_WHOLE)
    command_line: tuple[str, ...] = _field(_STRINGS, factory=tuple)
    host: Mapping[str, Any] = _field(_object, factory=dict)
    versions: Mapping[str, Any] = _field(_object, factory=dict)
    clock: ClockRecord | None = _field(_optional(_section(ClockRecord), "an object"))
    sources: tuple[SourceRecord, ...] = _field(_list_of(_section(SourceRecord)), factory=tuple)
    primary_channels: tuple[str, ...] = _field(_STRINGS, factory=tuple)
    notes: tuple[str, ...] = _field(_STRINGS, factory=tuple)
    warnings: tuple[str, ...] = _field(_STRINGS, factory=tuple)
    workload: PluginRecord | None = _field(_optional(_section(PluginRecord), "an object"))
    reporters: tuple[PluginRecord, ...] = _field(_list_of(_section(PluginRecord)), factory=tuple)
    config: ConfigRecord = _field(_section(ConfigRecord), factory=ConfigRecord)
    exit_code: int | None = _field(_OPT_WHOLE)
    idle_baseline: Mapping[str, IdleRecord] = _field(_map_of(_section(IdleRecord)), factory=dict)
    time_maps: Mapping[str, TimeMapRecord] = _field(_map_of(_section(TimeMapRecord)), factory=dict)
    alignment: Mapping[str, Mapping[str, Any]] = _field(_map_of(_object), factory=dict)
    rejected_samples: Mapping[str, Mapping[str, Any]] = _field(_map_of(_object), factory=dict)
    derived: tuple[DerivedTable, ...] = _field(_list_of(_derived), factory=tuple)
    timings_s: Mapping[str, float | None] = _field(_map_of(_OPT_NUMBER), factory=dict)
    fusion: Mapping[str, Any] = _field(_object, factory=dict)
    distributed: DistributedRecord | None = _field(_optional(_section(DistributedRecord), "an object"))
    phases: tuple[PhaseSummary, ...] = _field(_list_of(_phase), factory=tuple)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def extensions(self) -> Mapping[str, Any]:
        """Top-level keys this version does not know (a plugin's own), as they were read."""
        return self.extra

    @property
    def complete(self) -> bool:
        return self.status == COMPLETE

    @property
    def running_pid(self) -> int | None:
        """The process of a run whose run.json still says it is running (None otherwise)."""
        if self.status == COMPLETE or not (self.reason or "").startswith(RUNNING_PREFIX):
            return None
        return self.pid if self.pid is not None else pid_in_reason(self.reason)

    @property
    def channels(self) -> dict[str, Channel]:
        """Every channel of every source, by name."""
        return {c.name: c for s in self.sources for c in s.channels}

    @property
    def channel_sources(self) -> dict[str, str]:
        """The source of each channel, by channel name."""
        return {c.name: s.name for s in self.sources for c in s.channels}

    @property
    def gpus(self) -> list[Mapping[str, Any]]:
        """The GPUs the power sources describe (their ``info``'s ``gpus`` entries with a name)."""
        return [g for s in self.sources for g in s.gpus if g.get("name")]

    @property
    def workload_info(self) -> Mapping[str, Any]:
        return dict(self.workload.info or {}) if self.workload is not None else {}

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> RunMeta:
        """run.json's mapping, of any version this energyframe knows, brought up to this one.

        Raises:
            FormatVersionError: the version is newer than this energyframe's, or not a number.
            MetaError: a field is not of the type energyframe writes (the first one found).
        """
        if not isinstance(data, Mapping):
            raise MetaError(where or "run.json", data, "an object")
        data = migrate(data)
        body = {k: v for k, v in data.items() if k != "format_version"}
        return super().from_json(body, where)

    def to_json(self) -> dict[str, Any]:
        """run.json's mapping in the current format, every section written."""
        return {"format_version": FORMAT_VERSION, **super().to_json()}

    def with_(self, **changes: Any) -> RunMeta:
        """A copy with ``changes`` (field names as above)."""
        return replace(self, **changes)


def pid_in_reason(reason: str | None) -> int | None:
    """N of a reason "running (pid N)...", which a run writes while it goes."""
    if not reason or not reason.startswith(RUNNING_PREFIX):
        return None
    digits = reason[len(RUNNING_PREFIX) :].split(")", 1)[0]
    return int(digits) if digits.isdigit() else None


# -- versions -----------------------------------------------------------------------------------
#: what energyframe fused an energy counter ``NAME`` with before channels declared it (until
#: 2026-11-29): the channels of these suffixes beside it, finest first, where the first was there,
#: each read as it says (NVML's buffer of 20-ms means, then its instant power)
NAMED_SHAPES = (("power_samples", "period"), ("power_instant", "point"))


def with_declared_shapes(channels: Any) -> Any:
    """A source's channels as run.json lists them, where none says what shapes it (a run written
    before channels declared it): each energy counter ``NAME`` with ``NAME.power_samples`` beside
    it declares the shapes energyframe then found by their names (``NAMED_SHAPES``), so that it
    is fused as it was. Channels that declare their shapes, and anything not a list of channels,
    are returned as they are."""
    if not isinstance(channels, list) or any(isinstance(c, Mapping) and "shaped_by" in c for c in channels):
        return channels
    names = {c.get("name") for c in channels if isinstance(c, Mapping)}
    return [_with_named_shapes(c, names) for c in channels]


def _with_named_shapes(channel: Any, names: set) -> Any:
    """An energy counter ``NAME`` with ``NAME.power_samples`` among ``names``, declaring the
    channels ``NAMED_SHAPES`` finds beside it; any other channel as it is."""
    name = channel.get("name") if isinstance(channel, Mapping) else None
    counter = isinstance(name, str) and channel.get("quantity") == Quantity.ENERGY.value
    if not (counter and f"{name}.{NAMED_SHAPES[0][0]}" in names):
        return channel
    shaped = [{"channel": f"{name}.{s}", "reading": r} for s, r in NAMED_SHAPES if f"{name}.{s}" in names]
    return {**channel, "shaped_by": shaped}


def update_to_2(data: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: every section present (empty where version 1 left it out), ``pid`` from
    the "running (pid N)" reason of a run that had not finished (else unknown)."""
    out = dict(data)
    for key, empty in _EMPTY_SECTIONS.items():
        if out.get(key) is None:
            out[key] = empty()
    out.setdefault("pid", pid_in_reason(out.get("reason")) if isinstance(out.get("reason"), str) else None)
    out["format_version"] = 2
    return out


#: a section version 1 could leave out, and its empty value
_EMPTY_SECTIONS: dict[str, Callable[[], Any]] = {
    "notes": list,
    "warnings": list,
    "reporters": list,
    "config": dict,
    "idle_baseline": dict,
    "time_maps": dict,
    "alignment": dict,
    "rejected_samples": dict,
    "derived": list,
    "timings_s": dict,
    "fusion": dict,
    "phases": list,
}

#: version N-1 -> N, in order; a file is brought up one version at a time
MIGRATIONS: dict[int, Callable[[Mapping[str, Any]], dict[str, Any]]] = {2: update_to_2}


def migrate(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` brought up to ``FORMAT_VERSION`` by the ``update_to_N`` steps it needs.

    Raises:
        FormatVersionError: a version newer than this energyframe's, or one that is not a
            whole number from 1 on.
    """
    version = data.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise FormatVersionError(f"has run format version {version!r}, which no energyframe writes")
    if version > FORMAT_VERSION:
        raise FormatVersionError(
            f"has run format version {version}; this energyframe reads versions 1 to {FORMAT_VERSION}. "
            "Upgrade energyframe to read it."
        )
    out = dict(data)
    for target in range(version + 1, FORMAT_VERSION + 1):
        out = MIGRATIONS[target](out)
    return out
