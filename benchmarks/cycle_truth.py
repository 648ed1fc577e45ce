"""Ground truth for windows on a repeated load, from the energy counter alone.

A load that repeats the same cycle many times (GEMMs for 0.5 s, idle for 0.5 s) has one mean
power profile around each of its edges: power as a function of the time since the load went on,
and since it went off. The counter is exact between its ticks, and its ticks fall at a different
phase of every cycle (the cycles are spaced by random idle gaps), so hundreds of cycles observe
each part of the profile through tick intervals that start and end at every phase. Each tick
interval says: the profile, integrated over the part of the cycle that the interval covers,
equals the counter's increment. ``fit_profile`` solves these equations by least squares for the
profile's power in bins of ``bin_s`` from each edge (with a weak penalty on differences between
neighbouring bins, which only decides what the data leaves open).

``window_truth`` then gives each window its energy: the counter's exact increment between the
first and the last tick inside the window, plus, at each edge, the share of the counter's
increment over the edge's tick interval that the profile puts inside the window. The counter is
the truth between ticks; the profile is used only to split the two edge intervals, and it is the
mean of many cycles observed at every phase, not one sensor's reading of this cycle.

Nothing here uses the 20-ms buffer or instant power, so they can be judged against it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: profile bin width. Units: s.
BIN_S = 0.005
#: weight of the penalty on differences between neighbouring bins, in bin widths. Cycles are
#: never quite identical, and what the ticks cannot see (patterns that repeat every ~100 ms)
#: would otherwise pick up their differences; much more blurs a real 40-ms decay (simulated
#: in tests/benchmarks/test_cycle_truth.py)
SMOOTHING = 1.0


@dataclass(frozen=True)
class Segments:
    """A load as segments: each starts at ``starts_s[i]``, has kind ``kinds[i]`` (``on``,
    ``off``), and lasts until the next start; the last one ends at ``end_s``. Units: s."""

    starts_s: np.ndarray
    kinds: tuple[str, ...]
    end_s: float

    def __post_init__(self) -> None:
        starts = np.asarray(self.starts_s, dtype=float)
        if starts.size == 0 or starts.size != len(self.kinds):
            raise ValueError("need one kind per segment start, and at least one segment")
        if np.any(np.diff(starts) <= 0) or self.end_s <= starts[-1]:
            raise ValueError("segment starts must ascend and the end must follow the last start")
        object.__setattr__(self, "starts_s", starts)

    @property
    def ends_s(self) -> np.ndarray:
        return np.append(self.starts_s[1:], self.end_s)

    @classmethod
    def from_cycles(cls, on_starts_s, off_starts_s, end_s: float) -> Segments:
        """Alternating ``on`` and ``off`` segments: each cycle's load starts at ``on_starts_s``
        and stops at ``off_starts_s``; it is idle until the next cycle (or ``end_s``)."""
        on = np.asarray(on_starts_s, dtype=float)
        off = np.asarray(off_starts_s, dtype=float)
        if on.size != off.size:
            raise ValueError(f"{on.size} on edges but {off.size} off edges")
        return cls(np.column_stack((on, off)).ravel(), ("on", "off") * on.size, float(end_s))


@dataclass(frozen=True)
class CycleProfile:
    """Mean power by time since each kind of segment started. Units: s, W, J.

    Args:
        bin_s: bin width.
        power_w: per kind, the power in consecutive bins from the segment's start.
        residual_j: RMS of counter increment minus the profile's energy, per tick interval.
        intervals: tick intervals fitted.
    """

    bin_s: float
    power_w: Mapping[str, np.ndarray]
    residual_j: float
    intervals: int

    def crossing_s(self, kind: str, fraction: float = 0.5) -> float:
        """Time after the segment's start at which the profile first crosses ``fraction`` of
        the way from its first bin's predecessor level to its settled level (the median of
        the bins after 0.2 s). For ``on`` the predecessor is the settled ``off`` level and vice
        versa. NaN when the profile does not cross. Units: s."""
        p = self.power_w[kind]
        other = [k for k in self.power_w if k != kind]
        if not other:
            return math.nan
        skip = int(round(0.2 / self.bin_s))
        before = float(np.median(self.power_w[other[0]][skip:]))
        after = float(np.median(p[skip:]))
        level = before + fraction * (after - before)
        above = (p - level) * np.sign(after - before) >= 0
        hits = np.flatnonzero(above)
        if hits.size == 0:
            return math.nan
        i = int(hits[0])
        # the profile's values sit at bin centres; the edge itself is at the predecessor level
        t_prev, prev = ((i - 0.5) * self.bin_s, p[i - 1]) if i > 0 else (0.0, before)
        t_here = (i + 0.5) * self.bin_s
        frac = (level - prev) / (p[i] - prev) if p[i] != prev else 0.0
        return t_prev + frac * (t_here - t_prev)


class _Pieces:
    """The profile laid along the timeline: constant pieces of at most one bin each."""

    def __init__(self, segments: Segments, kinds: Sequence[str], bins: Mapping[str, int], bin_s: float):
        edges, columns = [], []
        offset = {k: sum(bins[x] for x in kinds[:i]) for i, k in enumerate(kinds)}
        for start, end, kind in zip(segments.starts_s, segments.ends_s, segments.kinds):
            n = int(math.ceil((end - start) / bin_s - 1e-9))
            local = start + bin_s * np.arange(n)
            edges.append(local)
            # a segment longer than the profile (fitted on other cycles) keeps its last bin
            columns.append(offset[kind] + np.minimum(np.arange(n), bins[kind] - 1))
        self.lo = np.concatenate(edges)
        self.hi = np.append(self.lo[1:], segments.end_s)
        self.column = np.concatenate(columns)

    def overlap_matrix(self, a: np.ndarray, b: np.ndarray, n_columns: int) -> np.ndarray:
        """Time each interval ``[a_i, b_i]`` spends in each column's bins. Units: s."""
        m = np.zeros((a.size, n_columns))
        first = np.searchsorted(self.hi, a, side="right")
        last = np.searchsorted(self.lo, b, side="left")
        for i in range(a.size):
            lo, hi = self.lo[first[i] : last[i]], self.hi[first[i] : last[i]]
            width = np.minimum(hi, b[i]) - np.maximum(lo, a[i])
            np.add.at(m[i], self.column[first[i] : last[i]], np.maximum(width, 0.0))
        return m


def _bins(segments: Segments, bin_s: float) -> tuple[list[str], dict[str, int]]:
    kinds = sorted(set(segments.kinds))
    lengths = segments.ends_s - segments.starts_s
    bins = {
        k: int(math.ceil(max(lengths[i] for i, x in enumerate(segments.kinds) if x == k) / bin_s - 1e-9))
        for k in kinds
    }
    return kinds, bins


def _increments(ticks_s: np.ndarray, counter_j: np.ndarray, segments: Segments):
    t = np.asarray(ticks_s, dtype=float)
    e = np.asarray(counter_j, dtype=float)
    ok = np.isfinite(t) & np.isfinite(e)
    t, e = t[ok], e[ok]
    inc = np.diff(e)
    a, b = t[:-1], t[1:]
    use = (inc >= 0) & (a >= segments.starts_s[0]) & (b <= segments.end_s) & (b > a)
    return t, e, a[use], b[use], inc[use]


def fit_profile(
    ticks_s: np.ndarray,
    counter_j: np.ndarray,
    segments: Segments,
    bin_s: float = BIN_S,
    smoothing: float = SMOOTHING,
) -> CycleProfile:
    """The mean power profile of each kind of segment that best explains the counter.

    Args:
        ticks_s: the counter's tick times. Units: s.
        counter_j: the counter at each tick. Units: J.
        segments: where each segment starts, its kind, and where the last one ends.
        bin_s: the profile's resolution. Units: s.
        smoothing: weight of the penalty on differences between neighbouring bins of one kind,
            in bin widths; small, so that it only fills what the ticks leave undetermined.
    """
    _, _, a, b, inc = _increments(ticks_s, counter_j, segments)
    kinds, bins = _bins(segments, bin_s)
    n_cols = sum(bins.values())
    if a.size < n_cols:
        raise ValueError(f"{a.size} tick intervals cannot determine {n_cols} profile bins: run more cycles")
    pieces = _Pieces(segments, kinds, bins, bin_s)
    design = pieces.overlap_matrix(a, b, n_cols)
    rows = []
    col = 0
    for k in kinds:
        for j in range(bins[k] - 1):
            r = np.zeros(n_cols)
            r[col + j], r[col + j + 1] = -1.0, 1.0
            rows.append(r)
        col += bins[k]
    weight = smoothing * bin_s
    lhs = np.vstack([design, weight * np.array(rows)]) if rows else design
    rhs = np.concatenate([inc, np.zeros(len(rows))])
    # the normal equations: the penalty keeps them well conditioned, and they are solved in
    # milliseconds where an SVD of the tall system takes seconds
    solution = np.linalg.solve(lhs.T @ lhs, lhs.T @ rhs)
    residual = inc - design @ solution
    power, col = {}, 0
    for k in kinds:
        power[k] = solution[col : col + bins[k]]
        col += bins[k]
    return CycleProfile(bin_s, power, float(np.sqrt(np.mean(residual**2))), int(a.size))


def _profile_cumulative(profile: CycleProfile, segments: Segments):
    kinds = sorted(profile.power_w)
    bins = {k: profile.power_w[k].size for k in kinds}
    pieces = _Pieces(segments, kinds, bins, profile.bin_s)
    values = np.concatenate([profile.power_w[k] for k in kinds])[pieces.column]
    cum = np.concatenate(([0.0], np.cumsum(values * (pieces.hi - pieces.lo))))

    def integral_to(x: np.ndarray) -> np.ndarray:
        x = np.clip(x, pieces.lo[0], pieces.hi[-1])
        j = np.clip(np.searchsorted(pieces.lo, x, side="right") - 1, 0, pieces.lo.size - 1)
        return cum[j] + (x - pieces.lo[j]) * values[j]

    return integral_to


def profile_energy(profile: CycleProfile, segments: Segments, windows_s: np.ndarray) -> np.ndarray:
    """Each window's energy from the mean profile alone (no counter): the energy of the mean
    cycle over the window. Units: J."""
    w = np.asarray(windows_s, dtype=float).reshape(-1, 2)
    integral_to = _profile_cumulative(profile, segments)
    out = integral_to(w[:, 1]) - integral_to(w[:, 0])
    outside = (w[:, 0] < segments.starts_s[0]) | (w[:, 1] > segments.end_s)
    return np.where(outside, np.nan, out)


def window_truth(
    profile: CycleProfile,
    ticks_s: np.ndarray,
    counter_j: np.ndarray,
    segments: Segments,
    windows_s: np.ndarray,
) -> np.ndarray:
    """Each window's energy: the counter between the ticks inside it, plus the profile's share
    of the counter's increment over each edge's tick interval. NaN where an edge's tick interval
    is not inside the segments or crosses a counter reset. Units: J.

    Args:
        windows_s: (n, 2) window starts and ends. Units: s.
    """
    t, e, *_ = _increments(ticks_s, counter_j, segments)
    w = np.asarray(windows_s, dtype=float).reshape(-1, 2)
    integral_to = _profile_cumulative(profile, segments)
    out = np.full(w.shape[0], np.nan)
    for n, (x, y) in enumerate(w):
        i = int(np.searchsorted(t, x, side="right")) - 1  # tick interval holding the start
        j = int(np.searchsorted(t, y, side="left"))  # tick at or after the end
        if i < 0 or j >= t.size or t[i] < segments.starts_s[0] or t[j] > segments.end_s:
            continue
        if np.any(np.diff(e[i : j + 1]) < 0):
            continue
        if j == i + 1:  # both edges in one tick interval
            whole = integral_to(t[j]) - integral_to(t[i])
            out[n] = (e[j] - e[i]) * (integral_to(y) - integral_to(x)) / whole if whole > 0 else np.nan
            continue
        first = i + 1  # first tick after the start
        last = j - 1  # last tick before the end
        head_whole = integral_to(t[first]) - integral_to(t[i])
        tail_whole = integral_to(t[j]) - integral_to(t[last])
        if head_whole <= 0 or tail_whole <= 0:
            continue
        head = (e[first] - e[i]) * (integral_to(t[first]) - integral_to(x)) / head_whole
        tail = (e[j] - e[last]) * (integral_to(y) - integral_to(t[last])) / tail_whole
        out[n] = head + (e[last] - e[first]) + tail
    return out


#: the smoothings the truth is fitted again with, as factors of the one it uses
CHECK_SMOOTHING = (0.25, 4.0)


def other_truths(
    ticks_s: np.ndarray,
    counter_j: np.ndarray,
    cycles_s: np.ndarray,
    windows_s: np.ndarray,
    cycle_of: np.ndarray,
    bin_s: float = BIN_S,
    smoothing: float = SMOOTHING,
) -> dict[str, np.ndarray]:
    """Each window's truth again from other fits of the profile, to see how far the truth itself
    moves: ``other_half``, the profile fitted on the other half of the cycles than the one the
    window lies in (NaN with too few cycles for half of them), and ``smoothing xF`` for each
    factor F of ``CHECK_SMOOTHING``. Units: J.

    Args:
        cycles_s: (n, 3) per cycle, where its load starts, where it stops, and where its idle
            ends (the next cycle's start, or the run's end). Units: s.
        windows_s: (m, 2) window starts and ends. Units: s.
        cycle_of: per window, the cycle it lies in (by index into ``cycles_s``).
    """
    c = np.asarray(cycles_s, dtype=float).reshape(-1, 3)
    segments = Segments.from_cycles(c[:, 0], c[:, 1], float(c[-1, 2]))
    half = c.shape[0] // 2
    out: dict[str, np.ndarray] = {}
    try:
        first = fit_profile(ticks_s, counter_j, Segments.from_cycles(c[:half, 0], c[:half, 1], float(c[half - 1, 2])), bin_s, smoothing)
        second = fit_profile(ticks_s, counter_j, Segments.from_cycles(c[half:, 0], c[half:, 1], float(c[-1, 2])), bin_s, smoothing)
        out["other_half"] = np.where(
            np.asarray(cycle_of) < half,
            window_truth(second, ticks_s, counter_j, segments, windows_s),
            window_truth(first, ticks_s, counter_j, segments, windows_s),
        )
    except ValueError:  # too few cycles for a profile from half of them
        out["other_half"] = np.full(np.asarray(windows_s).reshape(-1, 2).shape[0], np.nan)
    for f in CHECK_SMOOTHING:
        profile = fit_profile(ticks_s, counter_j, segments, bin_s, smoothing * f)
        out[f"smoothing x{f:g}"] = window_truth(profile, ticks_s, counter_j, segments, windows_s)
    return out


# -- the idle truth -------------------------------------------------------------------------------

#: an edge's tick interval is in settled idle when it begins at least this long after the load
#: stopped (the burst's power has decayed to idle within ~50 ms on an H100). Units: s.
SETTLE_S = 0.06
#: the idle power of one gap is pooled with this many gaps on either side: a gap holds one or two
#: whole tick intervals, each off by its two stamps' errors
IDLE_POOL = 3


def idle_truth(
    ticks_s: np.ndarray,
    counter_j: np.ndarray,
    segments: Segments,
    windows_s: np.ndarray,
    settle_s: float = SETTLE_S,
    pool: int = IDLE_POOL,
) -> np.ndarray:
    """Each window's energy where both its edges lie in settled idle, NaN elsewhere. Units: J.

    A window opened after a device sync on an idle GPU has none of its work before its start,
    and the GPU draws its idle power there. When the tick before each edge lies in the idle
    that precedes it, the counter between those two ticks is exact, and the window's energy is
    that increment, less the idle power from the first tick to the start, plus the idle power
    from the last tick to the end. Only the idle power is estimated: the counter's own mean
    over the whole tick intervals of settled idle in the gap and ``pool`` gaps either side (or,
    where those hold none, twice as many, and so on). Its
    error is the idle power's drift and the two ticks' stamps at idle power (~0.15 J each at
    130 W), not the shape of any burst: the cycle truth, by contrast, splits an edge's interval
    by the mean cycle's profile, and a cycle whose burst differs from the mean moves that split.

    Args:
        segments: ``on`` and ``off`` segments; an ``off`` segment is idle.
        windows_s: (n, 2) window starts and ends. Units: s.
    """
    t = np.asarray(ticks_s, dtype=float)
    e = np.asarray(counter_j, dtype=float)
    ok = np.isfinite(t) & np.isfinite(e)
    t, e = t[ok], e[ok]
    w = np.asarray(windows_s, dtype=float).reshape(-1, 2)
    out = np.full(w.shape[0], np.nan)
    idle = [i for i, k in enumerate(segments.kinds) if k == "off"]
    if t.size < 2 or not idle:
        return out
    lo = segments.starts_s[idle] + settle_s  # settled idle of each gap: [lo, hi]
    hi = segments.ends_s[idle]
    inc, span = np.diff(e), np.diff(t)
    whole = (inc >= 0)[None, :] & (t[:-1][None, :] >= lo[:, None]) & (t[1:][None, :] <= hi[:, None])
    gap_j, gap_s = whole @ inc, whole @ span
    power = np.full(lo.size, np.nan)
    for g in range(lo.size):
        reach = max(pool, 1)
        while reach <= lo.size:  # a gap may hold no whole tick interval of settled idle
            near = slice(max(0, g - reach), g + reach + 1)
            if gap_s[near].sum() > 0:
                power[g] = gap_j[near].sum() / gap_s[near].sum()
                break
            reach *= 2

    def settled(x: float) -> tuple[int, int]:
        """The tick at or before ``x`` and the gap whose settled idle holds [tick, x] (-1: none)."""
        i = int(np.searchsorted(t, x, side="right")) - 1
        if i < 0:
            return i, -1
        g = int(np.searchsorted(lo, t[i], side="right")) - 1
        return i, g if g >= 0 and x <= hi[g] else -1

    for n, (x, y) in enumerate(w):
        (i, ga), (k, gb) = settled(x), settled(y)
        if ga < 0 or gb < 0 or k <= i or np.any(inc[i:k] < 0):
            continue
        out[n] = (e[k] - e[i]) - power[ga] * (x - t[i]) + power[gb] * (y - t[k])
    return out
