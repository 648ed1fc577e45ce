"""``nvml``: GPU energy from NVML's total-energy counter, interpolated between its ticks.

Sampling runs in a separate process by default (``mode=process``): one counter read blocks for
~3 ms in the driver, and polling it from the measured process would compete with it.
``mode=thread`` samples in a thread of the measured process instead.

The counter ticks on a regular grid (~100 ms). By default (``sampler=grid``) each GPU's field
poller learns that grid and polls every ``interval_ms`` only from shortly before each expected
tick until it comes (``kit/schedule.py``): each tick is bracketed as tightly as by polling all
the time, at a fraction of the polls. ``sampler=dense`` polls every ``interval_ms`` throughout.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import OptionError, PowerSourceError
from ...kit.polling import Dedup, Poller, PollingSource, mode_option
from ...kit.schedule import TickSchedule
from ...model import Channel, Detection, Quantity, Scope, WindowAnnotation
from ...options import Option
from ..devices import cuda_visible_devices, rank_gpus
from .device import (
    GPU,
    bindings_version,
    load_pynvml,
    nvml_error_message,
    nvml_errors,
    probe,
    select_gpus,
    text,
)
from .poller import (
    CHANNEL_KINDS,
    STATE_INTERVAL_S,
    THROTTLING,
    FieldPoller,
    SlowPoller,
    clock_event_bits,
    gpu_channels,
)

#: the ``sampler`` option's schedules of the counter's polls
SAMPLERS = ("grid", "dense")


class NVMLPowerSource(PollingSource):
    """NVIDIA GPUs through NVML (nvidia-ml-py)."""

    DESCRIPTION = "NVIDIA GPU energy: NVML counter interpolated between ticks, plus power and clocks"
    OPTIONS = (
        Option("gpus", "list", None, "NVML indices or UUIDs (default: the GPUs CUDA sees, else all)"),
        Option(
            "interval_ms",
            "float",
            1.0,
            "pause between two counter polls where the counter is polled densely (a poll takes ~3 ms). Units: ms",
            minimum=0.0,
        ),
        Option(
            "sampler",
            "choice",
            "grid",
            "grid: poll the counter densely only around its expected ticks (a tenth of the polls, "
            "ticks bracketed as tightly); dense: poll it every interval_ms throughout",
            choices=SAMPLERS,
        ),
        Option(
            "channels",
            "list",
            CHANNEL_KINDS,
            "what to record besides the counter: instant, average, samples, state",
        ),
        mode_option("process"),
    )
    AUTO_PRIORITY = 100
    AUTO_SCOPE = Scope.GPU
    PER_PROCESS = True  # under torchrun each rank measures its own GPU
    PROCESS_LABEL = "NVML sampler"
    PROCESS_LOG = "nvml-sampler"
    FAST_POLLING = (
        "polls each GPU's energy counter every ~1 ms (interval_ms) around each of its ticks, ~100 ms "
        "apart, to time them (sampler=dense: all the time); its CPU share is in run.json "
        "(sources[].info.acquisition)"
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        unknown = set(self.options["channels"]) - set(CHANNEL_KINDS)
        if unknown:
            raise OptionError(
                f"option 'channels' of power source {self.name!r} has unknown kind(s) {sorted(unknown)}; "
                f"valid: {', '.join(CHANNEL_KINDS)}"
            )
        self._nvml = None
        self._gpus: list[GPU] = []
        self._driver: str | None = None
        self._bits: dict[str, int] | None = None

    @classmethod
    def detect(cls) -> Detection:
        try:
            nvml = load_pynvml()
        except PowerSourceError as e:
            return Detection(False, str(e))
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            return Detection(False, nvml_error_message(nvml, e, "start"))
        try:
            count = nvml.nvmlDeviceGetCount()
            names = sorted(
                {text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)}
            )
        except nvml.NVMLError as e:
            return Detection(False, nvml_error_message(nvml, e, "list the GPUs"))
        finally:
            nvml.nvmlShutdown()
        if count == 0:
            return Detection(False, "NVML sees no GPU")
        return Detection(True, f"{count} GPU(s): {', '.join(names)}")

    # -- acquisition (in the sampler process by default) -------------------------------------
    def prepare(self) -> Mapping[str, Any]:
        devices = self.context.devices
        return {
            "cuda_visible": cuda_visible_devices(),
            # the rank's GPU, unless the user chose GPUs
            "devices": list(devices) if devices and not self.options["gpus"] else None,
            "local_rank": self.context.local_rank,
        }

    def open(self) -> Sequence[Channel]:
        nvml = load_pynvml()
        kinds = list(self.options["channels"])
        requested = list(self.options["gpus"]) if self.options["gpus"] else None
        cuda_visible = self.prepared.get("cuda_visible")
        devices = self.prepared.get("devices")
        notes: list[str] = []
        if devices:
            requested, notes = rank_gpus(devices, cuda_visible)
        with nvml_errors(nvml, "start"):
            nvml.nvmlInit()
            self._nvml = nvml
            self._gpus, found = select_gpus(nvml, requested, cuda_visible)
            notes += found
            if devices:
                for gpu in self._gpus:
                    gpu.selected_as = f"the rank's GPU (LOCAL_RANK {self.prepared.get('local_rank', 0)})"
                notes += _order_note(nvml, devices, requested or [])
            for gpu in self._gpus:
                notes += probe(gpu)
            self._driver = text(nvml.nvmlSystemGetDriverVersion())
        for note in notes:
            self.warn(note)
        return [c for gpu in self._gpus for c in gpu_channels(gpu, kinds)]

    def tasks(self) -> Sequence[Poller]:
        kinds = list(self.options["channels"])
        interval_s = self.options["interval_ms"] / 1e3
        # the field query reads first and then at times blocks for 10-30 ms (under load, on an
        # H100): stamped at its start, a tick's stamp stays within ~3 ms of the counter's regular
        # update grid (p99); at the call's middle 8 ms late (benchmarks/tick_stamps.py)
        pollers = []
        for gpu in self._gpus:
            poll = FieldPoller(gpu, kinds)
            schedule = None
            if self.options["sampler"] == "grid" and poll.counter is not None:
                schedule = TickSchedule(poll.counter, interval_s)
            pollers.append(
                Poller(poll, interval_s, name=f"nvml-gpu{gpu.index}", reads_at=0.0, schedule=schedule)
            )
        pollers.append(Poller(SlowPoller(self._gpus, kinds, self.warn), STATE_INTERVAL_S, name="nvml-slow"))
        return pollers

    def dedup(self, channel: Channel) -> Dedup:
        # the counter's ticks, and power fields that update every ~100 ms, read with the counter
        # (every ~1 ms around each of its ticks, or throughout with sampler=dense)
        return Dedup.TICKS if channel.quantity == Quantity.ENERGY else Dedup.CHANGES

    def close(self) -> None:
        nvml, self._nvml = self._nvml, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception:  # shutting down a lost GPU's library must not hide the first error
                pass

    def describe(self) -> Mapping[str, Any]:
        if not self._gpus:
            return {}
        return {
            "driver_version": self._driver,
            "nvml_bindings": bindings_version(),
            "poll_interval_s": self.options["interval_ms"] / 1e3,
            "sampler": self.options["sampler"],
            "gpus": [g.public() for g in self._gpus],
            "clock_event_bits": clock_event_bits(self._gpus[0].nvml),
        }

    # -- per-window annotations (in the measured process) -----------------------------------------
    def annotate(self, channel, start_s, end_s, series) -> WindowAnnotation:
        gpu = channel.name.split(".")[0]
        columns = _state_columns(gpu, start_s, end_s, series)
        flags: list[str] = []
        events = series.get(f"{gpu}.clock_events")
        if events is not None:
            bits = _any_event_bits(events.between(start_s, end_s))
            if bits is not None:
                columns["clock_event_reasons"] = f"0x{bits:x}"
                flags = self._throttling(bits)
        return WindowAnnotation(columns, tuple(flags))

    def _throttling(self, bits: int) -> list[str]:
        """``throttled:<reason>`` for each reason set in ``bits`` that slows the GPU down."""
        if self._bits is None:
            self._bits = dict(self.info().get("clock_event_bits", {}))
        active = [name for name, bit in self._bits.items() if bits & bit]
        return [f"throttled:{name}" for name in active if name in THROTTLING]


def _state_columns(gpu: str, start_s: float, end_s: float, series) -> dict[str, Any]:
    """A window's mean SM and memory clocks and its highest temperature, from the readings
    inside it (a column only where there is one)."""
    import numpy as np  # here, in the measured process: the sampler process starts without it

    columns: dict[str, Any] = {}
    for suffix, column, how in (
        ("sm_clock", "sm_clock_mhz", np.mean),
        ("mem_clock", "mem_clock_mhz", np.mean),
        ("temperature", "temperature_c", np.max),
    ):
        s = series.get(f"{gpu}.{suffix}")
        if s is not None:
            inside = s.between(start_s, end_s)
            if len(inside):
                columns[column] = float(how(inside.values))
    return columns


def _any_event_bits(inside) -> int | None:
    """Every clock-event reason seen during a window: the OR of its readings (``None``: it has
    none)."""
    if not len(inside):
        return None
    bits = 0
    for value in inside.values:
        bits |= int(value)
    return bits


def _order_note(nvml, devices: Sequence[str], chosen: Sequence[str]) -> list[str]:
    """A rank's GPU found by index is right when CUDA and NVML count GPUs in one order: always
    with CUDA_DEVICE_ORDER=PCI_BUS_ID, and in practice when the GPUs are all of one model (CUDA's
    default puts the fastest first). Say so only when neither holds."""
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return []
    if not any(d.startswith("cuda:") for d in devices) or not any(c.isdigit() for c in chosen):
        return []
    count = nvml.nvmlDeviceGetCount()
    models = {text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)}
    if len(models) < 2:
        return []
    return [
        f"this machine has GPUs of {len(models)} models ({', '.join(sorted(models))}): the rank's GPU was "
        "taken in PCI order (NVML's); set CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA counts them the same way"
    ]
