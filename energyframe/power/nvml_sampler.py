"""Polls NVML for every selected GPU and emits samples.

``NVMLPowerSource`` runs this in a process of its own by default
(``python -m energyframe.power.nvml_sampler CONFIG OUTFILE``), so that polling never competes
with the measured program for its interpreter: one read of the energy counter blocks ~3 ms in
the driver on an H200. The process writes a line protocol to OUTFILE:

    C,<json: channels and info>     once, when the GPUs are open
    S,<channel index>,<time>,<value>  a sample
    W,<message>                     a warning
    E,<message>                     a fatal error; the process exits 1
    Q                               a clean stop

Per GPU, one thread polls the total-energy counter (field 83) together with instant (186) and
1-s average (185) power, and records each value *change*: a counter tick is stamped at the
midpoint between the last poll that saw the old value and the first that saw the new one.
A second thread reads the driver's 20-ms power-sample buffer with the last-seen timestamp (so
nothing is lost between reads) and the clocks, temperature and clock-event reasons.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import PowerSourceError
from ..interfaces import Channel, ClockBase, Quantity, Sample, Scope

FIELD_TOTAL_ENERGY = 83  # mJ since the driver loaded
FIELD_POWER_AVERAGE = 185  # mW, averaged over the last second on Ampere and newer
FIELD_POWER_INSTANT = 186  # mW, updated every ~100 ms

#: update periods measured on H100/H200 (benchmarks/sensor_probe.py)
COUNTER_PERIOD_S = 0.1
INSTANT_PERIOD_S = 0.1
SAMPLE_BUFFER_PERIOD_S = 0.02
STATE_INTERVAL_S = 0.05
#: the buffer holds ~2.4 s; reading every 0.5 s keeps a wide margin
BUFFER_INTERVAL_S = 0.5

CHANNEL_KINDS = ("energy", "instant", "average", "samples", "state")

#: clock-event ("throttle") reason bits of nvml.h, and which of them slow the GPU down
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLING = {
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
}


def load_pynvml():
    """Import NVIDIA's bindings (package nvidia-ml-py, module pynvml); refuse the old shim."""
    try:
        md.version("pynvml")
    except md.PackageNotFoundError:
        pass
    else:
        raise PowerSourceError(
            f"the deprecated 'pynvml' package ({md.version('pynvml')}) is installed and shadows "
            "NVIDIA's bindings; run: pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py"
        )
    try:
        import pynvml
    except ImportError as e:
        raise PowerSourceError("NVIDIA's NVML bindings are not installed: pip install nvidia-ml-py") from e
    if not hasattr(pynvml, "nvmlDeviceGetFieldValues"):
        raise PowerSourceError(
            f"the pynvml module at {getattr(pynvml, '__file__', '?')} is not nvidia-ml-py's; "
            "run: pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py"
        )
    return pynvml


def nvml_error_message(nvml, error: Exception, what: str) -> str:
    """The one mapping from NVML errors to messages that say what to do."""
    code = getattr(error, "value", None)
    hints = {
        nvml.NVML_ERROR_LIBRARY_NOT_FOUND: "the NVIDIA driver is not installed here (libnvidia-ml.so.1 not found)",
        nvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded (no GPU, or the kernel module is missing)",
        nvml.NVML_ERROR_NO_PERMISSION: "no permission; in a container, expose the GPU with the 'utility' driver capability",
        nvml.NVML_ERROR_GPU_IS_LOST: "the GPU is lost (fell off the bus or was reset); energy after this point is unknown",
        nvml.NVML_ERROR_NOT_SUPPORTED: "not supported by this GPU or driver",
        nvml.NVML_ERROR_UNINITIALIZED: "NVML was shut down underneath the sampler",
    }
    hint = hints.get(code, str(error))
    return f"NVML could not {what}: {hint}"


def _field_value(v) -> float:
    kind = v.valueType
    union = v.value
    return float(
        {
            0: union.dVal,
            1: union.uiVal,
            2: union.ulVal,
            3: union.ullVal,
            4: union.sllVal,
            5: union.siVal,
            6: union.usVal,
        }[kind]
    )


@dataclass
class GPUInfo:
    """What the sampler found out about one GPU."""

    index: int
    uuid: str
    name: str
    has_counter: bool = True
    has_instant: bool = True
    has_average: bool = True
    has_samples: bool = True
    mig_enabled: bool = False
    power_limit_w: float | None = None
    selected_as: str = ""
    handle: Any = field(default=None, repr=False)

    def public(self) -> dict:
        # not asdict(): it deep-copies the handle, a ctypes pointer, which cannot be copied
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "handle"}


def _matches(uuid: str, wanted: str) -> bool:
    return uuid == wanted or (len(wanted) >= 8 and uuid.startswith(wanted))


def select_gpus(
    nvml, requested: Sequence[str] | None, cuda_visible: str | None
) -> tuple[list[GPUInfo], list[str]]:
    """The GPUs to measure: ``requested`` (NVML indices or UUIDs) or, by default, the GPUs CUDA
    sees (``CUDA_VISIBLE_DEVICES`` mapped to NVML by UUID), or all of them."""
    notes: list[str] = []
    count = nvml.nvmlDeviceGetCount()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
    if requested:
        wanted, origin = list(requested), "option gpus"
    elif cuda_visible is not None:
        wanted, origin = [w.strip() for w in cuda_visible.split(",")], "CUDA_VISIBLE_DEVICES"
        if wanted == [""]:
            raise PowerSourceError(
                "CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU; choose GPUs with nvml:gpus=0,1"
            )
        if any(w.isdigit() for w in wanted) and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            notes.append(
                "CUDA_VISIBLE_DEVICES indices were taken in PCI order (NVML's); set "
                "CUDA_DEVICE_ORDER=PCI_BUS_ID or give UUIDs to be sure they match CUDA's"
            )
    else:
        wanted, origin = [str(i) for i in range(count)], "all GPUs"
    chosen: list[GPUInfo] = []
    for w in wanted:
        if w.isdigit():
            index = int(w)
            if index >= count:
                if origin == "CUDA_VISIBLE_DEVICES":
                    break  # CUDA stops at the first invalid entry too
                raise PowerSourceError(
                    f"no GPU with index {index}: NVML sees {count} GPU(s) (0..{count - 1})"
                )
        elif w.startswith("MIG-"):
            index = _mig_parent(nvml, w, uuids)
            notes.append(f"{w} is a MIG instance: energy and power are for the whole GPU {index}")
        else:
            found = [i for i, u in enumerate(uuids) if _matches(u, w)]
            if len(found) != 1:
                if origin == "CUDA_VISIBLE_DEVICES":
                    break
                raise PowerSourceError(f"no GPU with UUID {w!r}; GPUs here: {', '.join(uuids)}")
            index = found[0]
        if any(g.index == index for g in chosen):
            continue
        handle = handles[index]
        chosen.append(
            GPUInfo(
                index, uuids[index], _text(nvml.nvmlDeviceGetName(handle)), selected_as=origin, handle=handle
            )
        )
    if not chosen:
        raise PowerSourceError(f"no GPU to measure ({origin}: {wanted})")
    return chosen, notes


def _mig_parent(nvml, mig_uuid: str, uuids: list[str]) -> int:
    try:
        mig = nvml.nvmlDeviceGetHandleByUUID(mig_uuid)
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        return uuids.index(_text(nvml.nvmlDeviceGetUUID(parent)))
    except Exception as e:
        raise PowerSourceError(f"cannot find the GPU of MIG instance {mig_uuid}: {e}") from e


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_gpu(nvml, gpu: GPUInfo) -> list[str]:
    """Find out which readings this GPU supports; returns warnings."""
    warnings = []
    values = nvml.nvmlDeviceGetFieldValues(
        gpu.handle, [FIELD_TOTAL_ENERGY, FIELD_POWER_INSTANT, FIELD_POWER_AVERAGE]
    )
    gpu.has_counter = values[0].nvmlReturn == nvml.NVML_SUCCESS
    gpu.has_instant = values[1].nvmlReturn == nvml.NVML_SUCCESS
    gpu.has_average = values[2].nvmlReturn == nvml.NVML_SUCCESS
    if not gpu.has_counter:
        warnings.append(
            f"GPU {gpu.index} ({gpu.name}) has no energy counter (before Volta): its energy integrates "
            "instant power instead, which is less accurate for short windows"
        )
    try:
        nvml.nvmlDeviceGetSamples(gpu.handle, nvml.NVML_TOTAL_POWER_SAMPLES, 0)
    except nvml.NVMLError as e:
        gpu.has_samples = getattr(e, "value", None) == nvml.NVML_ERROR_NOT_FOUND  # supported, just empty
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(gpu.handle)
        gpu.mig_enabled = bool(current)
    except nvml.NVMLError:
        gpu.mig_enabled = False
    if gpu.mig_enabled:
        warnings.append(
            f"GPU {gpu.index} is in MIG mode: power and energy are for the whole board and cannot be "
            "split between MIG instances"
        )
    try:
        gpu.power_limit_w = nvml.nvmlDeviceGetPowerManagementLimit(gpu.handle) / 1e3
    except nvml.NVMLError:
        gpu.power_limit_w = None
    return warnings


def gpu_channels(gpu: GPUInfo, kinds: Sequence[str]) -> list[Channel]:
    base = f"gpu{gpu.index}"
    mono, wall = ClockBase.MONOTONIC, ClockBase.WALL
    out = []
    if gpu.has_counter:
        out.append(
            Channel(
                base,
                Quantity.ENERGY,
                Scope.GPU,
                COUNTER_PERIOD_S,
                mono,
                description="NVML total energy counter (field 83), interpolated between its ticks",
            )
        )
    else:
        out.append(
            Channel(
                base,
                Quantity.POWER,
                Scope.GPU,
                INSTANT_PERIOD_S,
                mono,
                description="NVML power (no energy counter on this GPU)",
            )
        )
    if "instant" in kinds and gpu.has_instant and gpu.has_counter:  # without a counter it is the base channel
        out.append(
            Channel(
                f"{base}.power_instant",
                Quantity.POWER,
                Scope.GPU,
                INSTANT_PERIOD_S,
                mono,
                primary=False,
                description="NVML instant power (field 186), changes every ~100 ms",
            )
        )
    if "average" in kinds and gpu.has_average:
        out.append(
            Channel(
                f"{base}.power_average",
                Quantity.POWER,
                Scope.GPU,
                INSTANT_PERIOD_S,
                mono,
                primary=False,
                description="NVML 1-s average power (field 185): lags a change of load by ~0.5 s",
            )
        )
    if "samples" in kinds and gpu.has_samples:
        out.append(
            Channel(
                f"{base}.power_samples",
                Quantity.POWER,
                Scope.GPU,
                SAMPLE_BUFFER_PERIOD_S,
                wall,
                primary=False,
                description="driver power-sample buffer (nvmlDeviceGetSamples), ~20 ms apart",
            )
        )
    if "state" in kinds:
        for suffix, unit, text in (
            ("sm_clock", "MHz", "SM clock"),
            ("mem_clock", "MHz", "memory clock"),
            ("temperature", "C", "GPU temperature"),
            ("clock_events", "bits", "clock-event (throttle) reasons, nvml.h bit mask"),
        ):
            out.append(
                Channel(
                    f"{base}.{suffix}",
                    Quantity.STATE,
                    Scope.GPU,
                    STATE_INTERVAL_S,
                    mono,
                    unit=unit,
                    primary=False,
                    description=text,
                )
            )
    return out


class Sampler:
    """Polling threads for the selected GPUs.

    Args:
        nvml: the pynvml module (or a fake of it in tests).
        requested: NVML indices or UUIDs; ``None`` for the default selection.
        kinds: which of ``CHANNEL_KINDS`` to record (the energy counter always is).
        interval_s: pause between two polls of the counter. Units: s.
        emit: receives batches of samples, from the polling threads.
        warn: receives warnings.
    """

    def __init__(
        self,
        nvml,
        requested: Sequence[str] | None,
        kinds: Sequence[str],
        interval_s: float,
        emit: Callable[[list[Sample]], None],
        warn: Callable[[str], None],
        cuda_visible: str | None = None,
    ) -> None:
        self.nvml = nvml
        self.requested = requested
        self.kinds = tuple(kinds)
        self.interval_s = interval_s
        self.emit = emit
        self.warn = warn
        self.cuda_visible = cuda_visible
        self.gpus: list[GPUInfo] = []
        self.error: str | None = None
        self.stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._initialised = False

    def open(self) -> tuple[list[Channel], dict]:
        """Initialise NVML, choose and probe the GPUs; returns the channels and run.json info."""
        nvml = self.nvml
        try:
            nvml.nvmlInit()
            self._initialised = True
            self.gpus, notes = select_gpus(nvml, self.requested, self.cuda_visible)
            for note in notes:
                self.warn(note)
            for gpu in self.gpus:
                for warning in probe_gpu(nvml, gpu):
                    self.warn(warning)
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as e:
            self.close()
            raise PowerSourceError(nvml_error_message(nvml, e, "start")) from e
        except PowerSourceError:
            self.close()
            raise
        channels = [c for gpu in self.gpus for c in gpu_channels(gpu, self.kinds)]
        info = {
            "driver_version": driver,
            "nvml_bindings": _bindings_version(),
            "poll_interval_s": self.interval_s,
            "gpus": [g.public() for g in self.gpus],
        }
        return channels, info

    def start(self) -> None:
        for gpu in self.gpus:
            self._threads.append(
                threading.Thread(
                    target=self._guard,
                    args=(self._poll_fields, gpu),
                    name=f"nvml-gpu{gpu.index}",
                    daemon=True,
                )
            )
        self._threads.append(
            threading.Thread(target=self._guard, args=(self._poll_slow, None), name="nvml-slow", daemon=True)
        )
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self.stopped.set()
        for t in self._threads:
            t.join()
        self.close()

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # shutting down a lost GPU's library must not hide the first error
                pass

    def _guard(self, target, gpu) -> None:
        try:
            target(gpu)
        except PowerSourceError as e:
            self._fail(str(e))
        except self.nvml.NVMLError as e:
            where = f"read GPU {gpu.index}" if gpu is not None else "read the GPUs"
            self._fail(nvml_error_message(self.nvml, e, where))
        except Exception as e:  # a bug must stop the run visibly, not silently stop sampling
            self._fail(f"the NVML sampler failed: {e!r}")

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message
        self.stopped.set()

    def _poll_fields(self, gpu: GPUInfo) -> None:
        nvml = self.nvml
        base = f"gpu{gpu.index}"
        fields: list[tuple[int, str, float]] = []  # (field id, channel, scale to SI)
        if gpu.has_counter:
            fields.append((FIELD_TOTAL_ENERGY, base, 1e-3))
        if gpu.has_instant and ("instant" in self.kinds or not gpu.has_counter):
            fields.append((FIELD_POWER_INSTANT, f"{base}.power_instant" if gpu.has_counter else base, 1e-3))
        if gpu.has_average and "average" in self.kinds:
            fields.append((FIELD_POWER_AVERAGE, f"{base}.power_average", 1e-3))
        use_power_usage = not gpu.has_counter and not gpu.has_instant
        ids = [f[0] for f in fields]
        last: dict[str, tuple[float, float]] = {}  # channel -> (value, time recorded)
        prev_mid: float | None = None
        while not self.stopped.is_set():
            m0 = time.monotonic()
            if ids:
                values = nvml.nvmlDeviceGetFieldValues(gpu.handle, ids)
            if use_power_usage:
                usage = nvml.nvmlDeviceGetPowerUsage(gpu.handle)
            m1 = time.monotonic()
            mid = (m0 + m1) / 2
            batch = []
            readings = []
            if ids:
                for (fid, channel, scale), v in zip(fields, values):
                    if v.nvmlReturn != nvml.NVML_SUCCESS:
                        raise nvml.NVMLError(v.nvmlReturn)
                    readings.append((fid, channel, _field_value(v) * scale))
            if use_power_usage:
                readings.append((0, base, usage * 1e-3))
            for fid, channel, value in readings:
                previous = last.get(channel)
                if previous is None:
                    last[channel] = (value, mid)
                    if fid != FIELD_TOTAL_ENERGY:  # a counter's first value is not a tick
                        batch.append(Sample(channel, mid, value))
                    continue
                if value != previous[0]:
                    if fid == FIELD_TOTAL_ENERGY and value < previous[0]:
                        raise PowerSourceError(
                            f"the energy counter of GPU {gpu.index} went down from {previous[0]:.3f} J to "
                            f"{value:.3f} J: the driver was reloaded or the GPU reset, and the energy across "
                            "it is unknown"
                        )
                    # the change happened between the previous poll and this one
                    t = (prev_mid + mid) / 2 if prev_mid is not None else mid
                    batch.append(Sample(channel, t, value))
                    last[channel] = (value, t)
                elif fid != FIELD_TOTAL_ENERGY and mid - previous[1] >= INSTANT_PERIOD_S:
                    batch.append(Sample(channel, mid, value))  # unchanged: say so, or it looks like a gap
                    last[channel] = (value, mid)
            prev_mid = mid
            if batch:
                self.emit(batch)
            if self.interval_s > 0:
                self.stopped.wait(self.interval_s)

    def _poll_slow(self, _unused) -> None:
        nvml = self.nvml
        last_seen = {gpu.index: 0 for gpu in self.gpus}
        next_buffer = 0.0
        warned_loss: set[int] = set()
        while not self.stopped.is_set():
            now = time.monotonic()
            batch = []
            if "state" in self.kinds:
                for gpu in self.gpus:
                    base = f"gpu{gpu.index}"
                    sm = nvml.nvmlDeviceGetClockInfo(gpu.handle, nvml.NVML_CLOCK_SM)
                    mem = nvml.nvmlDeviceGetClockInfo(gpu.handle, nvml.NVML_CLOCK_MEM)
                    temp = nvml.nvmlDeviceGetTemperature(gpu.handle, nvml.NVML_TEMPERATURE_GPU)
                    reasons = nvml.nvmlDeviceGetCurrentClocksEventReasons(gpu.handle)
                    t = time.monotonic()
                    batch += [
                        Sample(f"{base}.sm_clock", t, float(sm)),
                        Sample(f"{base}.mem_clock", t, float(mem)),
                        Sample(f"{base}.temperature", t, float(temp)),
                        Sample(f"{base}.clock_events", t, float(reasons)),
                    ]
            if "samples" in self.kinds and now >= next_buffer:
                next_buffer = now + BUFFER_INTERVAL_S
                for gpu in self.gpus:
                    if not gpu.has_samples:
                        continue
                    batch += self._read_buffer(gpu, last_seen, warned_loss)
            if batch:
                self.emit(batch)
            self.stopped.wait(STATE_INTERVAL_S)

    def _read_buffer(self, gpu: GPUInfo, last_seen: dict, warned: set) -> list[Sample]:
        nvml = self.nvml
        try:
            _kind, samples = nvml.nvmlDeviceGetSamples(
                gpu.handle, nvml.NVML_TOTAL_POWER_SAMPLES, last_seen[gpu.index]
            )
        except nvml.NVMLError as e:
            if getattr(e, "value", None) == nvml.NVML_ERROR_NOT_FOUND:
                return []  # nothing newer than last time
            raise
        fresh = [s for s in samples if s.timeStamp > last_seen[gpu.index]]
        if not fresh:
            return []
        if (
            last_seen[gpu.index]
            and (fresh[0].timeStamp - last_seen[gpu.index]) > 3 * SAMPLE_BUFFER_PERIOD_S * 1e6
            and gpu.index not in warned
        ):
            warned.add(gpu.index)
            self.warn(f"GPU {gpu.index}: power samples were lost between two reads of the driver's buffer")
        last_seen[gpu.index] = fresh[-1].timeStamp
        channel = f"gpu{gpu.index}.power_samples"
        return [Sample(channel, s.timeStamp * 1e-6, s.sampleValue.uiVal * 1e-3) for s in fresh]


def _bindings_version() -> str | None:
    try:
        return md.version("nvidia-ml-py")
    except md.PackageNotFoundError:
        return None


# -- the sampler process ---------------------------------------------------------------------


@dataclass(frozen=True)
class SamplerConfig:
    requested: list[str] | None
    kinds: list[str]
    interval_s: float
    cuda_visible: str | None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SamplerConfig:
        return cls(**json.loads(text))


class _LineWriter:
    """Buffers protocol lines from the polling threads; the main loop flushes them."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a")
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self.index: dict[str, int] = {}

    def put(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def samples(self, batch: list[Sample]) -> None:
        lines = [f"S,{self.index[s.channel]},{s.time_s!r},{s.value!r}" for s in batch]
        with self._lock:
            self._lines.extend(lines)

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
        if lines:
            self._file.write("\n".join(lines) + "\n")
            self._file.flush()

    def close(self) -> None:
        self.flush()
        self._file.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = SamplerConfig.from_json(argv[0])
    out = _LineWriter(argv[1])
    parent = os.getppid()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when sampling ends

    def warn(message: str) -> None:
        out.put("W," + message.replace("\n", " "))

    try:
        nvml = load_pynvml()
        sampler = Sampler(
            nvml, config.requested, config.kinds, config.interval_s, out.samples, warn, config.cuda_visible
        )
        channels, info = sampler.open()
    except PowerSourceError as e:
        out.put("E," + str(e).replace("\n", " "))
        out.close()
        return 1
    out.index = {c.name: i for i, c in enumerate(channels)}
    out.put("C," + json.dumps({"channels": [c.to_json() for c in channels], "info": info}))
    out.flush()
    sampler.start()
    while not stop.is_set() and not sampler.stopped.is_set():
        stop.wait(0.05)
        out.flush()
        if os.getppid() != parent:  # the parent died: do not sample forever
            break
    sampler.stop()
    if sampler.error:
        out.put("E," + sampler.error.replace("\n", " "))
        out.close()
        return 1
    out.put("Q")
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
