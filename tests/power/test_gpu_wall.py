"""An emulated wall meter behind a real GPU, aligned against that GPU's NVML power (``-m gpu``)."""

import pytest

import energyframe as ef
from energyframe.power.wattsup_emulator import WattsUpEmulator, nvml_profile

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def test_meter_behind_the_gpu_is_aligned_with_sync_pulses():
    assert torch.cuda.is_available()
    with WattsUpEmulator(nvml_profile(baseline_w=150.0, gpu=0), lag_s=2.0, noise_w=0.5) as meter:
        result = ef.run(
            "matmul:M=8192,K=8192,N=8192,dtype=bf16",
            power=["nvml:gpus=0", f"wattsup:ports={meter.port}"],
            reporters=[],
            settings=ef.RunSettings(trials=2, min_window_s=5.0, sync_pulse=True, guard_s=3.0),
        )
    alignment = result.meta["alignment"]["wall"]
    assert alignment["reference"].startswith("gpu0") and alignment["applied"]
    assert abs(alignment["lag_s"] - 2.0) <= 1.0  # one sample period
    gpu = result.windows[(result.windows["channel"] == "gpu0") & (result.windows["phase"] == "matmul")]
    wall = result.windows[(result.windows["channel"] == "wall") & (result.windows["phase"] == "matmul")]
    # the emulated wall is the GPU plus 150 W
    assert wall["mean_power_w"].to_numpy() == pytest.approx(gpu["mean_power_w"].to_numpy() + 150.0, rel=0.03)
