"""Ranks under a launcher: the environment (torchrun's and srun's), devices, the core's agreement
on calibrated steps and time-based loops (a fake coordinator and a fake clock), a one-rank gloo
group, and which power channel is a rank's GPU."""

import os
import signal
import types

import pytest

import energyframe as ef
from energyframe.errors import WorkloadError
from energyframe.lifecycle import planning
from energyframe.lifecycle.config import RunSettings
from energyframe.model import Phase
from energyframe.ranks import gloo
from energyframe.ranks.coordinator import Alone
from energyframe.ranks.world import World
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


def test_world_comes_from_srun_in_a_job_step_only(monkeypatch):
    from energyframe.ranks import world as core

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    batch = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7"}
    assert core.world(batch) == core.World()  # the batch script itself is one process
    step = {**batch, "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1"}
    assert core.world(step) == core.World(3, 1, 4, True, "srun")
    with pytest.raises(core.UsageError) as e:
        core.world({**step, "SLURM_PROCID": "x"})
    assert str(e.value).startswith(
        "SLURM_PROCID, SLURM_LOCALID and SLURM_STEP_NUM_TASKS must be integers (srun sets them): "
    )
    with pytest.raises(core.UsageError) as e:
        core.world({"WORLD_SIZE": "2", "RANK": "2"})
    assert str(e.value) == "RANK=2 and LOCAL_RANK=2 do not fit WORLD_SIZE=2"
    # torchrun inside an srun step: torchrun's variables win, and say who launched
    both = {**step, "WORLD_SIZE": "8", "RANK": "5", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "x"}
    assert core.world(both) == core.World(5, 1, 8, True, "torchrun")


def test_srun_variables_are_exported_for_torch_and_the_workloads(monkeypatch):
    from energyframe.ranks import world as core

    launcher = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")
    env = {k: v for k, v in os.environ.items() if k not in launcher}
    env.update(SLURM_STEP_NUM_TASKS="2", SLURM_PROCID="1", SLURM_LOCALID="1")
    monkeypatch.setattr(os, "environ", env)  # what export writes is undone with it
    assert core.export_launcher_env() == core.World(1, 1, 2, True, "srun")
    assert (os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"]) == ("1", "1", "2")
    assert distributed.world() == core.World(1, 1, 2, True, "srun")  # the workloads see the same


def test_a_rank_measures_the_gpu_of_its_local_rank():
    from energyframe.ranks import world as core

    assert core.rank_devices(core.World()) is None  # no launcher: the sources' default
    assert core.rank_devices(core.World(5, 1, 8, True, "torchrun")) == ["cuda:1"]
    assert core.rank_devices(core.World(0, 0, 1, True, "torchrun")) == ["cuda:0"]


def test_the_rank_picks_the_gpu_not_the_device_option():
    w = distributed.World(1, 1, 2, True)
    with pytest.raises(WorkloadError) as e:
        distributed.rank_device("cuda:1", w)
    assert str(e.value) == (
        "device=cuda:1 cannot be used with 2 ranks: each rank takes cuda:LOCAL_RANK; use device=cuda, auto or cpu"
    )
    assert distributed.rank_device("cpu", w).type == "cpu"


def test_every_workload_device_under_a_launcher_is_the_ranks(monkeypatch):
    """Kernels, models and sweeps resolve their device with ``torch_device``: with several
    ranks it is the rank's (on a GPU, cuda:LOCAL_RANK, the GPU the rank's sampler measures),
    never the process's current device, which is cuda:0 for every rank."""
    import torch

    from energyframe.workloads.graph import torch_device

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(WorkloadError, match="device=cuda:0 cannot be used with 2 ranks"):
        torch_device("cuda:0")
    assert torch_device("cpu").type == "cpu"
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert torch_device("auto") == torch.device("cuda", 1) == torch_device("cuda")
    assert chosen == [torch.device("cuda", 1)] * 2  # made current, for code that asks for "cuda"


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


def test_a_one_rank_group_gathers_and_barriers(one_rank_group):
    assert distributed.gather({"rank": 0}) == [{"rank": 0}]
    sync = distributed.barrier_sync(torch.device("cpu"))
    sync()  # a barrier of one rank returns at once
    assert distributed.joined()


class SlowerPeer(Alone):
    """Rank 0 of two, whose peer takes ``factor`` times as long for everything, and whose own
    proposals stand; records what was agreed."""

    distributed = True

    def __init__(self, factor=2.0, root_says=None):
        super().__init__(World(0, 0, 2, True, "torchrun"))
        self.factor = factor
        self.root_says = list(root_says) if root_says is not None else None
        self.said: list[str] = []

    def edge(self, what):
        self.said.append(what)

    def agree(self, value, what, how="max"):
        self.said.append(f"agree on {what}")
        if how == "root":
            return self.root_says.pop(0) if self.root_says is not None else value
        return max(value, self.factor * value) if how == "max" else min(value, self.factor * value)


@pytest.fixture
def fake_clock(monkeypatch):
    """The planning's clock moves only when a step runs (nothing else sees it)."""
    clock = FakeClock()
    monkeypatch.setattr(planning, "time", types.SimpleNamespace(monotonic=clock, sleep=lambda s: None))
    return clock


def test_calibration_alone_times_growing_batches(fake_clock):
    phase = Phase("p", step=fake_clock.step)
    steps, per_step = planning.calibrate(phase, 1.0, 10**9)
    # 1 step (15.6 ms), then ceil(1.1 x 0.15 x 64) = 11 steps (0.172 s, past 0.15 of the
    # window); a window of 1.08 x 1 s is ceil(1.08 x 64) = 70 steps
    assert fake_clock.steps == 1 + 11
    assert (steps, per_step) == (70, 1 / 64)


def test_calibration_of_several_ranks_follows_the_slowest(fake_clock):
    phase = Phase("p", step=fake_clock.step)
    peer = SlowerPeer(factor=2.0)
    steps, per_step = planning.calibrate(phase, 1.0, 10**9, peer)
    # the peer's batches take twice as long: 1 step is 1/32 s, then ceil(1.1 x 0.15 x 32) = 6
    # steps (0.1875 s on the peer); its 1/32 s per step fills 1.08 s with ceil(1.08 x 32) = 35 steps
    assert fake_clock.steps == 1 + 6
    assert (steps, per_step) == (35, 1 / 32)
    # every batch started together and its time was agreed
    assert peer.said == ["time a calibration batch", "agree on a calibration batch's time"] * 2


def test_time_based_warm_up_of_several_ranks_runs_the_steps_rank_0_says(fake_clock):
    phase = Phase("p", step=fake_clock.step)
    config = RunSettings(warmup_s=100.0).resolve()
    # whatever this rank's clock says, rank 0 decides: 3 steps more, then 1, then stop
    peer = SlowerPeer(root_says=[3, 1, 0])
    assert planning.warm_up(phase, config, peer) == 1 + 3 + 1
    assert fake_clock.steps == 5
    assert peer.said == ["agree on warm-up steps"] * 3
    guard = SlowerPeer(root_says=[0])
    planning.run_for(phase, 100.0, guard)  # a guard band too
    assert fake_clock.steps == 6 and guard.said == ["agree on guard-band steps"]


def test_rank_0_proposes_chunks_that_end_on_its_clock(fake_clock):
    phase = Phase("p", step=fake_clock.step)
    # as rank 0 (its proposals stand): 1 step, then twice as many each time up to 0.1 s of
    # steps (6 at 1/64 s), stopping once its clock passed the 0.5 s asked for
    steps = planning.run_agreed(phase, 0.5, SlowerPeer(), "warm-up steps")
    assert steps == 1 + 2 + 4 + 6 + 6 + 6 + 6 + 1
    assert fake_clock.now >= 0.5


class Listening(Alone):
    """One process that records what the run asked the ranks to agree on."""

    def __init__(self):
        super().__init__()
        self.said: list[str] = []

    def edge(self, what):
        self.said.append(what)

    def agree(self, value, what, how="max"):
        self.said.append(f"agree on {what}")
        return value


def test_window_edges_phases_and_window_lengths_are_agreed():
    from tests.fakes import ListWorkload, busy_phase

    listening = Listening()
    phases = [busy_phase("a", iterations=2), busy_phase("b", seconds=0.002)]
    ef.run(
        ListWorkload(phases),
        power="none",
        reporters=[],
        settings=RunSettings(trials=1, min_window_s=0.05, warmup=0),
        coordinator=listening,
    )
    said = [w for w in listening.said if "calibration" not in w]
    assert said[:5] == [
        "agree on the shortest window",
        "measure phase 'a', 2 steps per window",
        "open window 'a'",
        "close window 'a'",
        "measure phase 'b'",
    ]
    # a window measured again when it came out short is agreed the same way
    b = said[5:-1]
    assert b and b == ["open window 'b'", "close window 'b'", "agree on the window's length"] * (len(b) // 3)
    assert said[-1] == "end the phases"
    calibration = [w for w in listening.said if "calibration" in w]
    assert calibration and calibration[:2] == ["time a calibration batch", "agree on a calibration batch's time"]


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


def test_srun_without_a_rendezvous_address_is_refused_in_one_line(tmp_path):
    from click.testing import CliRunner

    from energyframe.cli import main

    env = {
        "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
        # unset here, and whatever the run exports is undone afterwards
        "RANK": None, "LOCAL_RANK": None, "WORLD_SIZE": None, "MASTER_ADDR": None, "MASTER_PORT": None,
        "TORCHELASTIC_RUN_ID": None,
    }
    result = CliRunner().invoke(
        main, ["run", "--power", "none", "--workload", "sleep:seconds=0", "--out", str(tmp_path / "run")], env=env
    )
    assert result.output == (
        "Error: 2 ranks were started (srun), but MASTER_ADDR and MASTER_PORT are not set: export them (the "
        "address of the first task's machine and a free port) before starting the ranks (docs/distributed.md "
        "has a Slurm batch script)\n"
    )
    assert result.exit_code == 2
    assert not (tmp_path / "run").exists()  # refused before anything started
    assert "RANK" not in os.environ


def test_one_process_keeps_the_single_process_format(tmp_path, monkeypatch):
    from energyframe.core.windows import WINDOW_COLUMNS
    from tests.conftest import write_power_csv

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(name, raising=False)
    power = write_power_csv(tmp_path / "p.csv", 80.0, period_s=0.01, duration_s=30.0)
    result = ef.run(
        "sleep:seconds=0.05", power=[f"replay:file={power}"], reporters=[], out=tmp_path / "run",
        settings=RunSettings(trials=2),
    )
    assert "distributed" not in result.meta and list(result.windows.columns) == WINDOW_COLUMNS
    assert not {"ranks_join", "ranks_start", "gather"} & set(result.meta["timings_s"])
    assert result.meta["primary_channels"] == ["replay"]


def test_rank_0_refuses_a_gpu_two_ranks_measure_and_names_ignored_directories(tmp_path):
    from energyframe.errors import UsageError
    from energyframe.lifecycle.measurement import Measurement
    from energyframe.lifecycle.ranked import check_ranks
    from energyframe.ranks.coordinator import RankInfo

    gpu = "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"

    def info(rank, gpus, out=None, host="node0"):
        return RankInfo(rank, rank, host, "boot-1", 100 + rank, ["cuda:0"], gpus, out)

    m = Measurement(out=tmp_path / "run")
    m.coordinator = types.SimpleNamespace(
        is_root=True, ranks={0: info(0, [("nvml", gpu)]), 1: info(1, [("nvml", gpu)])}
    )
    with pytest.raises(UsageError) as e:
        check_ranks(m.coordinator, m.out, m.warn)
    assert str(e.value) == (
        f"GPU {gpu} is measured by rank 0 (nvml) and by rank 1 (nvml): it would be counted twice; let each "
        "rank measure its own GPU (nvml and nvidia-smi without gpus= take the GPU of the rank's LOCAL_RANK)"
    )
    # nvidia-smi names GPUs by index: one machine's index 0 is another machine's too
    m.coordinator.ranks = {
        0: info(0, [("nvidia-smi", "0")], out=str(tmp_path / "run")),
        1: info(1, [("nvidia-smi", "0")], out=str(tmp_path / "elsewhere"), host="node1"),
    }
    check_ranks(m.coordinator, m.out, m.warn)
    assert m.warnings == [
        f"the ranks were given other run directories than rank 0's (rank 1: {tmp_path / 'elsewhere'}); the "
        f"run is saved once, by rank 0, in {tmp_path / 'run'}"
    ]


def test_sync_pulses_load_the_ranks_own_gpu(monkeypatch):
    """--sync-pulse under a launcher: each rank's bursts run on its own GPU (cuda:LOCAL_RANK),
    the one its sampler measures, not on cuda:0 for every rank."""
    import torch

    from energyframe.lifecycle import phases, pulse

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch, "randn", lambda *shape, device, dtype: asked.append(device) or torch.zeros(1))
    assert pulse.PulseLoad("cuda:1").kind == "gpu" and asked == ["cuda:1"]

    made = []

    class Load:
        kind = "gpu"

        def __init__(self, device="cuda"):
            made.append(device)

        def sync(self):
            pass

        def run(self, seconds):
            pass

    class Windows:
        def begin_window(self, name, sync):
            pass

        def end_window(self, name, sync):
            pass

    for name, value in (("PulseLoad", Load), ("PULSES", 1), ("ON_S", 0.0), ("OFF_S", 0.0)):
        monkeypatch.setattr(pulse, name, value)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    phases.sync_pulses(Windows())
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name)
    phases.sync_pulses(Windows())
    assert made == ["cuda:1", "cuda"]


class SignalledInTheExchange(Alone):
    """A rank whose exchange to close a window every rank passes while a Ctrl-C, or a failing
    source's interrupt, arrives: held through the exchange, as the gloo coordinator holds it,
    and handled as the exchange ends."""

    def holding_signals(self):
        return gloo._shielded()

    def edge(self, what):
        with gloo._shielded():
            if what.startswith("close window"):
                signal.raise_signal(signal.SIGINT)


def test_a_signal_during_the_closing_exchange_comes_after_the_window_is_kept(tmp_path):
    # every rank passed the exchange, so each keeps the window (once, a rank under load lost it
    # while the others kept it); the interrupt still stops the run
    with ef.measure(power="none", out=tmp_path / "m", coordinator=SignalledInTheExchange()) as m:
        m.begin_window("step")
        with pytest.raises(KeyboardInterrupt):
            m.end_window("step")
        assert [(r.phase, r.trial) for r in m.closed_windows()] == [("step", 0)]
