"""The tick schedule (energyframe.kit.schedule) in simulated time: a counter that ticks at known
instants is polled as the polling base polls it (each poll reads as its call begins, takes
``COST_S``, then pauses as the schedule says), and every change is stamped as the base stamps it
(midway between the poll that last saw the old value and the first that saw the new one). The
schedule never sees a clock of its own, so nothing here depends on how fast the machine is."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

import numpy as np
import pytest

from energyframe.kit.schedule import LOCK_TICKS, LOST_AFTER, TickSchedule, fit_grid

#: a field query of NVML's counter takes ~3 ms (docs/validation.md), then the 1-ms pause
COST_S = 0.003
DENSE_S = 0.001
PERIOD_S = 0.1


@dataclass
class Polled:
    stamps: np.ndarray  # each change's stamp. Units: s.
    truth: np.ndarray  # the true time of the tick each stamp is for. Units: s.
    brackets: np.ndarray  # the polls around each change: how far apart they read. Units: s.
    polls: int

    @property
    def error_s(self) -> np.ndarray:
        return self.stamps - self.truth


def poll(ticks, schedule=None, cost_s=COST_S, end_s=None, late=None, stall=None) -> Polled:
    """Poll a counter that ticks at ``ticks`` until ``end_s``: pausing ``DENSE_S`` after every
    call without a schedule, as the schedule says with one; ``late(pause)``: how late the poller
    wakes from a pause (a loaded host); ``stall(t)``: how long a call that read at ``t`` blocks
    after reading (a poller the host keeps away)."""
    ticks = list(ticks)
    end_s = ticks[-1] + 0.05 if end_s is None else end_s
    t, before, seen = 0.0, None, None
    stamps, truth, brackets, polls = [], [], [], 0
    while t < end_s:
        value = bisect.bisect_right(ticks, t)  # ticks so far: the counter as this poll reads it
        polls += 1
        if seen is not None and value != seen:
            stamps.append((before + t) / 2)
            truth.append(ticks[value - 1])
            brackets.append(t - before)
        before, seen = t, value
        took = cost_s + (stall(t) if stall is not None else 0.0)
        pause = DENSE_S if schedule is None else schedule.pause_s(t, {"gpu0": float(value)}, t + took)
        t += took + pause + (late(pause) if late is not None else 0.0)
    return Polled(np.array(stamps), np.array(truth), np.array(brackets), polls)


def grid(n=300, start_s=0.0337, jitter_s=0.0, seed=1):
    """``n`` ticks every ``PERIOD_S``, each moved by up to ±``jitter_s`` (uniform)."""
    rng = random.Random(seed)
    return [start_s + k * PERIOD_S + rng.uniform(-jitter_s, jitter_s) for k in range(n)]


def test_it_finds_the_grid_and_stamps_every_tick_as_dense_polling_does_with_a_fraction_of_the_polls():
    ticks = grid(jitter_s=0.001)  # 30 s; NVML's ticks lie within ~±0.5 ms of their grid (H100)
    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule)
    dense = poll(ticks)
    assert len(followed.stamps) == len(dense.stamps) == len(ticks)  # every tick seen once
    stats = schedule.stats()
    assert stats["following_grid"] and stats["grid_found"] == 1 and stats["grid_lost"] == 0
    assert stats["grid_period_s"] == pytest.approx(PERIOD_S, rel=1e-3)
    assert stats["early"] == stats["skipped"] == stats["off_grid"] == 0
    # every stamp is bracketed by polls as close as dense polling's (a call and a pause apart),
    # so its error is as small: half a bracket at most
    assert followed.brackets.max() <= dense.brackets.max() + 1e-9 == pytest.approx(COST_S + DENSE_S)
    assert np.abs(followed.error_s).max() <= (COST_S + DENSE_S) / 2 + 1e-9
    assert np.abs(dense.error_s).max() <= (COST_S + DENSE_S) / 2 + 1e-9
    # and where a tick falls between its two polls varies from tick to tick (the guard's opening
    # is dithered over a gap), so the errors are centred and spread over the bracket as under
    # dense polling on a real poller (uniform within ±2 ms: sd 1.15 ms), not one offset for all
    assert abs(followed.error_s.mean()) < 0.0003
    assert 0.0008 < followed.error_s.std() < 0.0015
    # dense polling reads 25 times a tick; once on the grid, the schedule about 3 times (a guard
    # of LEAD_S = 3 ms and a dithered part of a gap before the expected tick, polls 4 ms apart)
    assert dense.polls / len(dense.stamps) == pytest.approx(25, abs=1)
    assert 2.0 <= stats["polls_per_tick_on_grid"] <= 3.5
    assert dense.polls / followed.polls > 7
    # it followed the grid after LOCK_TICKS ticks polled densely, and for every tick after them
    assert stats["grid_ticks"] >= len(ticks) - LOCK_TICKS - 2
    # what the pollers of a real run report, counted the same way
    assert stats["polls_per_tick"] == pytest.approx(followed.polls / len(followed.stamps), abs=0.05)


def test_a_cheap_poll_is_followed_as_closely():
    # PHYSICS.md measured the field query at ~3 µs on an H200: the guard then holds more polls
    # (1 ms apart), each tick is bracketed within ~1 ms, and dense polling's thousand polls a
    # second come down to a few per tick
    ticks = grid(jitter_s=0.001)
    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule, cost_s=3e-6)
    dense = poll(ticks, cost_s=3e-6)
    assert np.abs(followed.error_s).max() <= 0.0006
    assert np.quantile(np.abs(followed.error_s), 0.99) <= np.quantile(np.abs(dense.error_s), 0.99) + 1e-4
    assert schedule.stats()["polls_per_tick_on_grid"] <= 9
    assert dense.polls / followed.polls > 10


def test_a_skipped_update_is_waited_for_half_a_period_and_the_grid_kept():
    ticks = grid()
    del ticks[150]  # the counter did not change at one update
    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule)
    stats = schedule.stats()
    assert stats["skipped"] == 1 and stats["grid_lost"] == 0 and stats["early"] == 0
    assert np.abs(followed.error_s).max() <= (COST_S + DENSE_S) / 2 + 1e-9  # the next tick too


@pytest.mark.parametrize("shift_s", [0.03, -0.03, 0.008, -0.012])
def test_a_shifted_grid_is_lost_and_found_again(shift_s):
    # the counter's update clock jumps (a driver hiccup, a clock change): later ticks lie off the
    # grid (late ones are still bracketed tightly, early ones are stamped across the sleep);
    # after LOST_AFTER of them the schedule polls densely and learns the new grid
    ticks = grid(n=200)
    ticks = ticks[:100] + [t + shift_s for t in ticks[100:]]
    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule)
    stats = schedule.stats()
    assert stats["following_grid"]
    if abs(shift_s) > 0.02:  # lost by LOST_AFTER ticks off it, then found again
        assert stats["grid_lost"] == 1 and stats["grid_found"] == 2
    # a small shift may instead move the fit over as the shifted ticks fill it
    assert stats["grid_lost"] == stats["grid_found"] - 1 <= 1
    wide = np.abs(followed.error_s) > (COST_S + DENSE_S) / 2 + 1e-9
    assert wide.sum() <= LOST_AFTER  # only ticks that came before a guard opened
    assert not wide[followed.truth > ticks[100] + 1.0].any()  # a second after the shift, all tight
    after = schedule.grid
    assert after is not None
    assert abs((after[1] - ticks[-1] + 0.5 * PERIOD_S) % PERIOD_S - 0.5 * PERIOD_S) < 0.002  # on the new grid


def test_an_early_tick_is_stamped_across_the_sleep_honestly_and_widens_the_lead():
    ticks = grid()
    ticks[120] -= 0.015  # one tick 15 ms early: before the guard opened
    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule)
    stats = schedule.stats()
    assert stats["early"] == 1 and stats["grid_lost"] == 0
    i = int(np.flatnonzero(followed.truth == ticks[120])[0])
    # its stamp lies midway between the last poll of the guard before and the first of this
    # one: far from the truth, and far from the grid, where the run's tick check flags it
    # (core/tickgrid.py: beyond 15 ms); never moved onto the grid
    assert followed.brackets[i] > 0.08 and abs(followed.error_s[i]) > 0.03
    assert abs(followed.stamps[i] - (ticks[119] + ticks[121]) / 2) > 0.015
    others = np.delete(np.abs(followed.error_s), i)
    assert others.max() <= (COST_S + DENSE_S) / 2 + 1e-9


def test_a_poller_that_wakes_late_opens_its_guards_earlier():
    # a loaded host wakes the poller 2-7 ms late from its sleeps to a guard: the guard opens
    # earlier by that much (learnt from the sleeps seen), so ticks are still seen inside it, at
    # a few more polls each; without the allowance most would come before the poller woke
    rng = random.Random(3)
    ticks = grid(jitter_s=0.001)
    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule, late=lambda pause: rng.uniform(0.002, 0.007) if pause > DENSE_S else 0.0)
    stats = schedule.stats()
    assert 0.005 < stats["wake_allowance_s"] <= 0.007
    assert stats["early"] <= 3 and stats["grid_lost"] == 0
    assert (np.abs(followed.error_s) > (COST_S + DENSE_S) / 2 + 1e-9).sum() == stats["early"]
    assert stats["polls_per_tick_on_grid"] <= 6


def test_a_poller_kept_away_past_half_a_period_stamps_that_tick_across_the_stall_and_keeps_the_grid():
    # a host short of CPU keeps the poller away for 60 ms right after it read the old value of
    # every fourth tick (as the fake NVML's ``starve`` does): the tick is seen by the next poll,
    # stamped midway across the stall (~30 ms off, where the run's tick check flags it), and is
    # no skipped update: the grid is kept, the next tick bracketed tightly again
    ticks = grid(n=200)
    starved = set()

    def stall(t):
        k = bisect.bisect_right(ticks, t)  # the next tick
        if k < len(ticks) and k % 4 == 0 and ticks[k] - t <= 0.004 and k not in starved:
            starved.add(k)
            return 0.06
        return 0.0

    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule, stall=stall)
    stats = schedule.stats()
    assert len(starved) > 30
    assert stats["grid_lost"] == 0 and stats["skipped"] == 0 and stats["early"] == 0
    assert stats["wide"] == len(starved)
    wide = np.abs(followed.error_s) > (COST_S + DENSE_S) / 2 + 1e-9
    assert set(np.flatnonzero(wide)) == starved  # stamp i is for tick i
    assert (np.abs(followed.error_s[wide]) > 0.02).all()


@pytest.mark.parametrize("seed", range(4))
def test_a_poller_held_for_whole_periods_keeps_the_grid(seed):
    # the host stops the sampler for 0.07-1.4 s now and then (SIGSTOP, a starved process): the
    # poll after the hold sees the ticks it missed at once, stamped across the hold (wide), and
    # that is no evidence about the grid: it is kept, the next tick awaited where it will come
    rng = random.Random(seed)
    ticks = grid(n=1000, jitter_s=0.0005, seed=seed)
    starts = iter(sorted(rng.sample(range(3, 95, 3), 25)))  # one hold every ~3 s at most
    next_s = [float(next(starts))]
    holds = []

    def stall(t):
        if next_s and t >= next_s[0]:
            hold = rng.choice([0.07, 0.15, 0.3, 1.3]) + rng.uniform(0, 0.1)
            holds.append((t, hold))
            nxt = next(starts, None)
            next_s[:] = [] if nxt is None else [float(nxt)]
            return hold
        return 0.0

    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule, stall=stall)
    stats = schedule.stats()
    assert len(holds) == 25
    assert stats["grid_lost"] == 0 and stats["grid_found"] == 1 and stats["early"] == 0
    # the ticks a hold hid are seen by the poll after it (one change; a hold shorter than the
    # gap to the next tick hides none)
    missed = sum(bisect.bisect_left(ticks, t + COST_S + h) > bisect.bisect_right(ticks, t) for t, h in holds)
    assert stats["held"] + stats["skipped"] >= missed - 2 and stats["held"] <= missed
    assert stats["skipped"] <= 2  # a hold that ended just as a tick was due
    wide = np.abs(followed.error_s) > (COST_S + DENSE_S) / 2 + 1e-9
    assert wide.sum() == stats["wide"] <= missed
    assert 2.0 <= stats["polls_per_tick_on_grid"] <= 3.5
    # without the hold's own rule each hold was a tick early or skipped: the grid was lost
    # (3 to 5 times in these runs, 20 to 24 holds counted as skipped updates) and found again


def test_irregular_ticks_are_polled_densely_after_one_probe_at_most():
    # a counter without an update clock of its own (or a poller so late that no grid shows):
    # ticks 60-140 ms apart lie on no grid. Three of them line up by chance now and then, and
    # the schedule probes that grid once; the probe misses its next tick (which may come
    # before the guard opened: stamped across the sleep), and it never probes again in the run
    for seed in range(40):
        rng = random.Random(seed)
        ticks = list(np.cumsum([rng.uniform(0.06, 0.14) for _ in range(200)]))
        schedule = TickSchedule("gpu0", DENSE_S)
        followed = poll(ticks, schedule)
        stats = schedule.stats()
        assert len(followed.stamps) == len(ticks)
        assert stats["probes"] == stats["probes_missed"] <= 1
        # six that line up by chance are followed, and lost again
        assert stats["grid_found"] <= 1 and stats["grid_lost"] == stats["grid_found"]
        wide = np.abs(followed.error_s) > (COST_S + DENSE_S) / 2 + 1e-9
        assert wide.sum() == stats["early"] <= 1 + 2 * stats["grid_found"]
    # without probing it never sleeps on these ticks: dense polling throughout
    rng = random.Random(2)
    ticks = list(np.cumsum([rng.uniform(0.06, 0.14) for _ in range(200)]))
    schedule = TickSchedule("gpu0", DENSE_S, probe_ticks=0)
    followed = poll(ticks, schedule)
    stats = schedule.stats()
    assert stats["grid_found"] == stats["probes"] == 0 and stats["grid_polls"] == 0
    assert followed.polls == poll(ticks).polls
    assert np.abs(followed.error_s).max() <= (COST_S + DENSE_S) / 2 + 1e-9


def test_a_probed_grid_saves_dense_polls_at_the_start_and_brackets_every_tick_as_tightly():
    # the start polls densely (~25 polls a tick) only until PROBE_TICKS ticks show a grid, then
    # sleeps between ticks with the probe's wide lead until LOCK_TICKS do: about two periods of
    # dense polls fewer at each start, every stamp as close to its tick
    saved = []
    for seed in range(12):
        start_s = 0.0337 + 0.09 * random.Random(seed).random()
        ticks = grid(n=30, start_s=start_s, jitter_s=0.001, seed=seed)
        probed = TickSchedule("gpu0", DENSE_S)
        dense_start = TickSchedule("gpu0", DENSE_S, probe_ticks=0)
        a, b = poll(ticks, probed), poll(ticks, dense_start)
        sa, sb = probed.stats(), dense_start.stats()
        assert sa["probes"] == 1 and sa["probes_missed"] == 0 and sa["grid_found"] == sb["grid_found"] == 1
        assert sa["early"] == sa["wide"] == sa["skipped"] == 0
        assert np.abs(a.error_s).max() <= (COST_S + DENSE_S) / 2 + 1e-9
        assert a.brackets.max() <= COST_S + DENSE_S + 1e-9
        assert sa["grid_ticks"] == sb["grid_ticks"]  # found at the same tick
        saved.append(b.polls - a.polls)
    assert min(saved) > 30 and np.median(saved) > 45


def test_the_recorded_h200_ticks_are_followed():
    # the counter's ticks as an H200 stamped them (tests/fixtures/nvml-ticks.json: 52 intervals,
    # 2 s idle and 3 s of GEMMs), replayed 10 times back to back (a phase jump at each seam): the
    # recorded stamps' own error (±2 ms) makes them a harsher grid than the counter's
    import json
    from pathlib import Path

    recorded = json.loads((Path(__file__).parents[1] / "fixtures" / "nvml-ticks.json").read_text())
    base = np.array([r[0] for r in recorded["ticks"]])
    span = base[-1] - base[0] + PERIOD_S
    ticks = np.concatenate([base + k * span for k in range(10)]) + 0.05
    schedule = TickSchedule("gpu0", DENSE_S)
    followed = poll(ticks, schedule)
    dense = poll(ticks)
    stats = schedule.stats()
    assert stats["grid_ticks"] > 0.8 * len(ticks)
    wide = np.abs(followed.error_s) > (COST_S + DENSE_S) / 2 + 1e-9
    assert wide.sum() <= 3
    assert np.median(np.abs(followed.error_s)) <= np.median(np.abs(dense.error_s)) + 0.0005
    assert dense.polls / followed.polls > 6


def test_fit_grid_counts_skipped_periods_and_shrugs_off_a_late_stamp():
    ticks = [1.0 + 0.1 * k for k in range(12)]
    del ticks[5]
    ticks[8] += 0.02  # a stamp a starved poller made late
    period, point, spread = fit_grid(ticks)
    assert period == pytest.approx(0.1, abs=1e-9)
    assert point == pytest.approx(ticks[-1], abs=1e-9)
    assert spread < 1e-9
    assert fit_grid(ticks[:2]) is None
