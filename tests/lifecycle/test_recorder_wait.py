"""The end of a run waits for the samples that cover its last window: the primary channels and
the secondary ones of exact timing, not a secondary 1-s average that settles half a second
later (lifecycle/recorder.py, ``wait_for_samples(settling=False)``)."""

from __future__ import annotations

import time

from energyframe.core.clock import ClockModel
from energyframe.lifecycle.recorder import Recorder
from energyframe.model import Channel, ClockBase, Quantity, Sample, Scope, Timing
from energyframe.plugin import PowerSource


class Board(PowerSource):
    """A counter, instant power and a 1-s average, each with one sample at ``at_s`` (monotonic):
    the test says where, so that nothing depends on how long the machine takes."""

    name = "board"

    def __init__(self, at_s: float) -> None:
        self.at_s = at_s

    def start(self, context):
        mono = ClockBase.MONOTONIC
        self.sent = False
        return [
            Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1, mono),
            Channel("gpu0.power_instant", Quantity.POWER, Scope.GPU, 0.1, mono, primary=False),
            Channel(
                "gpu0.power_average",
                Quantity.POWER,
                Scope.GPU,
                0.1,
                mono,
                primary=False,
                timing=Timing.PERIOD_END,
                averaging_s=1.0,
            ),
        ]

    def read(self):
        if self.sent:
            return []
        self.sent = True
        t = self.at_s
        return [Sample("gpu0", t, 10.0), Sample("gpu0.power_instant", t, 100.0), Sample("gpu0.power_average", t, 100.0)]

    def stop(self):
        pass


#: where the samples lie: a past instant on the monotonic clock
SAMPLES_AT_S = time.monotonic() - 10.0


def started() -> Recorder:
    recorder = Recorder([Board(SAMPLES_AT_S)], ClockModel(), warn=lambda m: None)
    recorder.start()
    recorder._stop.set()  # the test drains by hand
    return recorder


def test_the_end_does_not_wait_for_a_secondary_average_to_settle():
    recorder = started()
    after = SAMPLES_AT_S - 0.05  # the last window closed just before the samples
    try:
        # the average's sample reaches 0.5 s past its stamp only: it does not cover the end
        assert recorder.wait_for_samples(after, 0.1) == ["gpu0.power_average"]
        assert recorder.wait_for_samples(after, 0.1, settling=False) == []
    finally:
        recorder.stop()


def test_a_primary_or_exact_channel_without_its_sample_is_still_waited_for():
    recorder = started()
    after = SAMPLES_AT_S + 1.0  # no channel has a sample this late
    try:
        missing = recorder.wait_for_samples(after, 0.05, settling=False)
        assert missing == ["gpu0", "gpu0.power_instant"]
    finally:
        recorder.stop()
