"""When a poller polls: after every call, or densely only around a counter's expected ticks.

A counter that updates on a clock of its own (NVML's energy counter: every ~100 ms on a regular
grid) is stamped midway between the poll that last saw the old value and the first that sees the
new one (``polling.Dedup.TICKS``), so a tick is stamped as precisely as the polls around it are
dense, and the polls in between buy nothing. ``TickSchedule`` polls densely until the ticks show
their grid, then sleeps until ``lead_s`` before each expected tick and polls densely from there
until the tick is seen: the same bracket around every tick at a small fraction of the polls.

- A tick that comes before the guard opened (the first poll after a sleep already sees it) is
  stamped across the sleep, so it lies far off the grid and the run's tick check flags the
  windows beside it (``core/tickgrid.py``): the stamp stays honest, never moved onto the grid.
  The lead doubles (up to a quarter period) and shrinks back while ticks come inside it.
- A tick that comes late is waited for: it is stamped as precisely as any; only if half a period
  passes without it (a skipped update) does the schedule sleep until the next one.
- ``LOST_AFTER`` ticks in a row off the grid (early, skipped, or seen more than the tolerance
  from it) lose the grid: dense polling until ``LOCK_TICKS`` tightly bracketed ticks show it
  again. Ticks that never lie on a grid (a spread beyond ``LOCK_SD_S``) keep the schedule dense.
- Finding the grid is probed: once ``PROBE_TICKS`` dense ticks lie on a grid, the schedule
  already sleeps between ticks, with the wide lead ``PROBE_LEAD_S``, until ``LOCK_TICKS`` show
  it. Dense polling is a core's worth of driver calls (a read costs ~3-4 ms of CPU on an H200),
  so this halves what each start costs; every tick is still bracketed by two polls a dense gap
  apart. A tick the probe misses (before its guard opened, off it, or not there) ends probing
  until the grid is found: dense polling as before, so ticks that lie on no grid cost at most
  one tick stamped across a sleep before the schedule stays dense.

Pure: it is told when each poll read and what it read, and answers how long to pause; the
polling loop (``polling.PollingSource``) does the waiting. The tests drive it with simulated
time (tests/kit/test_schedule.py).
"""

from __future__ import annotations

import math
import statistics
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping
from typing import Any

#: the least lead: the guard opens at least this long before an expected tick, and a further
#: fraction of one poll's gap before it, drawn anew each tick (see ``TickSchedule``). NVML's ticks
#: lie within ~0.5 ms of their grid at idle and under load (p5-p95, H100, docs/validation.md), a
#: grid fitted through 16 of them within ~0.2 ms. Units: s.
LEAD_S = 0.003
#: the lead is at least this many times the spread of the ticks themselves about their grid: the
#: stamps' robust spread less what the stamping adds (uniform within a gap: gap / sqrt(12))
LEAD_SDS = 3.0
#: the lead never exceeds this fraction of the period (beyond, dense polling is as cheap)
LEAD_MAX_FRACTION = 0.25
#: each tick caught inside the guard shrinks a widened lead by this factor, down to its floor
LEAD_DECAY = 0.9
#: tightly bracketed ticks that must lie on a grid before the schedule follows it (the first
#: ``PROBE_TICKS`` of them polled densely, the rest probed). Ticks that lie on no grid (60-140 ms
#: apart at random) line up by chance 8 times in 6,000 ticks with 4, twice with 6
#: (tests/kit/test_schedule.py), each time costing a tick or two stamped across a sleep before
#: the grid is dropped again
LOCK_TICKS = 6
#: tightly bracketed ticks on a grid after which the schedule probes it (sleeps with the wide
#: lead ``PROBE_LEAD_S``) until ``LOCK_TICKS`` show it; ``0``: no probing
PROBE_TICKS = 3
#: the lead while probing: three stamps within ±2 ms of their ticks predict the next within
#: ~2.5 ms (sd: the period fitted over two periods, carried one further), the wake allowance
#: added. Units: s.
PROBE_LEAD_S = 0.010
#: the grid is fitted through the last this many tightly bracketed ticks
FIT_TICKS = 16
#: ticks whose robust spread about their grid exceeds this lie on none (``core/tickgrid.py``'s
#: REGULAR_SD_S): the schedule stays dense. Units: s.
LOCK_SD_S = 0.003
#: to find a grid, all of the ticks fitted but one must also lie within this of it (a robust
#: spread of a few ticks can be small by chance on ticks that lie on no grid). Units: s.
LOCK_WITHIN_S = 2 * LOCK_SD_S
#: a grid period shorter than this is not worth following (sleeping saves little). Units: s.
MIN_PERIOD_S = 0.02
#: a tightly bracketed tick farther than this (or ``LEAD_SDS`` spreads) from the grid is off it
#: (``core/tickgrid.py``'s WIDEN_S). Units: s.
TOLERANCE_S = 0.005
#: ticks off the grid in a row (early, skipped, or seen off it) that lose the grid
LOST_AFTER = 2
#: dense gaps (one poll's read to the next's) whose median is the gap the guard is dithered over
GAP_POLLS = 32
#: the golden ratio's fraction: the k-th guard opens ``frac(k * DITHER)`` of a gap earlier, an
#: even spread over [0, 1) that never repeats
DITHER = 0.6180339887498949
#: the guard also opens earlier by how late the poller woke from its recent sleeps (the
#: second-latest of this many): a loaded host wakes a sleeping thread milliseconds late, and a
#: poll late past the tick stamps it across the sleep
WAKE_SLEEPS = 16
#: a tick bracketed by polls at most this far apart (or three dense pauses) is stamped tightly
#: enough to fit the grid through; a poll that blocked or a starved poller gives wider. Units: s.
TIGHT_S = 0.010


class Schedule(ABC):
    """When a ``Poller`` polls next, from what each poll read (``Poller.schedule``)."""

    @abstractmethod
    def pause_s(self, read_s: float, readings: Any, now_s: float) -> float:
        """The pause before the next poll.

        Args:
            read_s: when the poll just made read the sensor (monotonic). Units: s.
            readings: what it returned (``{channel: value}``, or samples).
            now_s: the monotonic time now. Units: s.
        """

    def stats(self) -> dict[str, Any]:
        """What the schedule did, for run.json (the source's ``info``)."""
        return {}


class TickSchedule(Schedule):
    """Poll ``channel``, a counter with an update grid of its own, densely only around its ticks.

    A guard opened a fixed time before each expected tick would bracket every tick at the same
    place between two polls, so that every stamp would be off by the same part of a gap (up to
    half of it, the same way each time). Each guard therefore opens a further fraction of the
    dense gap earlier, spread evenly over [0, 1) from tick to tick: where a tick falls between
    the two polls around it is then as random as under dense polling, and so are the stamps'
    errors (within half a gap, centred on the tick). It costs half a poll a tick on average.

    Args:
        channel: the counter's channel in the poll's ``{channel: value}`` readings.
        dense_s: the pause between polls while polling densely (inside a guard, and until the
            grid is found). Units: s.
        lead_s: the least time before an expected tick at which the guard opens. Units: s.
        probe_ticks: dense ticks on a grid after which it is probed (``PROBE_TICKS``; 0: the
            schedule stays dense until ``LOCK_TICKS`` show the grid).
    """

    def __init__(
        self, channel: str, dense_s: float, lead_s: float = LEAD_S, probe_ticks: int = PROBE_TICKS
    ) -> None:
        self.channel = channel
        self.dense_s = float(dense_s)
        self.lead_floor_s = float(lead_s)
        self.lead_s = float(lead_s)
        self._tight_s = max(TIGHT_S, 3.0 * self.dense_s)
        self._value: float | None = None
        self._read_s: float | None = None
        self._slept = False  # whether the pause before the coming poll was a sleep to a guard
        self._wake_s: float | None = None  # when the poll after that sleep should read
        self._late: deque[float] = deque(maxlen=WAKE_SLEEPS)  # how late recent sleeps woke
        self._gaps: deque[float] = deque(maxlen=GAP_POLLS)  # dense gaps, read to read
        self._guards = 0
        self._allowance_s = 0.0  # the last wake allowance (read by stats from another thread)
        self._fit: deque[float] = deque(maxlen=FIT_TICKS)
        #: the grid followed: (period, a grid point, robust spread about it); None: polling densely
        #: or probing
        self.grid: tuple[float, float, float] | None = None
        #: the grid probed before it is followed (same form); None: not probing
        self.probe: tuple[float, float, float] | None = None
        self.probe_ticks = int(probe_ticks)
        self._may_probe = self.probe_ticks > 0  # until a probe misses; again once the grid is found
        self.probes = 0
        self.probes_missed = 0
        self._awaited_s: float | None = None  # the grid point of the tick awaited
        self._unsure = False  # whether that tick may have come already (before a held poll read)
        self._strikes = 0
        self.polls = 0
        self.ticks = 0
        self.tight_ticks = 0
        self.early = 0
        self.wide = 0
        self.skipped = 0
        self.held = 0
        self.off_grid = 0
        self.locks = 0
        self.losses = 0
        self.dense_polls = 0
        self.grid_polls = 0
        self.grid_ticks = 0

    # -- what the loop calls ---------------------------------------------------------------------
    def pause_s(self, read_s: float, readings: Any, now_s: float) -> float:
        self.polls += 1
        if self.grid is not None:
            self.grid_polls += 1
        value = readings.get(self.channel) if isinstance(readings, Mapping) else None
        before, slept = self._read_s, self._slept
        self._read_s, self._slept = read_s, False
        self._note_pause(before, read_s, slept)
        if value is not None:
            value = float(value)
            if self._value is not None and before is not None and value != self._value:
                self._tick(before, read_s, slept)
            self._value = value
        return self._plan(now_s)

    def _note_pause(self, before_s: float | None, read_s: float, slept: bool) -> None:
        """Learn from the pause before the poll that read at ``read_s``: how late a sleep woke
        (not a hold: ``_held_past``), or a dense gap."""
        if slept and self._wake_s is not None and not self._held_past(read_s, before_s):
            self._late.append(max(0.0, read_s - self._wake_s))
        elif before_s is not None and not slept:
            self._gaps.append(read_s - before_s)

    def stats(self) -> dict[str, Any]:
        grid = self.grid  # once: the poller's thread may drop it meanwhile
        period = grid[0] if grid is not None else None
        return {
            "schedule": "grid",
            "ticks": self.ticks,
            "polls_per_tick": _ratio(self.polls, self.ticks),
            # while the grid was followed: what the schedule costs once it has found the grid
            "grid_polls": self.grid_polls,
            "grid_ticks": self.grid_ticks,
            "polls_per_tick_on_grid": _ratio(self.grid_polls, self.grid_ticks),
            "dense_polls": self.dense_polls,
            "following_grid": grid is not None,
            "grid_period_s": period,
            "lead_s": round(self.lead_s, 6),
            "wake_allowance_s": round(self._allowance_s, 6),
            # ticks stamped across a sleep (they came before the guard opened), and across a
            # poll that blocked or a starved poller: the run's tick check judges their stamps
            "early": self.early,
            "wide": self.wide,
            "skipped": self.skipped,
            # polls held past half a period after the tick awaited (a stopped process, a starved
            # host): the tick they see is stamped across the hold (counted in ``wide``), and
            # is evidence neither for nor against the grid
            "held": self.held,
            "off_grid": self.off_grid,
            "grid_found": self.locks,
            "grid_lost": self.losses,
            # grids probed before they were followed, and probes that missed a tick
            "probes": self.probes,
            "probes_missed": self.probes_missed,
        }

    # -- ticks -------------------------------------------------------------------------------------
    def _tick(self, before_s: float, after_s: float, slept: bool) -> None:
        """A change seen by the poll that read at ``after_s``; the one before read at ``before_s``."""
        self.ticks += 1
        if self.grid is not None:
            self.grid_ticks += 1
        self._unsure = False
        stamp = (before_s + after_s) / 2
        if self._held_past(after_s, before_s):  # stamped across the hold
            self.wide += 1
            self.held += 1
            self._await_past(after_s)
        elif slept:  # it came before the guard opened: stamped across the sleep
            self._early(after_s)
        elif after_s - before_s > self._tight_s:  # a poll that blocked, or a starved poller
            self.wide += 1
            self._await_after(stamp)
        else:
            self._tight(stamp)

    def _early(self, after_s: float) -> None:
        """A tick seen by the first poll after a sleep: the probe missed it, or the followed
        grid's lead was too short (it doubles; two in a row lose the grid)."""
        self.early += 1
        if self.grid is None:
            self._miss()
            return
        self.lead_s = min(2.0 * self.lead_s, max(LEAD_MAX_FRACTION * self.grid[0], self.lead_floor_s))
        self._strike()
        self._await_after(after_s)

    def _tight(self, stamp: float) -> None:
        """A tightly bracketed tick: judged against the grid probed or followed, then fitted."""
        self.tight_ticks += 1
        target = self._target()
        if target is not None and self._off(stamp, target):
            self.off_grid += 1
            if self.grid is None:
                self._miss()
            else:
                self._strike()
            if self.grid is None:  # the probe missed it, or the grid is lost: learn again from here
                self._fit.append(stamp)
                return
        elif self.grid is not None:
            self._strikes = 0
            self.lead_s = max(self._lead_floor(), LEAD_DECAY * self.lead_s)
        self._fit.append(stamp)
        self._refit()
        self._await_after(stamp)

    @staticmethod
    def _off(stamp: float, grid: tuple[float, float, float]) -> bool:
        """Whether a tightly bracketed tick lies off ``grid``."""
        period, point, spread = grid
        return abs(_residual(stamp, period, point)) > max(TOLERANCE_S, LEAD_SDS * spread)

    def _miss(self) -> None:
        """The probe missed a tick: poll densely, and probe no more until the grid is found."""
        self.probes_missed += 1
        self.probe = None
        self._may_probe = False
        self._fit.clear()
        self._awaited_s = None

    def _strike(self) -> None:
        self._strikes += 1
        if self._strikes >= LOST_AFTER and self.grid is not None:
            self.losses += 1
            self.grid = None
            self._fit.clear()
            self._strikes = 0

    def _refit(self) -> None:
        """Fit the grid through the recent tight ticks; follow it if they lie on one."""
        if len(self._fit) < LOCK_TICKS:
            self._probe_grid()
            return
        ticks = list(self._fit)
        fitted = fit_grid(ticks, self.grid[0] if self.grid is not None else None)
        following = self.grid is not None
        if fitted is not None and not following and _ticks_off(ticks, fitted) > 1:
            return  # a few ticks that line up by chance: wait for more (probing goes on)
        if fitted is None or _not_followed(fitted):
            self._no_grid(following)
            return
        self.grid = fitted
        if not following:
            self.locks += 1
            self._strikes = 0
            self.probe = None
            self._may_probe = self.probe_ticks > 0
            self.lead_s = max(self._lead_floor(), self.lead_s)

    def _no_grid(self, following: bool) -> None:
        """The recent tight ticks lie on no grid: the one followed is lost, a probe has missed."""
        if following:
            self.losses += 1
            self._fit.clear()
        elif self.probe is not None:
            self._miss()
        self.grid = None

    def _probe_grid(self) -> None:
        """Probe the grid the recent tight ticks lie on, once ``probe_ticks`` of them all lie
        within ``LOCK_WITHIN_S`` of one; a probe whose ticks no longer do has missed."""
        if not self._may_probe or len(self._fit) < self.probe_ticks:
            return
        ticks = list(self._fit)
        fitted = fit_grid(ticks)
        if fitted is None or _not_followed(fitted) or _ticks_off(ticks, fitted) > 0:
            if self.probe is not None:
                self._miss()
            return
        if self.probe is None:
            self.probes += 1
        self.probe = fitted

    def _lead_floor(self) -> float:
        spread = self.grid[2] if self.grid is not None else 0.0
        jitter = math.sqrt(max(0.0, spread**2 - self.gap_s() ** 2 / 12.0))
        return max(self.lead_floor_s, LEAD_SDS * jitter)

    def _held_past(self, read_s: float, before_s: float | None) -> bool:
        """Whether the poll that read at ``read_s`` was held (a stopped process, a starved host):
        it read more than half a period after the tick awaited, a wide bracket after the poll
        before it (a tight one that late is a tick off the grid)."""
        target = self._target()
        if target is None or self._awaited_s is None or before_s is None:
            return False
        return read_s - before_s > self._tight_s and read_s > self._awaited_s + target[0] / 2

    def _await_past(self, t: float) -> None:
        """Await the first grid point after ``t``, where a poll held that long read: it has seen
        every tick before. A point within the lead before ``t`` may be a tick still to come
        (its jitter, the grid's error): it is awaited, and if it passes without a tick (it came
        before ``t``), that is no skipped update."""
        target = self._target()
        self._awaited_s = None if target is None else _next_point(target, t - self.lead_s)
        self._unsure = self._awaited_s is not None and self._awaited_s <= t

    def _target(self) -> tuple[float, float, float] | None:
        """The grid the guards open on: the one followed, else the one probed."""
        return self.grid if self.grid is not None else self.probe

    def _await_after(self, t: float) -> None:
        """Await the first grid point more than half a period after ``t``."""
        target = self._target()
        self._awaited_s = None if target is None else _next_point(target, t + target[0] / 2)

    # -- the next poll -----------------------------------------------------------------------------
    def _plan(self, now_s: float) -> float:
        target = self._target()
        if target is None or self._awaited_s is None:
            self.dense_polls += 1
            return self.dense_s
        period = target[0]
        # half a period without the tick: the counter skipped an update. Judged by when the last
        # poll read, not by the time now: a poll that read before the tick and then stalled (a
        # starved poller) has not seen the tick yet, and the next poll will
        read_s = self._read_s if self._read_s is not None else now_s
        if read_s > self._awaited_s + period / 2 and not self._skip(read_s, period):
            self.dense_polls += 1
            return self.dense_s
        dither = (self._guards * DITHER) % 1.0 * self.gap_s()
        self._allowance_s = self.wake_allowance_s()
        lead = self.lead_s
        if self.grid is None:  # probing: the wide lead
            lead = max(lead, min(PROBE_LEAD_S, LEAD_MAX_FRACTION * period))
        opens = self._awaited_s - lead - self._allowance_s - dither
        if now_s + self.dense_s >= opens:
            self.dense_polls += 1
            return self.dense_s
        self._guards += 1
        self._slept, self._wake_s = True, opens
        return opens - now_s

    def _skip(self, read_s: float, period: float) -> bool:
        """Half a period passed after the awaited tick: await the next one. A tick that may have
        come before a held poll read is no skipped update; a missing one is (a probe has then
        missed, the followed grid takes a strike). Returns whether a grid is still awaited."""
        assert self._awaited_s is not None
        if self._unsure:  # it had come
            self._unsure = False
            self._awaited_s += period
            if read_s <= self._awaited_s + period / 2:
                return True
        self.skipped += 1
        if self.grid is None:
            self._miss()
            return False
        self._strike()
        if self.grid is None:
            return False
        self._awaited_s += period * math.ceil((read_s - self._awaited_s - period / 2) / period)
        return True

    def gap_s(self) -> float:
        """The median time from one dense poll's read to the next's (a call and a pause). Units: s."""
        return statistics.median(self._gaps) if self._gaps else self.dense_s

    def wake_allowance_s(self) -> float:
        """How much earlier than ``lead_s`` the guard opens: how late the poller woke from its
        recent sleeps (the second-latest of the last ``WAKE_SLEEPS``, at most a quarter period
        less the lead). Units: s."""
        target = self._target()
        if len(self._late) < 2 or target is None:
            return 0.0
        late = sorted(self._late)[-2]
        return min(late, max(0.0, LEAD_MAX_FRACTION * target[0] - self.lead_s))


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def _next_point(grid: tuple[float, float, float], t: float) -> float:
    """The first point of ``grid`` after ``t``. Units: s."""
    period, point, _ = grid
    return point + (math.floor((t - point) / period) + 1) * period


def _residual(t: float, period: float, point: float) -> float:
    """``t``'s signed distance from the nearest point of the grid. Units: s."""
    return t - point - period * round((t - point) / period)


def fit_grid(ticks_s: list[float], period_s: float | None = None) -> tuple[float, float, float] | None:
    """A regular grid through tick times, robust to a few stamps off it: the period is the median
    slope over all pairs of ticks (Theil-Sen: as precise as a least-squares line, where a median
    of neighbours' gaps is off by ~0.3 % with stamps ±1 ms, 3 ms ten periods on), the phase the
    median of the ticks carried onto the last one.

    Args:
        ticks_s: tick times, ascending; consecutive ticks may lie several periods apart.
        period_s: the period known so far, to count the periods between ticks (``None``: the
            median gap, right when most gaps are one period). Units: s.

    Returns:
        ``(period, a grid point near the last tick, robust spread about the grid)`` or ``None``
        with fewer than three ticks. Units: s.
    """
    if len(ticks_s) < 3:
        return None
    gaps = [b - a for a, b in zip(ticks_s, ticks_s[1:])]
    ref = period_s or statistics.median(gaps)
    if not ref > 0:
        return None
    index = _grid_indices(gaps, ref)
    period = _median_slope(ticks_s, index)
    last = index[-1]
    point = statistics.median(t + period * (last - i) for t, i in zip(ticks_s, index))
    residuals = [t - (point - period * (last - i)) for t, i in zip(ticks_s, index)]
    return period, point, _robust_spread(residuals)


def _grid_indices(gaps_s: list[float], period_s: float) -> list[int]:
    """Each tick's number on the grid, the first's 0: a gap counts the periods it spans (one at
    least)."""
    index = [0]
    for g in gaps_s:
        index.append(index[-1] + max(1, round(g / period_s)))
    return index


def _median_slope(ticks_s: list[float], index: list[int]) -> float:
    """Theil-Sen's period: the median over all pairs of ticks of their distance per period."""
    return statistics.median(
        (ticks_s[j] - ticks_s[i]) / (index[j] - index[i]) for j in range(len(ticks_s)) for i in range(j)
    )


def _robust_spread(residuals: list[float]) -> float:
    """The standard deviation a normal spread would have, from the median absolute deviation."""
    centre = statistics.median(residuals)
    return 1.4826 * statistics.median(abs(r - centre) for r in residuals)


def _ticks_off(ticks_s: list[float], grid: tuple[float, float, float]) -> int:
    """How many ticks lie further than ``LOCK_WITHIN_S`` from ``grid``."""
    return sum(abs(_residual(t, grid[0], grid[1])) > LOCK_WITHIN_S for t in ticks_s)


def _not_followed(grid: tuple[float, float, float]) -> bool:
    """A grid too fine to be worth following, or ticks spread too widely about it to lie on it."""
    return grid[0] < MIN_PERIOD_S or grid[2] > LOCK_SD_S
