"""Each counter takes the half-width its source says it stamped its ticks within
(``PowerSource.stamp_half_widths_s``; ``lifecycle/acquisition.py``, ``stamped``)."""

import pytest

from energyframe.kit.polling import PollingSource
from energyframe.lifecycle.acquisition import stamped
from energyframe.model import Channel, Quantity, Scope
from energyframe.plugin import PowerSource


class Reporting(PowerSource):
    def __init__(self, name, widths):
        self.name, self._widths = name, widths

    def start(self, context):
        return []

    def read(self):
        return []

    def stop(self):
        pass

    def stamp_half_widths_s(self):
        if isinstance(self._widths, Exception):
            raise self._widths
        return self._widths


CHANNELS = {
    "gpu0": Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1),
    "gpu0.power_instant": Channel("gpu0.power_instant", Quantity.POWER, Scope.GPU, 0.1, primary=False),
    "gpu1": Channel("gpu1", Quantity.ENERGY, Scope.GPU, 0.1),
}
OWNERS = {"gpu0": "nvml", "gpu0.power_instant": "nvml", "gpu1": "other"}


def test_a_counter_takes_the_half_width_its_source_reports():
    out = stamped(CHANNELS, OWNERS, [Reporting("nvml", {"gpu0": 0.00365, "gpu0.power_instant": 0.025})])
    assert out["gpu0"].stamp_s == 0.00365
    # power channels are read between samples, not stamped ticks; other sources' as declared
    assert out["gpu0.power_instant"] == CHANNELS["gpu0.power_instant"] and out["gpu1"] == CHANNELS["gpu1"]


def test_only_the_channels_own_source_speaks_for_it():
    # a second source that names gpu1 in its report does not own it
    out = stamped(CHANNELS, OWNERS, [Reporting("nvml", {"gpu1": 0.01})])
    assert out["gpu1"].stamp_s == 0.0


@pytest.mark.parametrize("widths", [{}, {"gpu0": None}, {"gpu0": 0.0}, {"gpu0": "wide"}, RuntimeError("gone")])
def test_a_source_that_reports_nothing_usable_or_fails_to_leaves_its_channels_as_declared(widths):
    assert stamped(CHANNELS, OWNERS, [Reporting("nvml", widths)]) == CHANNELS


class Reported(PollingSource):
    """A polling source whose report is given (as a child's would come back in process mode)."""

    def __init__(self, info):
        super().__init__("nvml")
        self._info = info

    def info(self):
        return self._info


def brackets(**medians):
    return {"acquisition": {"tick_brackets_s": {k: {"n": 10, "median": v, "p95": v, "max": v} for k, v in medians.items()}}}


def test_a_polling_source_reports_half_the_median_bracket_of_each_counter():
    assert Reported(brackets(gpu0=0.0073)).stamp_half_widths_s() == {"gpu0": 0.0073 / 2}
    for info in ({}, {"acquisition": None}, {"acquisition": {"tick_brackets_s": {"gpu0": {"median": None}}}}):
        assert Reported(info).stamp_half_widths_s() == {}
