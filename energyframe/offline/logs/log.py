"""A power log read into channels and sample series, and the rows of one channel put in time order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...core.samples import DUPLICATE, MISSING, STEPPED, Rejected, SampleSeries, accept, merge_duplicates
from ...model import Channel
from .table import spacing
from .timestamps import iso

#: log kinds
SAMPLES = "samples"
POWER_CSV = "power-csv"
WATTSUP_CSV = "wattsup-csv"
NVIDIA_SMI = "nvidia-smi"
#: why a row is left out, beside the core's reasons: a value in a unit its header does not
#: promise, or in no unit energyframe knows (its windows are flagged ``invalid_reading``)
UNIT = "unit"


@dataclass(frozen=True)
class PowerLog:
    """A power log as channels and sample series. Times: Unix s; values as written, in W or J.

    Args:
        path: the file.
        kind: ``samples``, ``power-csv``, ``wattsup-csv`` or ``nvidia-smi``.
        channels: by name, in the log's order (STATE channels included).
        series: per channel, every row with a number, ascending in time (rows of one instant
            averaged, rows where the clock stepped back left out).
        missing: per channel, the times of rows that had no value (``[N/A]``, empty, text).
        primary: the channel a report is about (``sum``, ``gpu0``, the run's first primary).
        warnings: what was repaired or skipped while reading.
        skipped_lines: lines that were not rows of the log.
        run_meta: the content of the ``run.json`` beside a samples file, if it was readable.
        flagged: per channel and reason (``duplicate``, ``clock_step``, ``unit``), the times of
            rows that were merged or left out while reading: the windows near them are flagged.
    """

    path: Path
    kind: str
    channels: Mapping[str, Channel]
    series: Mapping[str, SampleSeries]
    missing: Mapping[str, np.ndarray]
    primary: str
    warnings: tuple[str, ...] = ()
    skipped_lines: int = 0
    run_meta: Mapping | None = field(default=None, repr=False)
    flagged: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)

    @property
    def span(self) -> tuple[float, float]:
        """First and last sample time over every channel. Units: Unix s."""
        firsts = [float(s.times_s[0]) for s in self.series.values() if len(s)]
        lasts = [float(s.times_s[-1]) for s in self.series.values() if len(s)]
        return min(firsts), max(lasts)


def plausible(log: PowerLog, name: str) -> tuple[SampleSeries, Rejected]:
    """A channel's samples fit to integrate, and what was left out (or merged), by reason.

    The rule of a live run (``samples.accept``: a negative power or energy, a NaN, an infinity or
    a power above ``MAX_POWER_W`` is no reading; readings of one instant are averaged), plus
    what only a log has: rows without a value (``missing``) and the rows the reader set apart.
    """
    channel, series = log.channels[name], log.series[name]
    kept, rejected = accept(channel, series.times_s, series.values)
    rejected.extend(MISSING, log.missing.get(name, np.array([])))
    for reason, times in log.flagged.get(name, {}).items():
        rejected.extend(reason, times)
    return kept, rejected


@dataclass
class Ordered:
    """One channel's rows in time order, and what putting them in order did."""

    times_s: np.ndarray
    values: np.ndarray
    flagged: dict[str, np.ndarray]
    notes: list[str]
    unsorted: bool  # some rows came out of order (moved, not left out)


def in_time_order(t: np.ndarray, v: np.ndarray, name: str, where: str, steps: bool = True) -> Ordered:
    """Rows of one channel, in the order the file has them, put in time order.

    A row or two out of place are sorted in. Where the clock stepped back (several rows in a row
    behind the latest time already seen), rows before and after the step both claim the times
    between: every row in that span is left out (``clock_step``). Rows of one instant are
    averaged (``duplicate``), with a warning. ``steps=False``: times of one clock that cannot step
    (a run's own samples, on its monotonic timeline): only sorted.
    """
    t, v = np.asarray(t, dtype=float), np.asarray(v, dtype=float)
    keep, found = clock_steps(t) if steps else (np.ones(t.size, dtype=bool), [])
    notes = [step.note(where, name) for step in found]
    flagged = {STEPPED: np.sort(t[~keep])} if found else {}
    t, v = t[keep], v[keep]
    unsorted = bool(t.size and np.any(np.diff(t) < 0))
    t, v, repeated = merge_duplicates(t, v)  # the rule of a live run's sample store
    if repeated.size:
        notes.append(
            f"{where}: {repeated.size} duplicated timestamp(s) in {name}; their values were averaged"
        )
        flagged[DUPLICATE] = repeated
    return Ordered(t, v, flagged, notes, unsorted)


#: sorted, the rows of a shuffled log are as far apart as the log's interval; a clock that stepped
#: back writes rows between rows already written (a fraction of the interval apart), or on them
SHUFFLED_MIN_GAP = 0.5


def shuffled(t: np.ndarray) -> bool:
    """Whether rows out of order are a shuffle of one regular log (sorted, no two rows closer
    than ``SHUFFLED_MIN_GAP`` of its median interval) rather than a clock that stepped back
    (rows before and after the step claim the same span: sorted, they interleave or coincide)."""
    times = np.sort(t[np.isfinite(t)])
    if times.size < 3:
        return False
    gaps = np.diff(times)
    interval = float(np.median(gaps))
    return interval > 0 and float(gaps.min()) >= SHUFFLED_MIN_GAP * interval


def unsorted_note(where: str) -> str:
    """What a reader says of a log whose rows it sorted."""
    return f"{where}: rows are not in time order (no two claim one span of time: no clock stepped back); sorted"


@dataclass(frozen=True)
class Step:
    """Where a log's clock stepped back. Units: s.

    Args:
        lo, hi: the span that rows before and after the step both claim.
        back_s: how far the clock went back (the span plus one interval between rows).
        rows: how many rows lie in the span (left out).
    """

    lo: float
    hi: float
    back_s: float
    rows: int

    def note(self, where: str, whose: str) -> str:
        return (
            f"{where}: the clock of {whose} steps back about {self.back_s:.3g} s (to {iso(self.lo)} after "
            f"{iso(self.hi)}); the {self.rows} row(s) in between cannot be placed in time and were left out: "
            "windows there are flagged clock_step and get no energy"
        )


def clock_steps(t: np.ndarray) -> tuple[np.ndarray, list[Step]]:
    """Where a log's clock stepped back, in the order the file has its rows.

    A row behind the latest time already seen is out of order; two or more such rows in a row,
    or one more than two intervals behind, mean the clock stepped back, unless the rows are only
    ``shuffled`` (a log sorted by another column, or written by threads): sorted, they lie on one
    grid with no span claimed twice, and none is left out. Returns which rows to
    keep (False for every row in a span that rows before and after a step both claim) and the
    steps.
    """
    keep = np.ones(t.size, dtype=bool)
    if t.size < 3 or shuffled(t):  # rows written out of order: sorted, each keeps its own time
        return keep, []
    latest = np.maximum.accumulate(np.where(np.isfinite(t), t, -np.inf))
    behind = np.zeros(t.size, dtype=bool)
    behind[1:] = t[1:] < latest[:-1]
    interval = spacing(np.sort(t[np.isfinite(t)]))
    spans = []
    for start in np.flatnonzero(behind & ~np.concatenate(([False], behind[:-1]))):
        end = start
        while end + 1 < t.size and behind[end + 1]:
            end += 1
        hi = float(latest[start - 1])
        if end > start or hi - t[start] > 2 * interval:
            spans.append((float(np.min(t[start : end + 1])), hi))
    steps = []
    for lo, hi in spans:
        inside = (t >= lo) & (t <= hi)
        steps.append(Step(lo, hi, hi - lo + interval, int(np.count_nonzero(inside))))
        keep &= ~inside
    return keep, steps
