"""The data every part of energyframe shares: channels, samples, phases, annotations, tables.

Plain values only, no behaviour that needs a plugin or a run: the plugin contract
(``energyframe.plugin``), the window maths (``energy``, ``windows``) and the results
(``results``) all build on these. Nothing here imports another energyframe module.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple


class Quantity(str, enum.Enum):
    """What a channel's values are."""

    ENERGY = "energy"  # cumulative energy in J (a counter); window energy = E(end) - E(start)
    POWER = "power"  # power in W; window energy = integral of the piecewise-linear signal
    STATE = "state"  # anything else (clocks, temperature, flag bits); summarised, not integrated


class Scope(str, enum.Enum):
    """What a channel measures the energy of."""

    GPU = "gpu"
    CPU = "cpu"
    DRAM = "dram"
    SYSTEM_WALL = "system-wall"
    OTHER = "other"


class ClockBase(str, enum.Enum):
    """Which clock a channel's timestamps are in."""

    MONOTONIC = "monotonic"  # time.monotonic() seconds (system-wide on Linux)
    WALL = "wall"  # Unix seconds (time.time())


class Timing(str, enum.Enum):
    """What a sample's timestamp means: this decides how samples are placed before integrating.

    Separate from ``Scope``: a wall meter and a PDU both measure the system, but only the one
    whose records arrive late by an unknown amount needs its lag estimated.
    """

    #: the value was true at the timestamp (a counter tick, an instant reading). Used as stamped.
    EXACT = "exact"
    #: the value is the average over the ``averaging_s`` before the timestamp (a 1-s average
    #: power reading, a meter record stamped when its period closed). Placed at the middle of
    #: its period, a fixed and documented shift of ``averaging_s / 2``.
    PERIOD_END = "period-end"
    #: the value averages ``averaging_s`` and arrives late by an amount nobody knows (a serial
    #: wall meter stamped on arrival): the lag is estimated after the run by cross-correlation
    #: against a finer channel (``energyframe.core.align``), and the run waits longer for its samples.
    UNKNOWN = "unknown"


#: how a power channel's samples are read where they shape a counter (``Shape.reading``): the
#: power at each sample's time, joined linearly (``point``), or each the mean power since the
#: previous sample (``period``)
READINGS = ("point", "period")


@dataclass(frozen=True, kw_only=True)
class Shape:
    """A power channel that gives an energy counter its shape between the counter's ticks
    (``Channel.shaped_by``): after the run, the counter's energy between every two ticks is
    spread as these samples say (a fused power channel ``NAME.fused``, docs/measurement.md).

    Args:
        channel: the power channel's name.
        reading: how its samples are read, one of ``READINGS``: ``period`` where each is the
            mean power since the previous sample, ``point`` where each is the power at its time.
    """

    channel: str
    reading: str = "point"

    def __post_init__(self) -> None:
        if self.reading not in READINGS:
            raise ValueError(f"unknown reading {self.reading!r} of {self.channel!r}; valid: {', '.join(READINGS)}")

    def to_json(self) -> dict[str, str]:
        return {"channel": self.channel, "reading": self.reading}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Shape:
        return cls(channel=data["channel"], reading=data.get("reading", "point"))


@dataclass(frozen=True)
class Channel:
    """One stream of samples a power source produces.

    Args:
        name: unique within the run, e.g. ``gpu0``, ``gpu0.power_instant``, ``meter1``, ``wall``.
        quantity: ENERGY (cumulative J), POWER (W) or STATE.
        scope: what is measured (gpu, cpu, system-wall, ...).
        resolution_s: how often the reading changes (update period). Units: s.
        clock: the clock of the timestamps the source reports.
        unit: ``J`` for ENERGY, ``W`` for POWER; free text for STATE (``MHz``, ``C``).
        primary: shown in summary tables; secondary channels are kept in windows.csv.
        description: one line for humans (what the reading is, known caveats).
        timing: what a sample's timestamp means (``Timing``); exact by default.
        averaging_s: the period a reading averages over, for ``PERIOD_END`` and ``UNKNOWN``
            timing (0 for instant readings). Units: s.
        accuracy_w, accuracy_pct: the sensor's stated accuracy, ± this many watts plus this
            percentage of the reading (0: not stated): the systematic part of a window's
            uncertainty (docs/measurement.md). Units: W, %.
        shaped_by: for an energy counter, the power channels that shape it between its ticks,
            finest first (NVML's ``gpuN`` by ``gpuN.power_samples``, then ``gpuN.power_instant``):
            the run adds its fused power, ``NAME.fused``.
        derived_from: for a channel computed after the run from another (a counter's fused
            power), that channel's name; its windows' edges lie between that counter's ticks.
        stamp_s: for an energy counter stamped by polling, the half-width within which each
            tick's stamp lies: half the median time between the two polls around a tick, as
            the source measured it (0: not measured; the bound then takes ±2 ms,
            ``core/edge/errors.py``). Set by the run from the source's report. Units: s.
    """

    name: str
    quantity: Quantity
    scope: Scope = Scope.OTHER
    resolution_s: float = 0.0
    clock: ClockBase = ClockBase.MONOTONIC
    unit: str = ""
    primary: bool = True
    description: str = ""
    timing: Timing = Timing.EXACT
    averaging_s: float = 0.0
    accuracy_w: float = 0.0
    accuracy_pct: float = 0.0
    shaped_by: tuple[Shape, ...] = ()
    derived_from: str = ""
    stamp_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.unit:
            default = {Quantity.ENERGY: "J", Quantity.POWER: "W"}.get(self.quantity, "")
            object.__setattr__(self, "unit", default)

    @property
    def integrable(self) -> bool:
        return self.quantity in (Quantity.ENERGY, Quantity.POWER)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "quantity": self.quantity.value,
            "scope": self.scope.value,
            "unit": self.unit,
            "resolution_s": self.resolution_s,
            "clock": self.clock.value,
            "primary": self.primary,
            "description": self.description,
            "timing": self.timing.value,
            "averaging_s": self.averaging_s,
            "accuracy_w": self.accuracy_w,
            "accuracy_pct": self.accuracy_pct,
            "shaped_by": [s.to_json() for s in self.shaped_by],
            "derived_from": self.derived_from,
            "stamp_s": self.stamp_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Channel:
        return cls(
            name=data["name"],
            quantity=Quantity(data["quantity"]),
            scope=Scope(data.get("scope", Scope.OTHER.value)),
            resolution_s=float(data.get("resolution_s", 0.0)),
            clock=ClockBase(data.get("clock", ClockBase.MONOTONIC.value)),
            unit=data.get("unit", ""),
            primary=bool(data.get("primary", True)),
            description=data.get("description", ""),
            timing=Timing(data.get("timing", Timing.EXACT.value)),
            averaging_s=float(data.get("averaging_s", 0.0)),
            accuracy_w=float(data.get("accuracy_w", 0.0)),
            accuracy_pct=float(data.get("accuracy_pct", 0.0)),
            shaped_by=tuple(Shape.from_json(s) for s in data.get("shaped_by") or ()),
            derived_from=str(data.get("derived_from") or ""),
            stamp_s=float(data.get("stamp_s") or 0.0),
        )

    def renamed(self, rename: Callable[[str], str]) -> Channel:
        """This channel under the name ``rename(name)``, the channels it names renamed alike (a
        replayed channel's prefix, a rank's name in a run of several)."""
        return replace(
            self,
            name=rename(self.name),
            shaped_by=tuple(replace(s, channel=rename(s.channel)) for s in self.shaped_by),
            derived_from=rename(self.derived_from) if self.derived_from else "",
        )


def primary_channel_names(channels: Iterable[Channel]) -> list[str]:
    """The channels a run's figures are about (run.json's ``primary_channels``): those the source
    calls primary and that hold power or energy, in order."""
    return [c.name for c in channels if c.primary and c.integrable]


class Sample(NamedTuple):
    """One reading: ``value`` of ``channel`` at ``time_s`` on the channel's clock."""

    channel: str
    time_s: float
    value: float


@dataclass(frozen=True)
class SourceContext:
    """What a power source is given when it starts.

    Args:
        raw_dir: a folder of the run directory where the source may keep raw logs (its own
            format) that survive a crash; create it if you use it. ``None`` when the run is
            not saved.
        warn: report a problem that does not stop the run (kept in run.json's warnings).
        devices: the GPUs this process uses, when a launcher started one process per GPU: CUDA
            UUIDs (``GPU-...``) or CUDA ordinals (``cuda:N``, among the GPUs
            ``CUDA_VISIBLE_DEVICES`` shows). A GPU source given no GPUs of its own measures
            these; ``None``: no launcher, measure the default.
        rank, local_rank: this process's rank over the run and on its machine (0 without a
            launcher).
    """

    raw_dir: Path | None = None
    warn: Callable[[str], None] = print
    devices: Sequence[str] | None = None
    rank: int = 0
    local_rank: int = 0


@dataclass(frozen=True)
class WorkloadContext:
    """Where a workload runs, as a power source's ``SourceContext`` says where a source runs: the
    one place a workload learns its rank and its GPU (it never reads the launcher's
    environment itself).

    Args:
        rank, local_rank, world_size: this process among the ranks a launcher started (0, 0, 1
            alone).
        launched: whether a launcher started this process (even as the only rank).
        launcher: ``torchrun``, ``srun`` or ``""``.
        out: the run directory, ``None`` when the run is not saved.
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    launched: bool = False
    launcher: str = ""
    out: Path | None = None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@dataclass(frozen=True)
class ReportFigure:
    """A figure a workload adds to the HTML report of its saved runs.

    Args:
        title: the heading above it.
        figure: a plotly figure as a dict (``fig.to_plotly_json()``), or ``None`` when it cannot
            be drawn for this run.
        note: why it could not be drawn (shown in its place), when ``figure`` is ``None``.
    """

    title: str
    figure: Mapping[str, Any] | None
    note: str | None = None


@dataclass(frozen=True)
class Detection:
    """Whether a source can run on this machine, and why (shown when auto-detecting)."""

    available: bool
    reason: str


@dataclass(frozen=True)
class WindowAnnotation:
    """What a source adds to one window of one of its channels: extra columns and flags."""

    columns: Mapping[str, Any] = field(default_factory=dict)
    flags: Sequence[str] = ()


#: a window's flags in a table cell (windows.csv, a summary's ``flags``): their names joined by this
FLAG_SEPARATOR = ";"


def split_flags(cell: Any) -> list[str]:
    """A window's flags from a table cell: ``"gap;short_window"``; an empty cell, NaN or None
    holds none."""
    return [f for f in cell.split(FLAG_SEPARATOR) if f] if isinstance(cell, str) else []


def join_flags(flags: Iterable[str]) -> str:
    """A table cell holding these flags (``split_flags`` reads it back)."""
    return FLAG_SEPARATOR.join(flags)


def no_sync() -> None:
    """Nothing to wait for (CPU work, or a subprocess that has exited)."""


@dataclass(frozen=True)
class Phase:
    """A named piece of work the orchestrator repeats and measures.

    Args:
        name: shown in tables and used as ``phase`` in windows.csv.
        step: runs one iteration; the orchestrator decides how many per window.
        sync: waits until the device has finished all queued work (e.g.
            ``torch.cuda.synchronize``); called before a window opens and before it closes.
        iterations: a fixed count per window; ``None`` lets the orchestrator calibrate it.
        warmup: iterations before measuring; ``None`` uses the run's setting.
        trials: windows to measure; ``None`` uses the run's setting.
        work: work per iteration by unit, e.g. ``{"tokens": 5}``, for per-unit figures.
        setup: called once before the phase's warm-up; teardown once after its last window.
        iterations_per_step: iterations one call of ``step`` runs (a CUDA graph of 100
            unrolled kernel calls: 100); per-iteration figures divide by steps times this.
        note: how the phase runs, shown with its results (e.g. "cpu, eager: no CUDA graph").
    """

    name: str
    step: Callable[[], Any]
    sync: Callable[[], None] = no_sync
    iterations: int | None = None
    warmup: int | None = None
    trials: int | None = None
    work: Mapping[str, float] = field(default_factory=dict)
    setup: Callable[[], None] | None = None
    teardown: Callable[[], None] | None = None
    iterations_per_step: int = 1
    note: str = ""


@dataclass(frozen=True)
class DerivedTable:
    """Figures a workload computes from the measured phases (pipeline totals, predictions).

    Args:
        name: file stem (``<name>.csv`` in the run directory) and key in run.json's ``derived``.
        title: one line shown above the table.
        rows: one mapping per row, SI units in the column names.
        note: a sentence shown under the table (how it was computed, what it misses).
        display: the columns the console shows (all when empty); saved files keep every column.
    """

    name: str
    title: str
    rows: Sequence[Mapping[str, Any]]
    note: str = ""
    display: Sequence[str] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "rows": [dict(r) for r in self.rows],
            "note": self.note,
            "display": list(self.display),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DerivedTable:
        return cls(
            data["name"],
            data.get("title", data["name"]),
            list(data.get("rows", [])),
            data.get("note", ""),
            tuple(data.get("display", ())),
        )
