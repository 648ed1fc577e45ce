"""How phases are measured: what the user gave (``RunSettings``) and what runs (``RunConfig``).

``RunSettings`` holds what the user asked for, every field optional. ``RunSettings.resolve``
fills the rest once, from the workload's preferences (``Workload.run_defaults``) and then from
``RunConfig``'s own defaults, the only place a default is written. The command line's options
are generated from the same fields (``energyframe.cli.run``), so a default or a range cannot
drift between the CLI, the Python API and the docs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from ..errors import UsageError

#: calibrated windows aim this much above --min-window, because iterations later in a run are
#: often a little faster than during calibration (graph replays on an H100: within 1 %); a
#: per-layer unit timed at capture aims the same (``workloads/unitplan.py``)
CALIBRATION_MARGIN = 1.08

#: the longest time any duration setting may ask for (a typo such as 1e100 is refused instead of
#: sleeping forever or overflowing). Units: s.
MAX_SECONDS = 86_400.0


def _setting(default: Any, flag: str | None, help: str, kind: type, minimum: float | None = None,
             positive: bool = False, seconds: bool = False, percent: bool = False) -> Any:
    """A ``RunConfig`` field with what the CLI and the validation need to know about it
    (``percent``: the command line also takes it as ``1%``)."""
    return field(
        default=default,
        metadata={"flag": flag, "help": help, "kind": kind, "minimum": minimum, "positive": positive,
                  "seconds": seconds, "percent": percent},
    )


@dataclass(frozen=True)
class RunConfig:
    """How phases are measured, every field decided. Build one with ``RunSettings.resolve``.

    A field whose value is ``None`` here means what its help says (e.g. ``min_window_s=None``:
    the window length follows from the sources' resolution once they have started).
    """

    trials: int = _setting(5, "--trials", "Windows per phase.", int, minimum=1)
    runs: int | None = _setting(
        None, "--runs", "At least this many timed iterations per phase over its trials (longer "
        "windows if needed). Default: no floor.", int, minimum=1)
    min_window_s: float | None = _setting(
        None, "--min-window", "Shortest window in seconds. Default: ten update periods of the "
        "coarsest primary power channel (1 s for NVML's counter).", float, positive=True, seconds=True)
    min_window_periods: float = _setting(
        10.0, None, "The default window, in update periods of the coarsest primary channel.", float,
        positive=True)
    warmup: int | None = _setting(
        None, "--warmup", "Warm-up iterations per phase. Default: warm up for --warmup-s.", int, minimum=0)
    warmup_s: float = _setting(
        1.0, "--warmup-s", "Warm-up time per phase when --warmup is not given.", float, minimum=0,
        seconds=True)
    cooldown_s: float = _setting(
        0.0, "--cooldown", "Seconds of pause between windows.", float, minimum=0, seconds=True)
    idle_s: float = _setting(
        0.0, "--idle", "Seconds of idle-power baseline after set-up (enables dynamic energy).", float,
        minimum=0, seconds=True)
    guard_s: float = _setting(
        0.0, "--guard", "Seconds each phase keeps running, unmeasured, before its first and after its "
        "last window.", float, minimum=0, seconds=True)
    sync_pulse: bool = _setting(
        False, "--sync-pulse", "Bursts of full load before and after the phases, to align wall meters.",
        bool)
    max_iterations: int = _setting(
        1_000_000_000, None, "Upper bound of the calibrated iterations per window.", int, minimum=1)
    precision_pct: float | None = _setting(
        None, "--precision", "Measure each phase until the 95 % confidence interval of its median time "
        "and energy per iteration is within ± this many percent (e.g. 1%): at least --trials windows, "
        "at most --max-time seconds of them. Default: exactly --trials windows.", float, positive=True,
        percent=True)
    max_time_s: float = _setting(
        60.0, "--max-time", "With --precision, the most seconds of windows per phase.", float,
        positive=True, seconds=True)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is not None:
                raise UsageError(f"{f.name} must be set in a RunConfig (RunSettings leaves it to the default)")
            check_setting(f.name, value)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_setting(name: str, value: Any) -> None:
    """Refuse a value that could only fail later (or hang): wrong type, out of range, not finite.

    Raises:
        UsageError: naming the setting, the value and what is allowed.
    """
    if value is None:
        return
    meta = _FIELDS[name].metadata
    kind = meta["kind"]
    if kind is bool:
        if not isinstance(value, bool):
            raise UsageError(f"{name} must be true or false, got {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number, got {value!r}")
    if kind is int and not float(value).is_integer():
        raise UsageError(f"{name} must be a whole number, got {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, got {value!r}")
    if meta["positive"] and value <= 0:
        raise UsageError(f"{name} must be positive, got {value!r}")
    if meta["minimum"] is not None and value < meta["minimum"]:
        raise UsageError(f"{name} must be at least {meta['minimum']:g}, got {value!r}")
    if meta["seconds"] and value > MAX_SECONDS:
        raise UsageError(f"{name} must be at most {MAX_SECONDS:g} s (one day), got {value!r}")


_FIELDS = {f.name: f for f in fields(RunConfig)}
#: the settings, in order, with their defaults: the one source the CLI and the docs read
SETTINGS = tuple(_FIELDS.values())


@dataclass(frozen=True)
class RunSettings:
    """What the user asked for; ``None`` leaves a field to the workload, then to the default.

    The fields are ``RunConfig``'s (tests/lifecycle/test_config.py checks that they stay the same).
    """

    trials: int | None = None
    runs: int | None = None
    min_window_s: float | None = None
    min_window_periods: float | None = None
    warmup: int | None = None
    warmup_s: float | None = None
    cooldown_s: float | None = None
    idle_s: float | None = None
    guard_s: float | None = None
    sync_pulse: bool | None = None
    max_iterations: int | None = None
    precision_pct: float | None = None
    max_time_s: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            check_setting(f.name, getattr(self, f.name))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RunSettings:
        """Settings from a mapping of field names (e.g. a workload's ``run_defaults``)."""
        unknown = sorted(set(values) - set(_FIELDS))
        if unknown:
            raise UsageError(f"unknown run settings {unknown}; known: {', '.join(_FIELDS)}")
        return cls(**dict(values))

    def given(self) -> dict[str, Any]:
        """The fields the user set."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def resolve(self, preferred: Mapping[str, Any] | None = None) -> RunConfig:
        """Every field decided: the user's value, else the workload's preference, else the default."""
        values = {**RunSettings.from_mapping(preferred or {}).given(), **self.given()}
        return replace(RunConfig(), **values)


def default_of(name: str) -> Any:
    """The default of a setting (for help texts and docs)."""
    default = _FIELDS[name].default
    return None if default is MISSING else default
