"""Each rank measures its own GPU: a launcher's device (``SourceContext.devices``) mapped to the GPU
NVML or nvidia-smi reads (through ``CUDA_VISIBLE_DEVICES``), explicit ``gpus=`` winning, and the
replay source reading each rank's own file. The fakes are the lowest layer: a fake ``pynvml``
module and a fake ``nvidia-smi`` executable."""

import pytest

from energyframe.errors import PowerSourceError
from energyframe.plugin import SourceContext
from energyframe.power.devices import rank_gpus
from energyframe.power.nvidia_smi import NvidiaSmiPowerSource
from energyframe.power.nvml import NVMLPowerSource
from energyframe.power.replay import ReplayPowerSource
from tests.conftest import gpu, write_power_csv

A, B, C = (f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3))


def test_a_cuda_ordinal_is_a_gpu_cuda_shows():
    assert rank_gpus(["cuda:1"], None) == (["1"], [])  # no CUDA_VISIBLE_DEVICES: every GPU, NVML's order
    assert rank_gpus(["cuda:1"], "2,0") == (["0"], [])
    assert rank_gpus(["cuda:0"], f"{B},{C}") == ([B], [])
    assert rank_gpus([A], "2,0") == ([A], [])  # a UUID is the GPU
    gpus, notes = rank_gpus(["cuda:3"], "5")  # Slurm's --gpus-per-task=1: the one GPU it sees
    assert gpus == ["5"] and notes == ["LOCAL_RANK 3 sees one GPU (CUDA_VISIBLE_DEVICES=5): measuring that one"]
    with pytest.raises(PowerSourceError) as e:
        rank_gpus(["cuda:2"], "0,1")
    assert str(e.value) == (
        "LOCAL_RANK 2 has no GPU: CUDA_VISIBLE_DEVICES shows 2 (0,1); start one rank per visible GPU, "
        "or choose the GPU with gpus="
    )
    with pytest.raises(PowerSourceError, match="CUDA_VISIBLE_DEVICES is empty"):
        rank_gpus(["cuda:0"], "")


def _start(source, **context):
    channels = source.start(SourceContext(**context))
    info = dict(source.info())
    source.stop()
    return [c.name for c in channels if c.primary], info


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_nvml_measures_the_ranks_gpu(fake_nvml, monkeypatch, mode):  # noqa: F811
    fake_nvml([gpu(A), gpu(B), gpu(C)])
    primary, info = _start(NVMLPowerSource(name="nvml", mode=mode), devices=["cuda:1"], rank=5, local_rank=1)
    assert primary == ["gpu1"]
    assert [g["uuid"] for g in info["gpus"]] == [B]
    assert info["gpus"][0]["selected_as"] == "the rank's GPU (LOCAL_RANK 1)"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")  # the rank's cuda:1 is NVML's GPU 0
    primary, info = _start(NVMLPowerSource(name="nvml", mode=mode), devices=["cuda:1"], local_rank=1)
    assert primary == ["gpu0"] and [g["uuid"] for g in info["gpus"]] == [A]


def test_nvml_takes_the_gpus_it_is_given_over_the_ranks(fake_nvml):  # noqa: F811
    fake_nvml([gpu(A), gpu(B), gpu(C)])
    primary, _ = _start(NVMLPowerSource(name="nvml", mode="thread", gpus="2"), devices=["cuda:1"])
    assert primary == ["gpu2"]
    primary, _ = _start(NVMLPowerSource(name="nvml", mode="thread"), devices=[C])  # a UUID from torch
    assert primary == ["gpu2"]
    primary, _ = _start(NVMLPowerSource(name="nvml", mode="thread"))  # no launcher: every GPU
    assert primary == ["gpu0", "gpu1", "gpu2"]


def test_nvml_says_when_the_gpu_order_may_differ(fake_nvml, monkeypatch):  # noqa: F811
    fake_nvml([gpu(A), {**gpu(B), "name": "NVIDIA A100"}])
    warnings = []
    source = NVMLPowerSource(name="nvml", mode="thread")
    source.start(SourceContext(devices=["cuda:1"], local_rank=1, warn=warnings.append))
    source.stop()
    assert warnings == [
        "this machine has GPUs of 2 models (NVIDIA A100, NVIDIA H200): the rank's GPU was taken in PCI order "
        "(NVML's); set CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA counts them the same way"
    ]
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    warnings.clear()
    source = NVMLPowerSource(name="nvml", mode="thread")
    source.start(SourceContext(devices=["cuda:1"], local_rank=1, warn=warnings.append))
    source.stop()
    assert warnings == []


def test_nvidia_smi_reads_the_ranks_gpu(fake_smi):  # noqa: F811
    fake_smi(gpus=3)
    primary, info = _start(NvidiaSmiPowerSource(name="nvidia-smi"), devices=["cuda:2"], local_rank=2)
    assert primary == ["gpu2"] and info["gpus"] == ["2"]
    assert info["command"][-2:] == ["-i", "2"]
    primary, _ = _start(NvidiaSmiPowerSource(name="nvidia-smi", gpus="0"), devices=["cuda:2"])
    assert primary == ["gpu0"]


def test_replay_reads_the_ranks_own_file(tmp_path):
    for rank, watts in ((0, 100.0), (1, 50.0)):
        write_power_csv(tmp_path / f"p-{rank}.csv", watts)
    source = ReplayPowerSource(name="replay", file=str(tmp_path / "p-{rank}.csv"))
    source.start(SourceContext(rank=1, local_rank=0))
    assert source.info()["file"] == str(tmp_path / "p-1.csv")
    source.stop()
    source = ReplayPowerSource(name="replay", file=str(tmp_path / "p-{local_rank}.csv"))
    source.start(SourceContext(rank=1, local_rank=0))
    assert source.info()["file"] == str(tmp_path / "p-0.csv")
    source.stop()
    with pytest.raises(PowerSourceError) as e:
        ReplayPowerSource(name="replay", file=str(tmp_path / "p-{rank}.csv")).start(SourceContext(rank=2))
    assert str(e.value) == f"replay file {str(tmp_path / 'p-2.csv')!r} does not exist"


def test_which_sources_run_in_every_rank():
    from energyframe.kit import registry

    per_process = {name: registry.load(registry.POWER, name).PER_PROCESS for name in registry.names(registry.POWER)}
    assert per_process["nvml"] and per_process["nvidia-smi"] and per_process["replay"]
    assert not per_process["wattsup"]  # a wall meter measures the machine: local rank 0 only
