"""``nvml``: GPU energy from NVML's total-energy counter, interpolated between its ticks.

The counter (mJ since the driver loaded) changes every ~100 ms; every change is recorded with
its time, so a window's energy is exact at both edges instead of off by up to a tick per edge.
Instant power (field 186), 1-s average power (185) and the driver's 20-ms power-sample buffer
are recorded as secondary channels; SM and memory clocks, temperature and clock-event reasons
annotate each window, and windows where the GPU was throttled are flagged.

The package, in the style of a device layer:

- ``device``: NVIDIA's bindings, the one NVML error map, GPU selection and probing, readings;
- ``poller``: the channels of a GPU, the fast field poller and the slow poller;
- ``source``: ``NVMLPowerSource``, a ``PollingSource`` (its sampler process, with the line
  protocol's writer and reader side by side, is ``energyframe.kit.sampler``).
"""

from ..devices import cuda_visible_devices
from .device import load_pynvml, nvml_error_message
from .source import NVMLPowerSource

__all__ = ["NVMLPowerSource", "cuda_visible_devices", "load_pynvml", "nvml_error_message"]
