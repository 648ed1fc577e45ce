"""Per-phase summaries of the windows: median and spread over the trials, the bound of the
median, the estimators the windows took, the precision reached, and the phase flags."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..model import split_flags
from .stats import Spread
from .uncertainty import Bound, median_ci_j, summary_bound
from .vocabulary import NOISY, PARTIAL


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
    if windows.empty:
        return []
    return [
        _summary(str(phase), str(channel), group, work.get(str(phase), {}))
        for (phase, channel), group in windows.groupby(["phase", "channel"], sort=False)
    ]


def _summary(phase: str, channel: str, group: pd.DataFrame, work: Mapping[str, float]) -> PhaseSummary:
    """One phase on one channel: its windows' ``group``."""
    time_spread = Spread.of(group["time_per_iter_s"])
    energy_spread = Spread.of(group["energy_per_iter_j"])
    trials = int(group["trial"].nunique())
    dynamic = None
    if group["dynamic_energy_per_iter_j"].notna().any():
        dynamic = Spread.of(group["dynamic_energy_per_iter_j"])
    bound, estimators = _phase_bound(group)
    return PhaseSummary(
        phase=phase,
        channel=channel,
        trials=trials,
        iterations=int(group["iterations"].median()),
        time_per_iter_s=time_spread,
        energy_per_iter_j=energy_spread,
        mean_power_w=Spread.of(group["mean_power_w"]),
        dynamic_energy_per_iter_j=dynamic,
        flags=_phase_flags(group, time_spread.noisy or energy_spread.noisy, bool(channel) and energy_spread.n < trials),
        work=dict(work),
        energy_bound=bound,
        estimators=estimators,
        precision_pct=_precision(group, bool(channel)),
    )


def _phase_flags(group: pd.DataFrame, noisy: bool, partial: bool) -> tuple[str, ...]:
    """The union of the windows' flags, in order, then ``noisy`` and ``partial`` where they hold
    (``partial``: the median covers ``energy_per_iter_j.n`` of the trials)."""
    flags: list[str] = []
    for text in group["flags"]:
        flags.extend(f for f in split_flags(text) if f not in flags)
    for flag, holds in ((NOISY, noisy), (PARTIAL, partial)):
        if holds and flag not in flags:
            flags.append(flag)
    return tuple(flags)


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
    # an all-NaN column is float64: fill it as text (pandas 4 refuses a str fill value there)
    counts = group["estimator"].astype(object).fillna("").astype(str).value_counts() if "estimator" in group else {}
    estimators = {str(k): int(v) for k, v in dict(counts).items() if k}
    return summary_bound(per_iter, bounds), estimators
