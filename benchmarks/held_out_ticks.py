"""A truth from the counter itself: every other tick held out.

Between its ticks the energy counter is exact, so its value at a tick is the true energy up to
that instant (give or take the tick's stamp). Hide every other tick, compute the default
number as a run does from what is left (the fused power, the estimator chosen at each edge, the
random bound), for windows whose edges are hidden ticks, and compare with the counter at those
ticks: the error of a window against a truth that no model of the load made, and whether the
stated bound holds it. Both parities of ticks are held out in turn.

The truth has an error of its own: the hidden ticks' stamps. Their spread is measured on the run
itself (``stamp_sd_s``: the ticks' robust distance from the counter's update grid), and each
window's truth carries it at the power around its two hidden ticks; the share of windows inside
the bound widened by that much tells a bound that is short from a truth that is noisy.

What differs from a run: the estimator sees tick intervals twice as long (~200 ms), so its
errors are those of a coarser counter, not smaller; and the hidden tick's own stamp (within
±2 ms, sd ~0.5 ms in steady load; ``tick_stamps.py``) is part of the truth's error: at 700 W,
0.35 J at each edge.

Used by ``step_family.py`` for every configuration it records (steady load and load steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pandas as pd
from tick_stamps import grid_residual

from energyframe.core.edge import CounterTicks, Evidence, Span, counter_window
from energyframe.core.fusion import fused_channels
from energyframe.core.samples import SampleSeries
from energyframe.core.stats import Z95
from energyframe.core.tickgrid import TickGrid, robust_sd

#: windows from a hidden tick to the k-th hidden tick after it: ~200 ms and ~1 s
SPANS = {"200 ms": 1, "1 s": 5}


def stamp_sd_s(times_s: np.ndarray) -> float:
    """How far the ticks' stamps spread, 1 sigma, from the run itself: 1.4826 times their median
    distance from the counter's update grid (``tick_stamps.grid_residual``; robust, so that a
    few late ticks do not set it). Units: s."""
    t = np.asarray(times_s, dtype=float)
    return robust_sd(grid_residual(t)) if t.size >= 22 else math.nan


def held_out(channels: Mapping, series: Mapping[str, SampleSeries], counter: str = "gpu0") -> dict[str, np.ndarray]:
    """Per span name, an array of windows (truth, energy, bound, the truth's own sd) in J, both
    parities held out. The truth's sd is the hidden ticks' stamp spread (``stamp_sd_s``) at the
    fused power around each.

    ``series`` are the run's placed series (each channel's timing applied), as a run fuses them.
    """
    ticks = series[counter]
    index = np.arange(len(ticks))
    resolution_s = 2.0 * float(np.median(np.diff(ticks.times_s)))
    spread_s = stamp_sd_s(ticks.times_s)
    out: dict[str, list] = {name: [] for name in SPANS}
    for parity in (0, 1):
        kept = index % 2 != parity
        reduced = dict(series)
        reduced[counter] = SampleSeries(ticks.times_s[kept], ticks.values[kept])
        results: dict = {}
        _, fused = fused_channels(channels, reduced, {}, results=results)
        if counter not in results:
            continue
        evidence = Evidence.of(results[counter])
        kept_series, power = fused[counter], evidence.fusion.series
        # as a run reads its counter: the fused power's evidence, the ticks checked against their grid
        view = CounterTicks(series=kept_series, evidence=evidence, grid=TickGrid.check(kept_series.times_s))
        channel = replace(channels[counter], resolution_s=resolution_s)
        hidden_t, hidden_e = ticks.times_s[~kept], ticks.values[~kept]
        hidden_w = np.interp(hidden_t, power.times_s, power.values)
        for name, k in SPANS.items():
            for i in range(1, hidden_t.size - k - 1):  # both edges inside the reduced ticks
                span = Span(start_s=hidden_t[i], end_s=hidden_t[i + k])
                w = counter_window(channel=channel, series=kept_series, span=span, ticks=view)
                truth_sd = spread_s * math.hypot(hidden_w[i], hidden_w[i + k])
                out[name].append((hidden_e[i + k] - hidden_e[i], w.energy_j, w.random_j, truth_sd))
    return {name: np.array(rows, dtype=float).reshape(-1, 4) for name, rows in out.items()}


def least_ratio(error: np.ndarray) -> float:
    """The ratio (median bound over median |error|) of the narrowest bound of one size that holds
    95 % of these errors: their 95th percentile over their median. A bound that does not know
    which windows will be off cannot be narrower and still hold 95 %, so no such bound reads a
    smaller ratio on these windows; a Gaussian error reads 2.91 (1.96 / 0.674)."""
    error = np.abs(np.asarray(error, dtype=float))
    error = error[np.isfinite(error)]
    if not error.size:
        return math.nan
    return float(np.quantile(error, 0.95) / max(np.median(error), 1e-12))


def rank_correlation(error: np.ndarray, bound: np.ndarray) -> float:
    """How well a bound tells which windows will be off: the rank correlation (Spearman's, ties
    at their mean rank) of the windows' |error| with their bound. 1: the larger the bound, the
    larger the error, always; 0: the bound's size says nothing of which windows err. Only a bound
    that ranks the errors can read a ratio below ``least_ratio``. NaN with fewer than 3 windows
    or where either side is constant."""
    ranks = pd.DataFrame({"error": np.abs(np.asarray(error, dtype=float)), "bound": np.asarray(bound, dtype=float)})
    ranks = ranks[np.isfinite(ranks).all(axis=1)].rank()
    if len(ranks) < 3 or (ranks.nunique() < 2).any():
        return math.nan
    return float(np.corrcoef(ranks["error"], ranks["bound"])[0, 1])


def bound_figures(error: np.ndarray, bound: np.ndarray) -> dict:
    """How a stated bound did on these windows (|error| and bound in the same unit): the share
    whose truth lies inside it, the median bound over the median |error| (the bound is not
    vacuous where this is at most 3), the least that ratio could be (``least_ratio``), and how
    well the bound ranks the errors (``rank_correlation``)."""
    error = np.abs(np.asarray(error, dtype=float))
    bound = np.asarray(bound, dtype=float)
    return {
        "coverage": float(np.mean(error <= bound)),
        "ratio": float(np.median(bound) / max(np.median(error), 1e-12)),
        "least_ratio": least_ratio(error),
        "rank_correlation": rank_correlation(error, bound),
    }


def held_out_stats(windows: dict[str, np.ndarray]) -> dict[str, dict]:
    """Per span: median / max |error| %, the share inside the bound, median bound / median error,
    the least ratio any bound of one size could read here (``least_ratio``), and the share inside
    the bound widened by the truth's own 95 % (its stamps; ``coverage_with_truth_stamps``)."""
    stats = {}
    for name, w in windows.items():
        ok = np.all(np.isfinite(w[:, :3]), axis=1) & (w[:, 0] > 0) if w.size else np.zeros(0, bool)
        if not np.any(ok):
            stats[name] = {"n": 0}
            continue
        truth, energy, bound, truth_sd = w[ok].T
        error = np.abs(energy - truth)
        stats[name] = {
            "n": int(ok.sum()),
            "median_abs_pct": float(np.median(100 * error / truth)),
            "max_abs_pct": float(np.max(100 * error / truth)),
            **bound_figures(error, bound),
            # NaN where the run has too few ticks to measure their spread
            "coverage_with_truth_stamps": float(np.mean(error <= np.hypot(bound, Z95 * truth_sd)))
            if np.all(np.isfinite(truth_sd))
            else math.nan,
        }
    return stats


def stamp_spread_ms(times_s: np.ndarray) -> dict[str, float]:
    """How far the ticks lie from the counter's regular update grid (``tick_stamps.py``): their
    robust sd (``stamp_sd_s``), the 95th and 99th percentile and the largest distance, in ms. A
    tick stamped late shows here."""
    t = np.asarray(times_s, dtype=float)
    if t.size < 22:
        return {"sd": math.nan, "p95": math.nan, "p99": math.nan, "max": math.nan}
    r = grid_residual(t)
    a = np.abs(r) * 1e3
    return {
        "sd": 1e3 * robust_sd(r),
        "p95": float(np.quantile(a, 0.95)),
        "p99": float(np.quantile(a, 0.99)),
        "max": float(a.max()),
    }
