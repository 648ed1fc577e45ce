"""A run saved before channels declared what shapes them reads as it did then: NVML's counter
``gpuN`` is fused with ``gpuN.power_samples`` and ``gpuN.power_instant`` found by their names
(``results.meta.with_declared_shapes``); a run that declares them is read as it says."""

import json

from energyframe.model import Channel, Quantity, Scope, Shape
from energyframe.results.meta import RunMeta, SourceRecord, with_declared_shapes

NVML = (Shape(channel="gpu0.power_samples", reading="period"), Shape(channel="gpu0.power_instant", reading="point"))


def as_written_before(channels):
    """Channels as run.json held them before they declared their shapes."""
    out = []
    for c in channels:
        data = c.to_json()
        del data["shaped_by"], data["derived_from"]
        out.append(data)
    return out


def nvml_channels(*, instant=True, samples=True):
    out = [Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1)]
    if instant:
        out.append(Channel("gpu0.power_instant", Quantity.POWER, Scope.GPU, 0.1, primary=False))
    if samples:
        out.append(Channel("gpu0.power_samples", Quantity.POWER, Scope.GPU, 0.02, primary=False))
    out.append(Channel("gpu0.sm_clock", Quantity.STATE, Scope.GPU, 0.05, unit="MHz", primary=False))
    return out


def test_a_counter_written_before_declares_the_shapes_its_names_gave_it():
    source = SourceRecord.from_json({"name": "nvml", "channels": as_written_before(nvml_channels())})
    channels = {c.name: c for c in source.channels}
    assert channels["gpu0"].shaped_by == NVML
    assert all(not c.shaped_by for name, c in channels.items() if name != "gpu0")
    # without instant power the buffer alone; without the buffer nothing (it was never fused)
    only = SourceRecord.from_json({"name": "nvml", "channels": as_written_before(nvml_channels(instant=False))})
    assert only.channels[0].shaped_by == NVML[:1]
    none = SourceRecord.from_json({"name": "nvml", "channels": as_written_before(nvml_channels(samples=False))})
    assert none.channels[0].shaped_by == ()


def test_a_run_that_declares_is_read_as_it_declares():
    declared = [c.to_json() for c in nvml_channels()]  # written now: the counter declares nothing
    assert with_declared_shapes(declared) is declared
    meta = RunMeta.from_json({"format_version": 2, "sources": [{"name": "nvml", "channels": declared}]})
    assert all(not c.shaped_by for c in meta.sources[0].channels)


def test_a_run_json_read_and_written_again_keeps_the_declaration():
    before = {"format_version": 2, "sources": [{"name": "nvml", "channels": as_written_before(nvml_channels())}]}
    meta = RunMeta.from_json(before)
    written = json.loads(json.dumps(meta.to_json()))
    assert written["sources"][0]["channels"][0]["shaped_by"] == [s.to_json() for s in NVML]
    assert RunMeta.from_json(written) == meta


def test_a_renamed_channel_renames_what_it_names():
    counter = Channel("gpu0", Quantity.ENERGY, shaped_by=NVML)
    fused = Channel("gpu0.fused", Quantity.POWER, derived_from="gpu0")
    assert counter.renamed(lambda n: "rank1." + n).shaped_by == tuple(
        Shape(channel="rank1." + s.channel, reading=s.reading) for s in NVML
    )
    assert fused.renamed(lambda n: "r_" + n).derived_from == "r_gpu0"
    assert Channel("wall", Quantity.POWER).renamed(lambda n: "r_" + n).derived_from == ""
