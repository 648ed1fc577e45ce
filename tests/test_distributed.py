"""Ranks under a launcher: the environment, devices, the steps every rank agrees on (a
one-rank gloo group, a fake clock), and which power channel is a rank's GPU."""

import pytest

from energyframe.errors import WorkloadError
from energyframe.workloads import distributed

torch = pytest.importorskip("torch")


def test_world_comes_from_the_launchers_environment(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.world() == distributed.World(0, 0, 1, False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    w = distributed.world()
    assert (w.rank, w.local_rank, w.world_size, w.launched, w.distributed) == (3, 1, 4, True, True)
    monkeypatch.setenv("RANK", "three")
    with pytest.raises(WorkloadError, match="RANK, LOCAL_RANK and WORLD_SIZE must be integers"):
        distributed.world()


def test_the_rank_picks_the_gpu_not_the_device_option():
    w = distributed.World(1, 1, 2, True)
    with pytest.raises(WorkloadError) as e:
        distributed.rank_device("cuda:1", w)
    assert str(e.value) == (
        "device=cuda:1 cannot be used with 2 ranks: each rank takes cuda:LOCAL_RANK; use device=cuda, auto or cpu"
    )
    assert distributed.rank_device("cpu", w).type == "cpu"


class FakeClock:
    """Time moves only when the work runs: each step takes 1/64 s (exact in binary)."""

    def __init__(self):
        self.now = 0.0
        self.steps = 0

    def __call__(self):
        return self.now

    def step(self):
        self.steps += 1
        self.now += 1 / 64


@pytest.fixture
def one_rank_group(monkeypatch):
    from torch.distributed.elastic.utils.distributed import get_free_port

    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(get_free_port()))
    distributed.join(torch.device("cpu"))
    yield
    distributed.leave()
    assert not torch.distributed.is_initialized()  # join made it, so the last leave destroys it


def test_agreed_steps_time_growing_batches_then_fill_the_window(one_rank_group):
    clock = FakeClock()
    steps, per_step = distributed.agreed_steps(clock.step, lambda: None, window_s=1.0, clock=clock)
    # 2 warm-up steps; 1 step (15.6 ms), then ceil(0.55 x 64) = 36 steps (0.5625 s, past half
    # the window); a window of 1.15 x 1 s is ceil(1.15 x 64) = 74 steps
    assert clock.steps == 2 + 1 + 36
    assert per_step == 1 / 64 and steps == 74
    assert distributed.agreed_max(2.5) == 2.5
    assert distributed.gather({"rank": 0}) == [{"rank": 0}]
    sync = distributed.barrier_sync(torch.device("cpu"))
    sync()  # a barrier of one rank returns at once


def test_a_ranks_channel_is_found_by_its_gpus_uuid():
    meta = {
        "primary_channels": ["gpu0", "gpu1"],
        "sources": [
            {
                "name": "nvml",
                "info": {"gpus": [{"index": 0, "uuid": "GPU-aaa"}, {"index": 1, "uuid": "GPU-bbb"}]},
            }
        ],
    }
    assert distributed.channel_of_gpu(meta, "GPU-bbb") == "gpu1"
    assert distributed.channel_of_gpu(meta, "GPU-ccc") is None
    assert distributed.channel_of_gpu({**meta, "primary_channels": ["gpu0"]}, "GPU-bbb") is None
    assert distributed.own_channel(object(), torch.device("cpu")) is None  # a CPU rank has no GPU channel
