"""What the nvml source polls: the channels of a GPU, the fast field poller, the slow poller.

Per GPU, one poller reads the total-energy counter together with instant and 1-s average power
in one ``nvmlDeviceGetFieldValues`` call; the base records each value *change* (``Dedup``), so a
counter tick is stamped midway between the last poll that saw the old value and the first that
saw the new one, each poll at its start, where the field query reads (``source.py``). When it
polls is its schedule's business (``kit/schedule.py``: densely only around the counter's
expected ticks, by default). One slow
poller reads the driver's 20-ms power-sample buffer of every GPU with the last-seen timestamp
(so nothing is lost between reads), and the clocks, temperature and clock-event reasons.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ...errors import PowerSourceError
from ...model import Channel, ClockBase, Quantity, Sample, Scope, Shape, Timing
from .device import GPU

#: update periods measured on H100/H200 (benchmarks/sensor_probe.py). Units: s.
COUNTER_PERIOD_S = 0.1
INSTANT_PERIOD_S = 0.1
SAMPLE_BUFFER_PERIOD_S = 0.02
STATE_INTERVAL_S = 0.05
#: field 185 and nvmlDeviceGetPowerUsage average over the last second (Ampere and newer). Units: s.
AVERAGE_WINDOW_S = 1.0
#: NVIDIA states the board's power readings accurate to within ±5 W (nvidia-smi
#: --help-query-gpu, power.draw*); the counter integrates the same sensor. Units: W.
BOARD_ACCURACY_W = 5.0
#: the buffer holds ~2.4 s; it is read every 0.1 s (about five new samples a read), so that a
#: window's 20-ms samples past its end arrive within about one counter period of its close:
#: the window's energy (``m.window(...).energy_j``, ``--precision``) and the end of a run wait
#: for them, up to the whole interval. Units: s.
BUFFER_INTERVAL_S = 0.1

CHANNEL_KINDS = ("energy", "instant", "average", "samples", "state")

#: energyframe's names of the clock-event ("throttle") reasons, and the suffix of pynvml's
#: ``nvmlClocksEventReason*`` (``nvmlClocksThrottleReason*`` in older bindings) constant
REASON_CONSTANTS = {
    "gpu_idle": "GpuIdle",
    "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap",
    "hw_slowdown": "HwSlowdown",
    "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown",
    "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
    "display_clock_setting": "DisplayClockSetting",
}
#: the reasons that slow the GPU down (flagged ``throttled:<reason>``)
THROTTLING = {
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
}


def clock_event_bits(nvml) -> dict[str, int]:
    """Each reason's bit, from pynvml's constants."""
    bits = {}
    for name, suffix in REASON_CONSTANTS.items():
        bit = getattr(nvml, "nvmlClocksEventReason" + suffix, None)
        if bit is None:
            bit = getattr(nvml, "nvmlClocksThrottleReason" + suffix, None)
        if bit is not None:
            bits[name] = int(bit)
    return bits


def gpu_channels(gpu: GPU, kinds: Sequence[str]) -> list[Channel]:
    """The channels recorded for ``gpu``: the counter (or power, without one) and ``kinds``."""
    base = f"gpu{gpu.index}"
    out = [_base_channel(gpu, base), *_power_channels(gpu, base, kinds)]
    if "state" in kinds:
        out += _state_channels(base)
    if gpu.has_counter and "samples" in kinds and gpu.has_samples:
        out[0] = replace(out[0], shaped_by=counter_shapes(base, "instant" in kinds and gpu.has_instant))
    return [replace(c, accuracy_w=BOARD_ACCURACY_W) if c.integrable else c for c in out]


def _base_channel(gpu: GPU, base: str) -> Channel:
    """The GPU's primary channel: its energy counter, else its instant power, else the 1-s
    average power every GPU reports."""
    mono = ClockBase.MONOTONIC
    if gpu.has_counter:
        description = "NVML total energy counter (field 83), interpolated between its ticks"
        return Channel(base, Quantity.ENERGY, Scope.GPU, COUNTER_PERIOD_S, mono, description=description)
    if gpu.has_instant:
        description = "NVML instant power (field 186; no energy counter on this GPU)"
        return Channel(base, Quantity.POWER, Scope.GPU, INSTANT_PERIOD_S, mono, description=description)
    return Channel(
        base,
        Quantity.POWER,
        Scope.GPU,
        INSTANT_PERIOD_S,
        mono,
        description="NVML power usage (no energy counter or instant power on this GPU): a 1-s average",
        timing=Timing.PERIOD_END,
        averaging_s=AVERAGE_WINDOW_S,
    )


def _power_channels(gpu: GPU, base: str, kinds: Sequence[str]) -> list[Channel]:
    """The secondary power channels of ``kinds`` the GPU has: instant power (beside a counter:
    without one it is the base), the 1-s average, the driver's sample buffer."""
    out = []
    if "instant" in kinds and gpu.has_instant and gpu.has_counter:  # without a counter it is the base
        out.append(
            _secondary_power(
                f"{base}.power_instant",
                INSTANT_PERIOD_S,
                "NVML instant power (field 186), changes every ~100 ms",
            )
        )
    if "average" in kinds and gpu.has_average:
        out.append(
            _secondary_power(
                f"{base}.power_average",
                INSTANT_PERIOD_S,
                "NVML 1-s average power (field 185): lags a change of load by ~0.5 s",
                timing=Timing.PERIOD_END,
                averaging_s=AVERAGE_WINDOW_S,
            )
        )
    if "samples" in kinds and gpu.has_samples:
        out.append(
            _secondary_power(
                f"{base}.power_samples",
                SAMPLE_BUFFER_PERIOD_S,
                "driver power-sample buffer (nvmlDeviceGetSamples), ~20 ms apart",
                clock=ClockBase.WALL,
            )
        )
    return out


def _secondary_power(name, period, description, clock=ClockBase.MONOTONIC, **kw) -> Channel:
    return Channel(name, Quantity.POWER, Scope.GPU, period, clock, primary=False, description=description, **kw)


def _state_channels(base: str) -> list[Channel]:
    """The GPU's clocks, temperature and clock-event reasons."""
    return [
        Channel(
            f"{base}.{suffix}",
            Quantity.STATE,
            Scope.GPU,
            STATE_INTERVAL_S,
            ClockBase.MONOTONIC,
            unit=unit,
            primary=False,
            description=text,
        )
        for suffix, unit, text in (
            ("sm_clock", "MHz", "SM clock"),
            ("mem_clock", "MHz", "memory clock"),
            ("temperature", "C", "GPU temperature"),
            ("clock_events", "bits", "clock-event (throttle) reasons, nvml.h bit mask"),
        )
    ]


def counter_shapes(base: str, instant: bool) -> tuple[Shape, ...]:
    """What shapes the energy counter ``base`` between its ticks, finest first: the driver's
    buffer (each sample the mean power since the one before), then, where the buffer has gaps,
    instant power; the run adds the counter's fused power, ``gpuN.fused`` (docs/power-sources.md)."""
    buffer = Shape(channel=f"{base}.power_samples", reading="period")
    return (buffer, Shape(channel=f"{base}.power_instant", reading="point")) if instant else (buffer,)


class FieldPoller:
    """One GPU's counter, instant and 1-s average power in one call: ``{channel: J or W}``."""

    def __init__(self, gpu: GPU, kinds: Sequence[str]) -> None:
        nvml = gpu.nvml
        self.gpu = gpu
        base = f"gpu{gpu.index}"
        self.channels: list[str] = []
        self.ids: list[int] = []
        self.counter: str | None = None
        if gpu.has_counter:
            self._add(nvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, base)
            self.counter = base
        if gpu.has_instant and ("instant" in kinds or not gpu.has_counter):
            self._add(nvml.NVML_FI_DEV_POWER_INSTANT, f"{base}.power_instant" if gpu.has_counter else base)
        if gpu.has_average and "average" in kinds:
            self._add(nvml.NVML_FI_DEV_POWER_AVERAGE, f"{base}.power_average")
        self.use_power_usage = not gpu.has_counter and not gpu.has_instant
        self._last_counter_j: float | None = None

    def _add(self, field_id: int, channel: str) -> None:
        self.ids.append(field_id)
        self.channels.append(channel)

    def __call__(self) -> dict[str, float]:
        readings = {}
        if self.ids:
            values = self.gpu.field_values(self.ids)  # mJ and mW
            readings = {channel: value * 1e-3 for channel, value in zip(self.channels, values)}
        if self.use_power_usage:
            readings[f"gpu{self.gpu.index}"] = self.gpu.power_usage_w()
        if self.counter is not None:
            energy_j = readings[self.counter]
            last = self._last_counter_j
            if last is not None and energy_j < last:
                raise PowerSourceError(
                    f"the energy counter of GPU {self.gpu.index} went down from {last:.3f} J to "
                    f"{energy_j:.3f} J: the driver was reloaded or the GPU reset, and the energy across "
                    "it is unknown"
                )
            self._last_counter_j = energy_j
        return readings


class SlowPoller:
    """Every GPU's clocks, temperature and clock-event reasons each call, and its power-sample
    buffer every ``BUFFER_INTERVAL_S``, read from the last timestamp seen."""

    def __init__(self, gpus: Sequence[GPU], kinds: Sequence[str], warn: Callable[[str], None]) -> None:
        self.gpus = list(gpus)
        self.state = "state" in kinds
        self.buffer = [g for g in gpus if "samples" in kinds and g.has_samples]
        self.warn = warn
        self._last_seen_us = {g.index: 0 for g in gpus}
        self._warned_loss: set[int] = set()
        self._next_buffer_s = 0.0

    def __call__(self) -> list[Sample]:
        batch: list[Sample] = []
        if self.state:
            for gpu in self.gpus:
                sm, mem, temperature, reasons = gpu.state()
                t = time.monotonic()
                base = f"gpu{gpu.index}"
                batch += [
                    Sample(f"{base}.sm_clock", t, sm),
                    Sample(f"{base}.mem_clock", t, mem),
                    Sample(f"{base}.temperature", t, temperature),
                    Sample(f"{base}.clock_events", t, float(reasons)),
                ]
        now = time.monotonic()
        if self.buffer and now >= self._next_buffer_s:
            self._next_buffer_s = now + BUFFER_INTERVAL_S
            for gpu in self.buffer:
                batch += self._read_buffer(gpu)
        return batch

    def _read_buffer(self, gpu: GPU) -> list[Sample]:
        last_us = self._last_seen_us[gpu.index]
        fresh = gpu.power_samples(last_us)
        if not fresh:
            return []
        gap_us = fresh[0][0] - last_us
        if last_us and gap_us > 3 * SAMPLE_BUFFER_PERIOD_S * 1e6 and gpu.index not in self._warned_loss:
            self._warned_loss.add(gpu.index)
            self.warn(f"GPU {gpu.index}: power samples were lost between two reads of the driver's buffer")
        self._last_seen_us[gpu.index] = fresh[-1][0]
        channel = f"gpu{gpu.index}.power_samples"
        return [Sample(channel, t_us * 1e-6, watts) for t_us, watts in fresh]
