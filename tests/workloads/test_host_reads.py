"""Reads of device values fixed as eager calls made them, so that a call that branches on one can
be captured (workloads/host_reads.py). On the CPU every tensor stands for a device's here; the
capture itself is tested on a GPU (tests/workloads/test_gpu_workloads.py)."""

import math

import pytest
import torch

from energyframe.workloads.host_reads import HostReadMissing, HostReads


def every_tensor(_tensor) -> bool:
    return True


def bart_like(state: dict) -> None:
    """BART's fp16 layers: clamp only when something overflowed, decided on the host; and a
    size read from a tensor."""
    h = state["h"] * 2.0
    if not torch.isfinite(h).all():
        h = torch.clamp(h, min=-1e4, max=1e4)
    state["out"] = h
    state["n"] = int(state["count"].sum())


def test_reads_recorded_twice_alike_are_replayed_without_reading_again():
    state = {"h": torch.ones(4), "count": torch.tensor([1, 2])}
    reads = HostReads(on_device=every_tensor)
    reads.recording(lambda: bart_like(state))
    reads.recording(lambda: bart_like(state))
    assert reads.static and reads.reads == 2
    # the device's values change: a replay keeps the decisions the eager calls took
    state["h"] = torch.tensor([1.0, math.inf, 1.0, 1.0])
    state["count"] = torch.tensor([5, 5])
    reads.replaying(lambda: bart_like(state))
    assert math.isinf(state["out"][1].item())  # not clamped: the recorded check said finite
    assert state["n"] == 3  # the recorded size, not the new 10
    # the same call replayed again starts from the first read
    reads.replaying(lambda: bart_like(state))
    assert state["n"] == 3


def test_reads_that_change_from_call_to_call_are_not_fixed():
    state = {"h": torch.ones(4), "count": torch.tensor([1, 2])}
    reads = HostReads(on_device=every_tensor)
    reads.recording(lambda: bart_like(state))
    state["count"] = torch.tensor([2, 2])  # a decode step's growing length, say
    reads.recording(lambda: bart_like(state))
    assert not reads.static


def test_a_call_without_reads_is_not_fixed():
    reads = HostReads(on_device=every_tensor)
    x = torch.ones(3)
    reads.recording(lambda: x * 2)
    reads.recording(lambda: x * 2)
    assert not reads.static and reads.reads == 0


def test_a_read_the_eager_calls_never_made_fails_the_replay():
    x = torch.ones(3)
    reads = HostReads(on_device=every_tensor)
    for _ in range(2):
        reads.recording(lambda: bool(x.all()))
    assert reads.static
    with pytest.raises(HostReadMissing, match="did not read there"):
        reads.replaying(lambda: (bool(x.all()), x.sum().item()))
    # nor more reads at a place than the eager calls made there
    with pytest.raises(HostReadMissing):
        reads.replaying(lambda: [bool(x.all()) for _ in range(2)])


def test_reads_of_tensors_off_the_device_run_as_they_are():
    x = torch.ones(3)
    reads = HostReads()  # CUDA tensors only: these CPU reads are neither recorded nor replayed
    for _ in range(2):
        reads.recording(lambda: x.sum().item())
    assert reads.reads == 0 and not reads.static
