"""Each tick interval shaped by the first power series that covers it (steps 3 and 4 of
``fusion.py``): the local shift that makes the series' integral agree with the counter's
increment within the series' typical mismatch, the interval's own scale, and the knots of the
fused power on the counter's timeline."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .samples import SampleSeries
from .shapes import OffsetEstimate, Signal

#: the local shift is searched on this many steps each way
SHIFT_STEPS = 20
#: tick intervals whose local shifts are searched at once
SHIFT_CHUNK = 20_000


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``range(lo[i], hi[i])`` and, for each element, its ``i``."""
    counts = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(lo.size), counts)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return np.arange(int(counts.sum())) + starts, owner


def local_shifts(
    signal: Signal, a: np.ndarray, b: np.ndarray, e: np.ndarray, gain: float, noise_j: float, reach_s: float
) -> np.ndarray:
    """Per interval, the least shift d (the series read at t + d) within ``±reach_s`` whose
    scaled integral matches ``e`` within ``noise_j`` (or as well as any shift does)."""
    grid = np.linspace(-reach_s, reach_s, 2 * SHIFT_STEPS + 1)
    out = np.zeros(a.size)
    for lo in range(0, a.size, SHIFT_CHUNK):  # bounded memory on hours-long runs
        part = slice(lo, lo + SHIFT_CHUNK)
        ap, bp, ep = a[part], b[part], e[part]
        mismatch = np.abs(gain * np.stack([signal.between(ap + d, bp + d) for d in grid]) - ep)
        enough = np.maximum(mismatch.min(axis=0), noise_j) * (1 + 1e-9)
        distance = np.where(mismatch <= enough, np.abs(grid)[:, None], np.inf)
        d = grid[np.argmin(distance, axis=0)]
        out[part] = np.where(mismatch[SHIFT_STEPS] <= max(noise_j, 0.0), 0.0, d)
    return out


@dataclass
class Plan:
    """Per tick interval: which series shapes it (-1: none), its scale, its local shift, how
    far the shape missed the counter before scaling, and the series' overall gain."""

    mode: np.ndarray
    scale: np.ndarray
    shift: np.ndarray
    mismatch: np.ndarray
    gain: np.ndarray


def shape_intervals(
    plan: Plan,
    *,
    k: int,
    signal: Signal,
    covered: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    increments: np.ndarray,
    est: OffsetEstimate,
    reach_s: float,
    room: np.ndarray,
    max_scale: float,
) -> None:
    """Let series ``k`` shape the intervals it covers (``covered``: per tick interval ``[a, b]``,
    of increment ``increments``) that no earlier series shapes, shifted by up to ``reach_s``
    where it covers the interval that much wider (``room``)."""
    todo = np.flatnonzero((plan.mode == -1) & covered)
    if todo.size == 0:
        return
    ai, bi, ei = a[todo], b[todo], increments[todo]
    s0 = signal.between(ai, bi)
    gain = _gain(est, s0, ei)
    d = np.zeros(todo.size)
    if reach_s > 0 and gain > 0:
        near = room[todo]
        noise = est.residual_j if math.isfinite(est.residual_j) else 0.0
        d[near] = local_shifts(signal, ai[near], bi[near], ei[near], gain, noise, reach_s)
    s = signal.between(ai + d, bi + d)
    with np.errstate(invalid="ignore", divide="ignore"):
        k_i = np.where(s > 0, ei / s, np.nan)
    usable = np.isfinite(k_i)
    if gain > 0:
        usable &= (k_i <= gain * max_scale) & (k_i >= gain / max_scale)
    chosen = todo[usable]
    plan.mode[chosen] = k
    plan.scale[chosen] = k_i[usable]
    plan.shift[chosen] = d[usable]
    plan.mismatch[chosen] = (ei - gain * s0)[usable] if gain > 0 else np.nan
    plan.gain[chosen] = gain


def _gain(est: OffsetEstimate, s0: np.ndarray, increments: np.ndarray) -> float:
    """The series' overall gain against the counter: its offset estimate's where that was
    applied, else the counter's energy over the series' integral over these intervals (NaN
    where the series integrates to nothing)."""
    gain = est.gain if est.applied and est.gain > 0 else math.nan
    if not gain > 0:
        gain = float(increments[s0 > 0].sum() / s0[s0 > 0].sum()) if np.any(s0 > 0) else math.nan
    return gain


def own_scales(plan: Plan) -> np.ndarray:
    """Each interval's own scale over its series' overall gain (1 where unknown)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        own = plan.scale / plan.gain
    return np.where((plan.mode >= 0) & np.isfinite(own) & (own > 0), own, 1.0)


def assemble(
    plan: Plan,
    signals: Sequence[Signal | None],
    t: np.ndarray,
    origin: float,
    increments: np.ndarray,
    valid: np.ndarray,
) -> SampleSeries:
    """The knots of every interval, in order, on the caller's timeline."""
    a, b = t[:-1] - origin, t[1:] - origin
    n = a.size
    mode, scale, shift = plan.mode, plan.scale, plan.shift
    flat = np.where(valid, increments / (b - a), np.nan)
    parts = []  # (interval, rank: 0 start / 1 inside / 2 end, time, power)
    for rank, x in ((0, a), (2, b)):
        v = flat.copy()
        for k, signal in enumerate(signals):
            sel = mode == k
            if signal is not None and np.any(sel):
                # at a step exactly on a tick, each interval takes its own side of it
                value = signal.value_after if rank == 0 else signal.value_before
                v[sel] = scale[sel] * value(x[sel] + shift[sel])
        parts.append((np.arange(n), np.full(n, rank), x, v))
    for k, signal in enumerate(signals):
        mine = np.flatnonzero(mode == k)
        if signal is None or mine.size == 0:
            continue
        lo = np.searchsorted(signal.t, a[mine] + shift[mine], side="right")
        hi = np.searchsorted(signal.t, b[mine] + shift[mine], side="left")
        knot, owner = _ranges(lo, hi)
        interval = mine[owner]
        times = signal.t[knot] - shift[interval]
        parts.append((interval, np.ones(knot.size, dtype=int), times, scale[interval] * signal.v[knot]))
    ids, ranks, times, values = (np.concatenate(c) for c in zip(*parts))
    # a step inside a series is two knots at one time: keep their order
    order = np.lexsort((np.arange(ids.size), times, ranks, ids))
    ids, ranks, times, values = ids[order], ranks[order], times[order], values[order]
    # back on the caller's timeline: the ticks' own times (adding the origin back could move them
    # by a rounding step on Unix seconds), and the knots inside an interval kept inside it
    absolute = np.clip(times + origin, t[ids], t[ids + 1])
    absolute[ranks == 0] = t[ids[ranks == 0]]
    absolute[ranks == 2] = t[ids[ranks == 2] + 1]
    # rounding moved the inner knots a little: rescale each interval once more, on the caller's
    # timeline, so that its trapezoids there add up to the increment
    same = ids[1:] == ids[:-1]
    areas = np.where(same, np.diff(absolute) * (values[1:] + values[:-1]) / 2, 0.0)
    area = np.bincount(ids[:-1], weights=areas, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        fix = np.where(valid & (area > 0), increments / area, 1.0)
    return SampleSeries(absolute, values * fix[ids])
