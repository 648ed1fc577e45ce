"""What a source hands the run that no window may turn into a silent number: two readings of one
channel at one instant, and a channel declared in a unit that is not W or J."""

from __future__ import annotations

import numpy as np
import pytest

import energyframe as ef
from energyframe.core.clock import ClockModel, ClockPair
from energyframe.core.samplestore import SampleStore
from energyframe.errors import PowerSourceError
from energyframe.model import Channel, ClockBase, Quantity, Sample, Scope
from tests.fakes import ListWorkload, ScriptedSource, busy_phase

FAST = ef.RunSettings(trials=6, min_window_s=0.1, warmup_s=0.0)


class PairedSource(ScriptedSource):
    """Every 10 ms, ``values`` readings of one channel stamped at the same instant (two sensors
    behind one channel, or a plugin that emits a reading twice)."""

    def __init__(self, values, unit="W", name="paired"):
        super().__init__(None, name, unit=unit)
        self.values = values

    def readings(self, t):
        return list(self.values)


def test_readings_of_one_instant_are_flagged_and_said(tmp_path):
    result = ef.run(
        ListWorkload([busy_phase()]),
        power=[PairedSource([100.0, 300.0])],
        reporters=[],
        out=tmp_path / "r",
        settings=FAST,
    )
    windows = result.windows
    assert windows["flags"].str.contains("duplicate_samples").all()
    assert np.allclose(windows["mean_power_w"], 200.0)  # the readings of each instant averaged
    assert result.meta["rejected_samples"]["paired"]["duplicate"] > 10
    message = [w for w in result.meta["warnings"] if "paired" in w]
    assert len(message) == 1 and message[0].startswith("channel 'paired' gave ")
    assert message[0].endswith(
        "reading(s) at an instant it had already given one for; the readings of each instant were averaged and "
        "the windows around them are flagged duplicate_samples"
    )
    saved = ef.RunResult.load(tmp_path / "r")
    assert saved.meta["warnings"] == result.meta["warnings"]
    assert (saved.samples["value"] == 300.0).sum() > 10  # the raw record keeps both readings


def test_one_reading_per_instant_is_not_flagged(tmp_path):
    result = ef.run(
        ListWorkload([busy_phase()]),
        power=[PairedSource([100.0])],
        reporters=[],
        out=tmp_path / "r",
        settings=FAST,
    )
    assert not result.windows["flags"].str.contains("duplicate_samples").any()
    assert "paired" not in result.meta["rejected_samples"]


@pytest.mark.parametrize(
    "unit,reading,watts", [("W", 100.0, 100.0), ("mW", 100_000.0, 100.0), ("kW", 0.1, 100.0)]
)
def test_a_channel_in_another_unit_of_power_is_converted(tmp_path, unit, reading, watts):
    result = ef.run(
        ListWorkload([busy_phase()]),
        power=[PairedSource([reading], unit=unit)],
        reporters=[],
        out=tmp_path / "r",
        settings=FAST,
    )
    assert np.allclose(result.windows["mean_power_w"], watts)
    saved = ef.RunResult.load(tmp_path / "r")
    assert set(saved.samples["unit"]) == {"W"} and np.allclose(saved.samples["value"], watts)


def test_a_channel_in_a_unit_of_no_power_is_refused_before_anything_is_measured(tmp_path):
    with pytest.raises(PowerSourceError) as e:
        ef.run(
            ListWorkload([busy_phase()]),
            power=[PairedSource([12.0], unit="dBm")],
            reporters=[],
            out=tmp_path / "r",
            settings=FAST,
        )
    assert str(e.value) == (
        "channel 'paired' declares its power in 'dBm', a unit energyframe does not know (known: W, mW, kW, uW): "
        "source 'paired' cannot be integrated"
    )
    assert not (tmp_path / "r" / "run.json").exists()  # nothing measured: no run directory of nothing


def test_an_energy_counter_in_millijoules_is_kept_in_joules():
    store = SampleStore(ClockModel(ClockPair(1000.0, 0.0, 0.0)))
    store.register("nvml", [Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1, unit="mJ")])
    store.add("nvml", [Sample("gpu0", float(t), 1000.0 * 50 * t) for t in range(5)])  # 50 W
    assert store.channels["gpu0"].unit == "J"
    assert store.series("gpu0").values.tolist() == [0.0, 50.0, 100.0, 150.0, 200.0]


def test_a_dead_runs_journal_goes_through_the_live_rule_when_it_is_rebuilt():
    """Readings of one instant in samples.partial.csv are merged and counted, as in the run."""
    import pandas as pd

    from energyframe.core.clock import ClockModel
    from energyframe.model import Channel, Quantity, Scope
    from energyframe.results.load import _series

    clock = ClockModel()
    gpu = Channel("gpu", Quantity.POWER, Scope.GPU, 0.1, ClockBase.WALL)
    t0 = clock.start.wall_s
    samples = pd.DataFrame(
        {"channel": ["gpu"] * 4, "time_s": [t0, t0 + 0.1, t0 + 0.1, t0 + 0.2], "value": [100.0, 100.0, 300.0, -5.0]}
    )
    series, rejected, counts = _series(samples, {"gpu": gpu}, clock)
    assert series["gpu"].values.tolist() == [100.0, 200.0]  # the two readings of one instant averaged
    assert counts["gpu"] == {"negative": 1, "duplicate": 1}
