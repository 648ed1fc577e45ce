"""A counter is fused with the power channels it declares (``Channel.shaped_by``), and its fused
power says where it comes from (``Channel.derived_from``): the channels' names say nothing."""

import numpy as np

from energyframe.core.clock import ClockModel, ClockPair
from energyframe.core.edge import Evidence
from energyframe.core.fusion import fused_channels
from energyframe.core.samples import SampleSeries
from energyframe.core.windows import WindowRecord, compute_windows, off_grid_warnings
from energyframe.model import Channel, ClockBase, Quantity, Scope, Shape
from energyframe.power.nvml.poller import counter_shapes
from tests.sensors import buffer_samples, square_wave, tick_times

MONO = ClockBase.MONOTONIC


def readings(seed=3):
    """A counter and 20-ms means of a square wave, as plain series."""
    rng = np.random.default_rng(seed)
    load, edges = square_wave(rng, 12)
    end = float(edges[-1, 2]) + 1.0
    ticks = tick_times(rng, end)
    buf_t, buf_p = buffer_samples(load, rng, end)
    return SampleSeries(ticks, 4.2e6 + load.energy_j(ticks)), SampleSeries(buf_t, buf_p), edges


def test_a_counter_is_fused_with_what_it_declares_whatever_the_names():
    counter, buffer, _ = readings()
    channels = {
        "board": Channel("board", Quantity.ENERGY, Scope.GPU, 0.1, MONO, shaped_by=(Shape(channel="fine", reading="period"),)),
        "fine": Channel("fine", Quantity.POWER, Scope.GPU, 0.02, MONO, primary=False),
    }
    results = {}
    new_channels, new_series = fused_channels(channels, {"board": counter, "fine": buffer}, results=results)
    assert set(new_channels) == {"board", "fine", "board.fused"}
    fused = new_channels["board.fused"]
    assert fused.derived_from == "board" and fused.quantity == Quantity.POWER and not fused.primary
    assert set(results) == {"board"} and results["board"].shaped == {"fine": results["board"].shaped["fine"]}
    assert results["board"].shaped["fine"] > 0.9 * results["board"].intervals


def test_nvml_names_without_a_declaration_are_not_fused():
    counter, buffer, _ = readings()
    channels = {
        "gpu0": Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1, MONO),
        "gpu0.power_samples": Channel("gpu0.power_samples", Quantity.POWER, Scope.GPU, 0.02, MONO, primary=False),
    }
    new_channels, _ = fused_channels(channels, {"gpu0": counter, "gpu0.power_samples": buffer})
    assert new_channels == channels


def test_the_first_declared_shape_must_be_there_and_the_rest_fill_its_gaps():
    counter, buffer, _ = readings()
    declared = (Shape(channel="fine", reading="period"), Shape(channel="coarse", reading="point"))
    board = Channel("board", Quantity.ENERGY, Scope.GPU, 0.1, MONO, shaped_by=declared)
    coarse = Channel("coarse", Quantity.POWER, Scope.GPU, 0.1, MONO, primary=False)
    alone, _ = fused_channels({"board": board, "coarse": coarse}, {"board": counter, "coarse": buffer})
    assert "board.fused" not in alone  # without its finest shape the counter is not fused
    report = {}
    fine = Channel("fine", Quantity.POWER, Scope.GPU, 0.02, MONO, primary=False)
    series = {"board": counter, "fine": buffer, "coarse": buffer}
    fused_channels({"board": board, "fine": fine, "coarse": coarse}, series, report)
    assert [o["name"] for o in report["board.fused"]["offsets"]] == ["fine", "coarse"]


def test_the_nvml_source_declares_its_buffer_then_its_instant_power():
    assert counter_shapes("gpu3", instant=True) == (
        Shape(channel="gpu3.power_samples", reading="period"),
        Shape(channel="gpu3.power_instant", reading="point"),
    )
    assert counter_shapes("gpu3", instant=False) == (Shape(channel="gpu3.power_samples", reading="period"),)


def test_a_fused_channel_reads_its_edges_and_warns_through_its_counter():
    counter, buffer, edges = readings()
    stamps = counter.times_s.copy()
    stamps[39] += 0.02  # a tick stamped late, just after the window's start below
    counter = SampleSeries(stamps, counter.values)
    channels = {
        "board": Channel("board", Quantity.ENERGY, Scope.GPU, 0.1, MONO, shaped_by=(Shape(channel="fine", reading="period"),)),
        "fine": Channel("fine", Quantity.POWER, Scope.GPU, 0.02, MONO, primary=False),
    }
    results = {}
    channels, series = fused_channels(channels, {"board": counter, "fine": buffer}, results=results)
    evidence = {n: Evidence.of(r) for n, r in results.items()}
    window = WindowRecord("w", 0, float(stamps[38]) + 0.05, float(stamps[43]) + 0.05)
    frame = compute_windows([window], channels, series, ClockModel(ClockPair(1.79e9, 0.0, 0.0)), evidence=evidence)
    by_channel = frame.set_index("channel")
    # the fused power's edges lie between the counter's ticks: the same off-grid tick beside them
    assert "tick_off_grid" in by_channel.loc["board", "flags"] and "tick_off_grid" in by_channel.loc["board.fused", "flags"]
    assert by_channel.loc["board.fused", "estimator"] == "fused"
    (warning,) = off_grid_warnings(frame, channels)
    assert warning.startswith("board: 1 window(s)")
    assert len(off_grid_warnings(frame)) == 2  # without the channels, each flagged channel warns
