"""How a per-layer unit is timed and windowed, and which granularity auto takes: pure logic with an
injected clock."""

import math

import pytest

from energyframe.lifecycle.config import CALIBRATION_MARGIN
from energyframe.workloads import unitplan
from energyframe.workloads.unitplan import (
    choose_granularity,
    lead_steps,
    probe_step_s,
    steps_for_window,
)


class FakeGraph:
    """A graph replay costing ``step_s`` of a fake clock; its first replay costs ``first_s``
    (a CUDA graph uploads itself on its first launch)."""

    def __init__(self, step_s, first_s=None):
        self.step_s, self.first_s = step_s, first_s
        self.now = 100.0
        self.steps = 0
        self.syncs = 0

    def step(self):
        self.now += self.first_s if (self.steps == 0 and self.first_s is not None) else self.step_s
        self.steps += 1

    def sync(self):
        self.syncs += 1

    def clock(self):
        return self.now


@pytest.mark.parametrize("step_s", [2e-6, 4e-4, 3e-3, 0.02])
def test_probe_times_a_step_without_its_first_replay(step_s):
    g = FakeGraph(step_s, first_s=0.5)
    per_step, ran = probe_step_s(g.step, g.sync, probe_s=0.005, clock=g.clock)
    assert per_step == pytest.approx(step_s, rel=1e-9)
    assert ran == g.steps
    # the timed batches grew to the probe's length without overshooting it by much
    assert 0.005 <= (ran - 1) * step_s <= 5 * 0.005 + 3 * step_s


def test_probe_does_not_trust_its_first_timed_batch():
    """The first timed batch may still be warming up (here its steps cost 10x): a second batch
    as long decides."""
    g = FakeGraph(1e-3)
    costs = iter([1e-3, 1e-2])  # the untimed step, then a first timed batch of 1 slow step

    def step():
        g.now += next(costs, 1e-3)
        g.steps += 1

    per_step, _ = probe_step_s(step, g.sync, probe_s=0.005, clock=g.clock)
    assert per_step == pytest.approx(1e-3)


def test_probe_stops_at_max_steps():
    g = FakeGraph(0.0)  # a step that takes no time on this clock
    per_step, ran = probe_step_s(g.step, g.sync, probe_s=0.005, clock=g.clock, max_steps=64)
    assert per_step == 0.0 and ran <= 1 + 2 * 64 + 64


@pytest.mark.parametrize("per_step_s,window_s", [(4e-4, 0.1), (3e-3, 0.05), (0.02, 0.1), (0.3, 0.1)])
def test_steps_fill_the_window_with_its_margin(per_step_s, window_s):
    n = steps_for_window(per_step_s, window_s)
    target = CALIBRATION_MARGIN * window_s
    assert n >= 1
    filled = n * per_step_s * (1 + 1e-12)  # 270 x 0.0004 is a rounding below 1.08 x 0.1
    assert filled >= target or n == 1 and per_step_s >= target
    assert (n - 1) * per_step_s < target


def test_unknown_step_time_gives_one_step():
    assert steps_for_window(math.nan, 0.1) == 1 and steps_for_window(0.0, 0.1) == 1
    assert lead_steps(math.nan, 0.05) == 1


@pytest.mark.parametrize("per_step_s,lead_s", [(4e-4, 0.05), (0.02, 0.05), (0.2, 0.05)])
def test_lead_steps_last_the_lead(per_step_s, lead_s):
    n = lead_steps(per_step_s, lead_s)
    assert n * per_step_s >= lead_s and (n - 1) * per_step_s < lead_s
    assert lead_steps(per_step_s, 0.0) == 0


def test_auto_takes_blocks_when_leaf_gaps_are_a_large_share():
    # resnet50 at batch 1 on an H200: 174 single-kernel calls, a 0.852-ms forward
    choice = choose_granularity(174, 0.852e-3, has_blocks=True, gap_s=1.4e-6)
    assert choice.granularity == "block"
    assert choice.predicted_gap_pct == pytest.approx(100 * 174 * 1.4e-6 / 0.852e-3)
    assert choice.reason.startswith("auto: block (174 single-kernel leaf calls x ~1.4 us launch gap")


def test_auto_keeps_leaf_units_when_kernels_are_long():
    # an OPT-66B prefill slice: few, long kernels
    choice = choose_granularity(10, 2.6e-3, has_blocks=True, gap_s=1.4e-6)
    assert choice.granularity == "leaf" and choice.predicted_gap_pct < unitplan.AUTO_TOLERANCE_PCT
    assert choice.reason.startswith("auto: leaf (10 single-kernel")


def test_auto_at_the_tolerance_is_leaf():
    t = 1e-3
    calls = 25  # 25 x 1 us = 2.5 % of 1 ms
    assert choose_granularity(calls, t, True, gap_s=1e-6, tolerance_pct=2.5).granularity == "leaf"
    assert choose_granularity(calls + 1, t, True, gap_s=1e-6, tolerance_pct=2.5).granularity == "block"


def test_auto_without_blocks_or_timing():
    assert choose_granularity(500, 1e-3, has_blocks=False) == unitplan.GranularityChoice(
        "leaf", "auto: leaf (the model has no blocks)"
    )
    choice = choose_granularity(5, math.nan, has_blocks=True)
    assert choice.granularity == "block" and "could not be timed" in choice.reason
