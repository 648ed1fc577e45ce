"""Each polled counter takes the half-width its source stamped its ticks within, from the
source's own report (``lifecycle/acquisition.py``, ``stamped``)."""

from energyframe.lifecycle.acquisition import stamped
from energyframe.model import Channel, Quantity, Scope
from energyframe.plugin import PowerSource


class Reporting(PowerSource):
    def __init__(self, name, info):
        self.name, self._info = name, info

    def start(self, context):
        return []

    def read(self):
        return []

    def stop(self):
        pass

    def info(self):
        if isinstance(self._info, Exception):
            raise self._info
        return self._info


def brackets(**medians):
    return {"acquisition": {"tick_brackets_s": {k: {"n": 10, "median": v, "p95": v, "max": v} for k, v in medians.items()}}}


CHANNELS = {
    "gpu0": Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1),
    "gpu0.power_instant": Channel("gpu0.power_instant", Quantity.POWER, Scope.GPU, 0.1, primary=False),
    "gpu1": Channel("gpu1", Quantity.ENERGY, Scope.GPU, 0.1),
}
OWNERS = {"gpu0": "nvml", "gpu0.power_instant": "nvml", "gpu1": "other"}


def test_a_counter_takes_half_its_sources_median_bracket():
    out = stamped(CHANNELS, OWNERS, [Reporting("nvml", brackets(gpu0=0.0073, **{"gpu0.power_instant": 0.05}))])
    assert out["gpu0"].stamp_s == 0.0073 / 2
    # power channels are read between samples, not stamped ticks; other sources' as declared
    assert out["gpu0.power_instant"] == CHANNELS["gpu0.power_instant"] and out["gpu1"] == CHANNELS["gpu1"]


def test_only_the_channels_own_source_speaks_for_it():
    # a second source that names gpu1 in its report does not own it
    out = stamped(CHANNELS, OWNERS, [Reporting("nvml", brackets(gpu1=0.02))])
    assert out["gpu1"].stamp_s == 0.0


def test_a_source_that_reports_nothing_or_fails_to_leaves_its_channels_as_declared():
    for info in ({}, {"acquisition": None}, {"acquisition": {"tick_brackets_s": {"gpu0": {"median": None}}}}, RuntimeError("gone")):
        assert stamped(CHANNELS, OWNERS, [Reporting("nvml", info)]) == CHANNELS
