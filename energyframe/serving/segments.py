"""The segments as the run measured them: windows.csv's rows of the segment phases, summed over
the primary channels, and the window over the whole load that conservation is checked against.

The load's windows are three phases: ``serve`` (one window from the first send to the last end),
``serve.busy`` (the segments some request was active in) and ``serve.idle`` (those it was not).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .attribution import Segments

#: the window from the first request's send to the last one's end
SPAN_PHASE = "serve"
#: the segments some request was active in, and those none was
BUSY_PHASE, IDLE_PHASE = "serve.busy", "serve.idle"


@dataclass(frozen=True)
class SpanEnergy:
    """The load's whole window as measured. Units: s, J.

    Args:
        start_s, end_s: its edges (windows.csv's Unix seconds).
        energy_j, bound_j: its energy over the primary channels and the 95 % bound.
        dynamic_j, dynamic_bound_j: the same above the idle baseline (NaN without one).
        random_j, baseline_j: the parts of those bounds that differ between two runs on one
            board: where the edges fall between the counter's ticks, and the idle baseline's own
            bound (the sensor's stated accuracy, the rest, is the same in both). NaN: unknown.
    """

    start_s: float
    end_s: float
    energy_j: float
    bound_j: float
    dynamic_j: float = math.nan
    dynamic_bound_j: float = math.nan
    random_j: float = math.nan
    baseline_j: float = math.nan

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def _rows(windows: pd.DataFrame, phases: Sequence[str], primary: Sequence[str]) -> pd.DataFrame:
    rows = windows[windows["phase"].isin(phases)]
    if primary:
        rows = rows[rows["channel"].isin(primary)]
    return rows


def _channel_sum(rows: pd.DataFrame, column: str, n_channels: int) -> pd.Series:
    """Per window, the column summed over the channels (NaN unless every channel has it)."""
    if column not in rows.columns or n_channels == 0:
        return pd.Series(math.nan, index=rows.groupby(["phase", "trial"]).size().index)
    return rows.groupby(["phase", "trial"])[column].sum(min_count=n_channels)


def measured_segments(windows: pd.DataFrame, primary: Sequence[str]) -> Segments:
    """The segment windows in time order, with their energies over the primary channels."""
    rows = _rows(windows, (BUSY_PHASE, IDLE_PHASE), primary)
    if rows.empty:
        empty = np.zeros(0)
        return Segments(empty, empty, empty, empty, empty, empty, empty)
    n = len(primary)
    rows = rows.assign(
        random_sq=rows.get("energy_random_j", math.nan) ** 2,
        baseline_j=np.sqrt(
            np.maximum(
                rows.get("dynamic_energy_bound_j", math.nan) ** 2 - rows.get("energy_bound_j", math.nan) ** 2,
                0.0,
            )
        ),
    )
    edges = rows.groupby(["phase", "trial"])[["start_s", "end_s"]].first()
    table = edges.assign(
        energy_j=_channel_sum(rows, "energy_j", n),
        random_j=np.sqrt(_channel_sum(rows, "random_sq", n)),
        systematic_j=_channel_sum(rows, "energy_systematic_j", n),
        dynamic_j=_channel_sum(rows, "dynamic_energy_j", n),
        baseline_j=_channel_sum(rows, "baseline_j", n),
    ).sort_values("start_s")

    def column(name: str) -> np.ndarray:
        return table[name].to_numpy(dtype=float)

    return Segments(
        *(
            column(c)
            for c in ("start_s", "end_s", "energy_j", "random_j", "systematic_j", "dynamic_j", "baseline_j")
        )
    )


def measured_span(windows: pd.DataFrame, primary: Sequence[str]) -> SpanEnergy | None:
    """The ``serve`` window over the primary channels (``None`` when the load sent nothing)."""
    rows = _rows(windows, (SPAN_PHASE,), primary)
    if rows.empty:
        return None
    n = len(primary)
    energy = rows["energy_j"].sum(min_count=n) if n else math.nan
    random = math.sqrt(float((rows["energy_random_j"] ** 2).sum(min_count=n))) if n else math.nan
    systematic = float(rows["energy_systematic_j"].sum(min_count=n)) if n else math.nan
    baseline = float(
        np.sqrt(np.maximum(rows["dynamic_energy_bound_j"] ** 2 - rows["energy_bound_j"] ** 2, 0.0)).sum()
    )
    dynamic = float(rows["dynamic_energy_j"].sum(min_count=n)) if n else math.nan
    first = rows.iloc[0]
    return SpanEnergy(
        float(first["start_s"]),
        float(first["end_s"]),
        float(energy),
        math.hypot(random, systematic),
        dynamic,
        math.sqrt(random**2 + systematic**2 + baseline**2),
        random,
        baseline,
    )
