"""Measured windows, their energy on every channel, and per-phase summaries."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..model import Channel, Quantity, WindowAnnotation, join_flags, split_flags
from .clock import ClockModel
from .edge import CounterTicks, Evidence, Span, counter_window
from .energy import WindowEnergy, window_energy
from .fusion import fused_counter
from .samples import DUPLICATE, IMPLAUSIBLE, MISSING, NEGATIVE, NOT_FINITE, STEPPED, SampleSeries
from .stats import Spread
from .tickgrid import REGULAR_SD_S, TickGrid
from .uncertainty import Bound, median_ci_j, summary_bound, systematic_j
from .vocabulary import (
    CLOCK_STEP,
    DUPLICATE_SAMPLES,
    IDLE_ABOVE_LOAD,
    INVALID_READING,
    IRREGULAR_TICKS,
    MISSING_POWER,
    NEGATIVE_POWER,
    NOISY,
    PARTIAL,
    TICK_OFF_GRID,
    TICK_OFF_GRID_COLUMN,
    TICK_SPREAD_COLUMN,
)

WINDOW_COLUMNS = [
    "phase",
    "trial",
    "channel",
    "start_s",
    "end_s",
    "duration_s",
    "iterations",
    "time_per_iter_s",
    "energy_j",
    "mean_power_w",
    "energy_per_iter_j",
    "dynamic_energy_j",
    "dynamic_energy_per_iter_j",
    "estimator",
    "energy_bound_j",
    "energy_bound_pct",
    "energy_random_j",
    "energy_systematic_j",
    "dynamic_energy_bound_j",
    "flags",
]
#: text columns of windows.csv (the others are numbers)
TEXT_COLUMNS = ("phase", "channel", "estimator", "flags")

#: how far a saved time may be from the one measured (Unix seconds in a float64 hold 0.24 us):
#: a dynamic energy within the baseline's power times this is zero, not below the load. Units: s.
TIME_ROUNDING_S = 1e-6
#: flags of rejected readings that leave a window's energy unknown (NaN), not just bridged
UNKNOWABLE = (CLOCK_STEP,)
#: which flag a rejected reading gives the windows around it (samples.py names the reasons)
REJECTION_FLAGS = {
    NEGATIVE: NEGATIVE_POWER,
    NOT_FINITE: INVALID_READING,
    IMPLAUSIBLE: INVALID_READING,
    DUPLICATE: DUPLICATE_SAMPLES,
    MISSING: MISSING_POWER,
    STEPPED: CLOCK_STEP,
}


@dataclass(frozen=True)
class WindowRecord:
    """A window as measured: where it lies on the monotonic timeline and what ran in it.

    Args:
        phase: the phase (or user window) name.
        trial: 0-based index among the windows of that phase.
        start_s, end_s: monotonic seconds, each taken after the device sync (if any).
        iterations: iterations of the phase's step inside the window.
        synced: the window opened after a device sync (a sync other than none), so none of its
            work began before ``start_s`` and what ran before it had finished
            (``edge.Span`` carries it to the estimators).
    """

    phase: str
    trial: int
    start_s: float
    end_s: float
    iterations: int = 1
    synced: bool = False

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class IdleBaseline:
    """Power of one channel while nothing ran. Units: W, s.

    Args:
        bound_w: the 95 % random bound of ``power_w`` (its window's edges and coverage): what
            it adds, times a window's duration, to that window's dynamic energy. Units: W.
    """

    channel: str
    power_w: float
    duration_s: float
    flags: tuple[str, ...] = ()
    bound_w: float = math.nan


def counter_ticks(
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    evidence: Mapping[str, Evidence],
    grids: bool = True,
) -> dict[str, CounterTicks]:
    """Per channel whose windows are read between a counter's ticks (each counter, and the power
    derived from one), that counter: its ticks, what its fused power says about them, and, with
    ``grids``, its ticks' update grid where the check can tell (``tickgrid.py``)."""
    counters = {
        name: CounterTicks(
            series=series[name],
            evidence=evidence.get(name),
            grid=TickGrid.check(series[name].times_s) if grids else None,
        )
        for name, channel in channels.items()
        if channel.quantity == Quantity.ENERGY and name in series
    }
    derived = {name: counters[counter] for name in channels if (counter := fused_counter(name)) in counters}
    return {**counters, **derived}


def channel_energy(
    channel: Channel, series: Mapping[str, SampleSeries], span: Span, counters: Mapping[str, CounterTicks]
) -> WindowEnergy:
    """One window on one channel: read between its counter's ticks (``edge``) where it has one,
    else as ``energy.window_energy`` reads its stream."""
    s = series[channel.name]
    ticks = counters.get(channel.name)
    if ticks is not None:
        return counter_window(channel=channel, series=s, span=span, ticks=ticks)
    return window_energy(channel.quantity, s.times_s, s.values, span.start_s, span.end_s, channel.resolution_s)


def idle_baselines(
    window: WindowRecord,
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    evidence: Mapping[str, Evidence] | None = None,
) -> dict[str, IdleBaseline]:
    out = {}
    counters = counter_ticks(channels, series, evidence or {}, grids=False)
    span = Span(start_s=window.start_s, end_s=window.end_s)
    for name, channel in channels.items():
        if not channel.integrable:
            continue
        we = channel_energy(channel, series, span, counters)
        duration = window.duration_s
        power = we.energy_j / duration if duration > 0 else math.nan
        bound = we.random_j / duration if duration > 0 else math.nan
        out[name] = IdleBaseline(name, power, duration, we.flags, bound)
    return out


Annotator = Callable[[Channel, float, float], WindowAnnotation]


def rejection_flags(
    channel: Channel, rejected: Mapping[str, np.ndarray], start_s: float, end_s: float
) -> list[str]:
    """Flags for readings of ``channel`` rejected within one update period of the window."""
    margin = max(channel.resolution_s, 1e-6)
    flags = []
    for reason, times in rejected.items():
        lo = int(np.searchsorted(times, start_s - margin, side="left"))
        if lo < times.size and times[lo] <= end_s + margin:
            flags.append(REJECTION_FLAGS.get(reason, INVALID_READING))
    return flags


def first_start_after(starts_s: np.ndarray, end_s: float) -> float | None:
    """The first of ``starts_s`` (sorted starts of windows opened after a device sync) at or
    after ``end_s``: the start whose reading a window ending at ``end_s`` shares
    (``edge.Span``'s ``next_synced_start_s``). ``None`` where there is none."""
    k = int(np.searchsorted(starts_s, end_s, side="left"))
    return float(starts_s[k]) if k < len(starts_s) else None


def compute_windows(  # noqa: C901 (each window row in one pass: energy, rejection flags, idle baseline, annotations)
    records: Sequence[WindowRecord],
    channels: Mapping[str, Channel],
    series: Mapping[str, SampleSeries],
    clock: ClockModel,
    idle: Mapping[str, IdleBaseline] | None = None,
    annotate: Annotator | None = None,
    rejected: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    evidence: Mapping[str, Evidence] | None = None,
    opened_s: Sequence[float] = (),
) -> pd.DataFrame:
    """One row per window and integrable channel (one row per window when there is none).

    Args:
        rejected: per channel, when readings that cannot be physical were kept out of its series
            (``SampleStore.rejected_times``); the windows near them are flagged.
        evidence: per counter channel, what its fused power says about each tick interval
            (``edge.Evidence``): its windows then choose each edge's estimator (a window
            opened after a device sync, ``WindowRecord.synced``, may read its start ``anchored``,
            and a window that ends just before such a start reads its end as that start does).
        opened_s: starts of synced windows not in ``records`` (still open as a live window is
            computed): an end edge just before one reads it as the final run will.
    """
    idle = idle or {}
    rejected = rejected or {}
    integrable = [c for c in channels.values() if c.integrable]
    counters = counter_ticks(channels, series, evidence or {})
    synced_starts = np.sort(np.array([w.start_s for w in records if w.synced] + list(opened_s), dtype=float))
    rows = []
    for w in records:
        span = Span(
            start_s=w.start_s,
            end_s=w.end_s,
            synced=w.synced,
            next_synced_start_s=first_start_after(synced_starts, w.end_s),
        )
        base = {
            "phase": w.phase,
            "trial": w.trial,
            "start_s": clock.to_unix(w.start_s),
            "end_s": clock.to_unix(w.end_s),
            "duration_s": w.duration_s,
            "iterations": w.iterations,
            "time_per_iter_s": w.duration_s / w.iterations if w.iterations else math.nan,
        }
        if not integrable:
            rows.append({**base, "channel": "", "flags": ""})
            continue
        for channel in integrable:
            we = channel_energy(channel, series, span, counters)
            flags = list(we.flags)
            if channel.name in rejected:
                for flag in rejection_flags(channel, rejected[channel.name], w.start_s, w.end_s):
                    if flag not in flags:
                        flags.append(flag)
            if any(f in UNKNOWABLE for f in flags):  # readings there could not be placed in time
                we = replace(we, energy_j=math.nan)
            row = {
                **base,
                "channel": channel.name,
                "energy_j": we.energy_j,
                "mean_power_w": we.energy_j / w.duration_s if w.duration_s > 0 else math.nan,
                "energy_per_iter_j": we.energy_j / w.iterations if w.iterations else math.nan,
                **_bound_columns(channel, we, w.duration_s),
            }
            row.update(we.columns)
            baseline = idle.get(channel.name)
            if baseline is not None:
                dynamic = we.energy_j - baseline.power_w * w.duration_s
                row["dynamic_energy_j"] = dynamic
                row["dynamic_energy_bound_j"] = math.hypot(
                    row["energy_bound_j"], baseline.bound_w * w.duration_s
                )
                row["dynamic_energy_per_iter_j"] = dynamic / w.iterations if w.iterations else math.nan
                if dynamic < -baseline.power_w * TIME_ROUNDING_S and IDLE_ABOVE_LOAD not in flags:
                    flags.append(IDLE_ABOVE_LOAD)
            if annotate is not None:
                note = annotate(channel, w.start_s, w.end_s)
                row.update(note.columns)
                flags.extend(f for f in note.flags if f not in flags)
            row["flags"] = join_flags(flags)
            rows.append(row)
    frame = pd.DataFrame(rows)
    for column in WINDOW_COLUMNS:
        if column not in frame.columns:
            frame[column] = math.nan if column not in TEXT_COLUMNS else ""
    extra = [c for c in frame.columns if c not in WINDOW_COLUMNS]
    return frame[WINDOW_COLUMNS + extra]


def off_grid_warnings(windows: pd.DataFrame) -> list[str]:
    """Per counter with windows flagged ``tick_off_grid`` or ``irregular_ticks``, what happened,
    in one sentence (its fused power's windows carry the same flags)."""
    out = []
    for column in (TICK_OFF_GRID_COLUMN, TICK_SPREAD_COLUMN):
        if windows.empty or column not in windows.columns:
            continue
        flagged = windows[windows[column].notna()]
        for channel, group in flagged.groupby("channel", sort=False):
            if fused_counter(str(channel)) is not None:
                continue
            ms = float(group[column].max())
            if column == TICK_OFF_GRID_COLUMN:
                out.append(
                    f"{channel}: {len(group)} window(s) have a counter tick beside an edge stamped up to "
                    f"{ms:.0f} ms off the counter's update grid: the poller saw the change late (a host short "
                    f"of CPU?); flagged {TICK_OFF_GRID}, their bounds take that distance as the stamp's error"
                )
            else:
                out.append(
                    f"{channel}: the counter's ticks spread {ms:.1f} ms (robust sd) about a regular update "
                    f"grid, more than the {1e3 * REGULAR_SD_S:.0f} ms of a counter polled freely: its poller was "
                    f"late at many ticks (a host short of CPU?), or the counter updates irregularly; its "
                    f"{len(group)} window(s) are flagged {IRREGULAR_TICKS}, and the spread joins each stamp's error "
                    "in their bounds"
                )
    return out


def idle_warnings(windows: pd.DataFrame, idle: Mapping[str, IdleBaseline]) -> list[str]:
    """Per channel and phase whose windows are flagged ``idle_above_load``, why their dynamic
    energy is negative, in one sentence."""
    out: list[str] = []
    if windows.empty or "flags" not in windows.columns:
        return out
    flagged = windows[windows["flags"].map(lambda cell: IDLE_ABOVE_LOAD in split_flags(cell))]
    for (channel, phase), group in flagged.groupby(["channel", "phase"], sort=False):
        baseline = idle.get(str(channel))
        if baseline is None:
            continue
        out.append(
            f"{channel}: the idle baseline ({baseline.power_w:.4g} W) is above the power of "
            f"{len(group)} window(s) of phase {phase!r} ({float(group['mean_power_w'].median()):.4g} W): "
            f"their dynamic energy is negative (flag {IDLE_ABOVE_LOAD}); the baseline was not idle "
            "(another process, clocks still high after set-up) or the work draws less than idle"
        )
    return out


def _bound_columns(channel: Channel, we: WindowEnergy, duration_s: float) -> dict:
    """windows.csv's estimator and 95 % bound of one window's energy, in its parts."""
    bound = Bound(we.random_j, systematic_j(channel, we.energy_j, duration_s))
    if not math.isfinite(we.energy_j):
        bound = Bound(math.nan, math.nan)
    return {
        "estimator": we.estimator,
        "energy_bound_j": bound.total_j,
        "energy_bound_pct": bound.pct(we.energy_j),
        "energy_random_j": bound.random_j,
        "energy_systematic_j": bound.systematic_j,
    }


def window_bound(row: Mapping) -> Bound | None:
    """A windows.csv row's bound (None where the run predates bounds or has no energy)."""
    try:
        random = float(row.get("energy_random_j"))  # type: ignore[arg-type]
        systematic = float(row.get("energy_systematic_j"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return Bound(random, systematic) if math.isfinite(random) else None


@dataclass(frozen=True)
class PhaseSummary:
    """One phase on one channel over its trials (``channel`` is empty for timing-only runs)."""

    phase: str
    channel: str
    trials: int
    iterations: int
    time_per_iter_s: Spread
    energy_per_iter_j: Spread
    mean_power_w: Spread
    dynamic_energy_per_iter_j: Spread | None = None
    flags: tuple[str, ...] = ()
    work: Mapping[str, float] = field(default_factory=dict)
    #: the 95 % bound of ``energy_per_iter_j.median`` (``uncertainty.summary_bound``)
    energy_bound: Bound | None = None
    #: the share of the trials' windows whose edges took each estimator (``{"counter": 5}``)
    estimators: Mapping[str, int] = field(default_factory=dict)
    #: the precision reached: the 95 % interval of the median over the trials, in % of it, of
    #: ``time`` and ``energy`` per iteration (``uncertainty.median_ci_j``; absent below 2 trials)
    precision_pct: Mapping[str, float] = field(default_factory=dict)

    @property
    def energy_bound_pct(self) -> float:
        """The total 95 % bound of the median energy per iteration, in % (NaN without one)."""
        return self.energy_bound.pct(self.energy_per_iter_j.median) if self.energy_bound else math.nan

    def to_json(self) -> dict:
        return {
            "phase": self.phase,
            "channel": self.channel,
            "trials": self.trials,
            "iterations": self.iterations,
            "time_per_iter_s": self.time_per_iter_s.to_json(),
            "energy_per_iter_j": self.energy_per_iter_j.to_json(),
            "mean_power_w": self.mean_power_w.to_json(),
            "dynamic_energy_per_iter_j": (
                self.dynamic_energy_per_iter_j.to_json() if self.dynamic_energy_per_iter_j else None
            ),
            "flags": list(self.flags),
            "work": dict(self.work),
            "energy_per_iter_bound": (
                self.energy_bound.to_json(self.energy_per_iter_j.median) if self.energy_bound else None
            ),
            "estimators": dict(self.estimators),
            "precision_pct": dict(self.precision_pct),
        }

    @classmethod
    def from_json(cls, d: dict) -> PhaseSummary:
        dyn = d.get("dynamic_energy_per_iter_j")
        return cls(
            phase=d["phase"],
            channel=d["channel"],
            trials=d["trials"],
            iterations=d["iterations"],
            time_per_iter_s=Spread.from_json(d["time_per_iter_s"]),
            energy_per_iter_j=Spread.from_json(d["energy_per_iter_j"]),
            mean_power_w=Spread.from_json(d["mean_power_w"]),
            dynamic_energy_per_iter_j=Spread.from_json(dyn) if dyn else None,
            flags=tuple(d.get("flags", ())),
            work=d.get("work", {}),
            energy_bound=Bound.from_json(d.get("energy_per_iter_bound")),
            estimators=d.get("estimators", {}),
            precision_pct=d.get("precision_pct", {}),
        )


def summarize(
    windows: pd.DataFrame, work: Mapping[str, Mapping[str, float]] | None = None
) -> list[PhaseSummary]:
    """Per phase and channel: median and spread over trials, and the union of window flags."""
    work = work or {}
    out: list[PhaseSummary] = []
    if windows.empty:
        return out
    for (phase, channel), group in windows.groupby(["phase", "channel"], sort=False):
        flags: list[str] = []
        for text in group["flags"]:
            flags.extend(f for f in split_flags(text) if f not in flags)
        time_spread = Spread.of(group["time_per_iter_s"])
        energy_spread = Spread.of(group["energy_per_iter_j"])
        if (time_spread.noisy or energy_spread.noisy) and NOISY not in flags:
            flags.append(NOISY)
        trials = int(group["trial"].nunique())
        if channel and energy_spread.n < trials and PARTIAL not in flags:
            flags.append(PARTIAL)  # the median below covers energy_per_iter_j.n of the trials
        dynamic = None
        if group["dynamic_energy_per_iter_j"].notna().any():
            dynamic = Spread.of(group["dynamic_energy_per_iter_j"])
        bound, estimators = _phase_bound(group)
        out.append(
            PhaseSummary(
                phase=str(phase),
                channel=str(channel),
                trials=trials,
                iterations=int(group["iterations"].median()),
                time_per_iter_s=time_spread,
                energy_per_iter_j=energy_spread,
                mean_power_w=Spread.of(group["mean_power_w"]),
                dynamic_energy_per_iter_j=dynamic,
                flags=tuple(flags),
                work=dict(work.get(str(phase), {})),
                energy_bound=bound,
                estimators=estimators,
                precision_pct=_precision(group, bool(channel)),
            )
        )
    return out


def _precision(group: pd.DataFrame, energy: bool) -> dict[str, float]:
    """The 95 % interval of the median time (and energy) per iteration, in % of the median."""
    out = {}
    columns = {"time": "time_per_iter_s", "energy": "energy_per_iter_j"} if energy else {"time": "time_per_iter_s"}
    for name, column in columns.items():
        values = pd.to_numeric(group[column], errors="coerce").to_numpy(float)
        values = values[np.isfinite(values)]
        half = median_ci_j(values)
        median = float(np.median(values)) if values.size else math.nan
        if math.isfinite(half) and median:
            out[name] = 100.0 * half / abs(median)
    return out


def _phase_bound(group: pd.DataFrame) -> tuple[Bound | None, dict[str, int]]:
    """The bound of a phase's median energy per iteration, and how many windows took each
    estimator."""
    if "energy_random_j" not in group.columns:
        return None, {}
    per_iter = []
    bounds = []
    for row in group.to_dict("records"):
        iterations = row.get("iterations") or 0
        bound = window_bound(row)
        if bound is not None and iterations:
            bounds.append(bound.scaled(1.0 / iterations))
        per_iter.append(row.get("energy_per_iter_j"))
    counts = group["estimator"].fillna("").astype(str).value_counts() if "estimator" in group else {}
    estimators = {str(k): int(v) for k, v in dict(counts).items() if k}
    return summary_bound(per_iter, bounds), estimators
