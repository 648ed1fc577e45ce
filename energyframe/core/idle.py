"""The idle baseline: each channel's power while nothing ran, what it takes from a window's
energy (the dynamic energy and its bound), and why a window reads below it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from ..model import split_flags
from .vocabulary import IDLE_ABOVE_LOAD

#: how far a saved time may be from the one measured (Unix seconds in a float64 hold 0.24 us):
#: a dynamic energy within the baseline's power times this is zero, not below the load. Units: s.
TIME_ROUNDING_S = 1e-6


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


def dynamic_columns(
    baseline: IdleBaseline | None, energy_j: float, bound_j: float, duration_s: float, iterations: int
) -> tuple[dict[str, float], tuple[str, ...]]:
    """windows.csv's dynamic energy of a window (``energy_j`` less the baseline's power over its
    ``duration_s``), its bound (``bound_j`` and the baseline's in quadrature) and per iteration;
    and ``idle_above_load`` where it reads below zero. Nothing without a baseline."""
    if baseline is None:
        return {}, ()
    dynamic = energy_j - baseline.power_w * duration_s
    columns = {
        "dynamic_energy_j": dynamic,
        "dynamic_energy_bound_j": math.hypot(bound_j, baseline.bound_w * duration_s),
        "dynamic_energy_per_iter_j": dynamic / iterations if iterations else math.nan,
    }
    below = dynamic < -baseline.power_w * TIME_ROUNDING_S
    return columns, ((IDLE_ABOVE_LOAD,) if below else ())


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
