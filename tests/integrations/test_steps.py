"""``TrainingMeter``, the part the training callbacks share: a window's energy is taken once it is
known and never waited for (a source held back keeps it unknown), the figures and their bounds."""

import math
import threading
import time

import pytest

from energyframe.integrations.steps import STEP, Figures, TrainingMeter
from energyframe.plugin import Channel, ClockBase, PowerSource, Quantity, Sample, Scope

WATTS = 200.0


class HeldPower(PowerSource):
    """A constant 200 W, sampled every 10 ms, handed over only up to ``until`` (monotonic s)."""

    DESCRIPTION = "test power that can be held back"
    OPTIONS = ()

    def start(self, context):
        self.lock = threading.Lock()
        self.until = math.inf
        self.next_s = time.monotonic()
        return [Channel("held", Quantity.POWER, Scope.GPU, 0.01, ClockBase.MONOTONIC)]

    def read(self):
        with self.lock:
            end = min(time.monotonic(), self.until)
            out = []
            while self.next_s <= end:
                out.append(Sample("held", self.next_s, WATTS))
                self.next_s += 0.01
            return out

    def stop(self):
        pass


def test_a_window_whose_energy_is_not_known_is_left_for_later_without_waiting(tmp_path):
    source = HeldPower("held")
    meter = TrainingMeter(power=[source], sync=None)
    meter.start(tmp_path / "run")
    meter.begin(STEP)
    time.sleep(0.05)
    with source.lock:
        source.until = time.monotonic()  # nothing past the window's end reaches the run
    meter.end(STEP, samples=8)
    assert meter.collect(wait=False) == {}  # unknown: not waited for, not lost
    with source.lock:
        source.until = math.inf
    figures = meter.collect(wait=True)[STEP]
    assert figures.windows == 1 and figures.samples == 8
    assert figures.power_w == pytest.approx(WATTS, rel=1e-6)
    assert figures.energy_j == pytest.approx(WATTS * figures.duration_s, rel=1e-6)
    keys = meter.log_keys({STEP: figures})
    assert keys["energy/steps"] == 1 and keys["energy/step_sample_j"] == pytest.approx(figures.energy_j / 8)
    assert keys["energy/total_j"] == figures.energy_j and meter.channels == ["held"]
    assert meter.collect(wait=True) == {}  # each window once
    result = meter.finish()
    assert (tmp_path / "run" / "run.json").is_file() and result.summary(STEP).trials == 1
    assert not meter.running and meter.finish() is result  # saved once
    meter.begin(STEP)  # after the end: nothing is measured
    assert not meter.is_open(STEP)
    again = meter.fresh()  # a second training run: its own measurement, its own directory
    assert again.m is None and again.power == [source] and again.out is None


def test_figures_add_random_parts_in_quadrature_and_systematic_ones_linearly():
    a = Figures(1, 10.0, 0.3, 0.1, 0.1, 4)
    b = Figures(1, 20.0, 0.4, 0.2, 0.2, 4)
    both = a.plus(b)
    assert (both.windows, both.energy_j, both.duration_s, both.samples) == (2, 30.0, pytest.approx(0.3), 8)
    assert both.random_j == pytest.approx(0.5) and both.systematic_j == pytest.approx(0.3)
    assert both.bound_j == pytest.approx(math.hypot(0.5, 0.3))
    keys = both.keys("eval")
    assert keys["energy/evals"] == 2 and keys["energy/eval_j"] == 15.0
    assert keys["energy/eval_bound_j"] == pytest.approx(both.bound_j / 2)
    assert keys["energy/eval_power_w"] == pytest.approx(100.0)
    assert keys["energy/eval_power_bound_w"] == pytest.approx(both.bound_j / 0.3)
    assert keys["energy/eval_sample_bound_j"] == pytest.approx(both.bound_j / 8)
    # with several ranks the power is each rank's, summed: their windows' edges lie apart
    assert Figures(1, 30.0, 0, 0, 0.1, 0, ranks_power_w=250.0).keys("eval")["energy/eval_power_w"] == 250.0


def test_every_log_key_is_documented():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    meter = TrainingMeter(power="none")
    meter._channels = ["gpu0"]  # as once a window's energy named them
    figures = Figures(2, 10.0, 0.1, 0.1, 0.1, 8)
    keys = meter.log_keys({STEP: figures, "evaluation": figures})
    assert len(keys) == 16  # 7 per step and per evaluation, and the total with its bound
    missing = [k for k in keys if f"`{k}`" not in text]
    assert not missing, f"log keys missing from docs/integrations.md: {missing}"
