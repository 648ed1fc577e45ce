"""NVML device access: NVIDIA's bindings, one error map, and the GPUs with what they support.

Every NVML call goes through ``nvml_errors``, which turns an ``NVMLError`` into a
``PowerSourceError`` that says what to do. Constants (field ids, value types, error codes) are
pynvml's own; tests replace the module with a fake that exports the same names.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ...errors import PowerSourceError

#: pynvml's value-type constants and the member of the value union each one fills
VALUE_MEMBERS = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
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


def bindings_version() -> str | None:
    try:
        return md.version("nvidia-ml-py")
    except md.PackageNotFoundError:
        return None


def nvml_error_message(nvml, error: Exception, what: str) -> str:
    """The one mapping from NVML errors to messages that say what to do."""
    hints = {
        nvml.NVML_ERROR_LIBRARY_NOT_FOUND: "the NVIDIA driver is not installed here (libnvidia-ml.so.1 not found)",
        nvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded (no GPU, or the kernel module is missing)",
        nvml.NVML_ERROR_NO_PERMISSION: "no permission; in a container, expose the GPU with the 'utility' driver capability",
        nvml.NVML_ERROR_GPU_IS_LOST: "the GPU is lost (fell off the bus or was reset); energy after this point is unknown",
        nvml.NVML_ERROR_NOT_SUPPORTED: "not supported by this GPU or driver",
        nvml.NVML_ERROR_UNINITIALIZED: "NVML was shut down underneath the sampler",
    }
    hint = hints.get(getattr(error, "value", None), str(error))
    return f"NVML could not {what}: {hint}"


@contextlib.contextmanager
def nvml_errors(nvml, what: str) -> Iterator[None]:
    """Turn an NVML error raised inside into a ``PowerSourceError`` ("NVML could not <what>: ...")."""
    try:
        yield
    except nvml.NVMLError as e:
        raise PowerSourceError(nvml_error_message(nvml, e, what)) from e


def text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class GPU:
    """One GPU: what it is, what it supports, and its readings (Units: J, W, MHz, C, s)."""

    nvml: Any = field(repr=False)
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
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("handle", "nvml")}

    def _reading(self):
        return nvml_errors(self.nvml, f"read GPU {self.index}")

    def field_values(self, ids: Sequence[int]) -> list[float]:
        """``nvmlDeviceGetFieldValues`` in the fields' native units (mJ, mW)."""
        nvml = self.nvml
        with self._reading():
            values = nvml.nvmlDeviceGetFieldValues(self.handle, list(ids))
            for v in values:
                if v.nvmlReturn != nvml.NVML_SUCCESS:
                    raise nvml.NVMLError(v.nvmlReturn)
            return [field_value(nvml, v) for v in values]

    def power_usage_w(self) -> float:
        with self._reading():
            return self.nvml.nvmlDeviceGetPowerUsage(self.handle) * 1e-3

    def state(self) -> tuple[float, float, float, int]:
        """SM clock (MHz), memory clock (MHz), temperature (C) and clock-event reason bits."""
        nvml, h = self.nvml, self.handle
        with self._reading():
            reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            if reasons is None:  # bindings older than the rename
                reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
            return (
                float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
                float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
                int(reasons(h)),
            )

    def power_samples(self, after_us: int) -> list[tuple[int, float]]:
        """The driver's power-sample buffer newer than ``after_us``: (µs since the epoch, W)."""
        nvml = self.nvml
        with self._reading():
            try:
                _kind, samples = nvml.nvmlDeviceGetSamples(
                    self.handle, nvml.NVML_TOTAL_POWER_SAMPLES, after_us
                )
            except nvml.NVMLError as e:
                if getattr(e, "value", None) == nvml.NVML_ERROR_NOT_FOUND:
                    return []  # nothing newer than last time
                raise
        return [(s.timeStamp, s.sampleValue.uiVal * 1e-3) for s in samples if s.timeStamp > after_us]


_MEMBERS: dict[int, dict[int, str]] = {}


def field_value(nvml, v) -> float:
    """A field value as a float, read from the union member its value type names."""
    members = _MEMBERS.get(id(nvml))
    if members is None:
        members = {getattr(nvml, k): m for k, m in VALUE_MEMBERS.items() if hasattr(nvml, k)}
        _MEMBERS[id(nvml)] = members
    member = members.get(v.valueType)
    if member is None:
        raise PowerSourceError(f"NVML returned field {v.fieldId} with value type {v.valueType}, unknown here")
    return float(getattr(v.value, member))


# -- choosing and probing GPUs (called inside nvml_errors(nvml, "start")) ------------------------


def _matches(uuid: str, wanted: str) -> bool:
    return uuid == wanted or (len(wanted) >= 8 and uuid.startswith(wanted))


#: where the list of GPUs came from, as the notes and errors name it
_FROM_OPTION, _FROM_CUDA, _ALL = "option gpus", "CUDA_VISIBLE_DEVICES", "all GPUs"


def select_gpus(nvml, requested: Sequence[str] | None, cuda_visible: str | None) -> tuple[list[GPU], list[str]]:
    """The GPUs to measure: ``requested`` (NVML indices or UUIDs) or, by default, the GPUs CUDA
    sees (``CUDA_VISIBLE_DEVICES`` mapped to NVML by UUID), or all of them. Returns the GPUs and
    notes for the user."""
    count = nvml.nvmlDeviceGetCount()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
    wanted, origin, notes = _wanted(requested, cuda_visible, count)
    chosen: list[GPU] = []
    for w in wanted:
        index = _index_of(nvml, w, uuids, origin, notes)
        if index is None:
            break  # CUDA stops at the first invalid entry too
        if any(g.index == index for g in chosen):
            continue
        handle = handles[index]
        name = text(nvml.nvmlDeviceGetName(handle))
        chosen.append(GPU(nvml, index, uuids[index], name, selected_as=origin, handle=handle))
    if not chosen:
        raise PowerSourceError(f"no GPU to measure ({origin}: {wanted})")
    return chosen, notes


def _wanted(requested: Sequence[str] | None, cuda_visible: str | None, count: int) -> tuple[list[str], str, list[str]]:
    """The GPUs asked for as written, where the list came from, and notes for the user: the
    ``gpus`` option, else ``CUDA_VISIBLE_DEVICES``, else every GPU.

    Raises:
        PowerSourceError: ``CUDA_VISIBLE_DEVICES`` is set but empty (CUDA sees no GPU).
    """
    if requested:
        return list(requested), _FROM_OPTION, []
    if cuda_visible is None:
        return [str(i) for i in range(count)], _ALL, []
    wanted = [w.strip() for w in cuda_visible.split(",")]
    if wanted == [""]:
        raise PowerSourceError(
            "CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU; choose GPUs with nvml:gpus=0,1"
        )
    notes = []
    if any(w.isdigit() for w in wanted) and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        notes.append(
            "CUDA_VISIBLE_DEVICES indices were taken in PCI order (NVML's); set "
            "CUDA_DEVICE_ORDER=PCI_BUS_ID or give UUIDs to be sure they match CUDA's"
        )
    return wanted, _FROM_CUDA, notes


def _index_of(nvml, wanted: str, uuids: list[str], origin: str, notes: list[str]) -> int | None:
    """The NVML index of the GPU ``wanted`` names: an index, a MIG instance's UUID (its GPU's,
    said in ``notes``), a UUID or a prefix of one. ``None`` for an entry of
    ``CUDA_VISIBLE_DEVICES`` that names no GPU (CUDA ignores it and every entry after it).

    Raises:
        PowerSourceError: the ``gpus`` option names no GPU here, or a MIG instance's GPU is not
            found.
    """
    if wanted.isdigit():
        index = int(wanted)
        if index < len(uuids):
            return index
        if origin == _FROM_CUDA:
            return None
        raise PowerSourceError(f"no GPU with index {index}: NVML sees {len(uuids)} GPU(s) (0..{len(uuids) - 1})")
    if wanted.startswith("MIG-"):
        index = _mig_parent(nvml, wanted, uuids)
        notes.append(f"{wanted} is a MIG instance: energy and power are for the whole GPU {index}")
        return index
    found = [i for i, u in enumerate(uuids) if _matches(u, wanted)]
    if len(found) == 1:
        return found[0]
    if origin == _FROM_CUDA:
        return None
    raise PowerSourceError(f"no GPU with UUID {wanted!r}; GPUs here: {', '.join(uuids)}")


def _mig_parent(nvml, mig_uuid: str, uuids: list[str]) -> int:
    try:
        mig = nvml.nvmlDeviceGetHandleByUUID(mig_uuid)
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        return uuids.index(text(nvml.nvmlDeviceGetUUID(parent)))
    except Exception as e:
        raise PowerSourceError(f"cannot find the GPU of MIG instance {mig_uuid}: {e}") from e


def probe(gpu: GPU) -> list[str]:
    """Find out which readings ``gpu`` supports; returns warnings."""
    nvml, handle = gpu.nvml, gpu.handle
    warnings = []
    values = nvml.nvmlDeviceGetFieldValues(
        handle,
        [
            nvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
            nvml.NVML_FI_DEV_POWER_INSTANT,
            nvml.NVML_FI_DEV_POWER_AVERAGE,
        ],
    )
    gpu.has_counter, gpu.has_instant, gpu.has_average = (v.nvmlReturn == nvml.NVML_SUCCESS for v in values)
    if not gpu.has_counter:
        warnings.append(
            f"GPU {gpu.index} ({gpu.name}) has no energy counter (before Volta): its energy integrates "
            "instant power instead, which is less accurate for short windows"
        )
    try:
        nvml.nvmlDeviceGetSamples(handle, nvml.NVML_TOTAL_POWER_SAMPLES, 0)
    except nvml.NVMLError as e:
        gpu.has_samples = getattr(e, "value", None) == nvml.NVML_ERROR_NOT_FOUND  # supported, just empty
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        gpu.mig_enabled = bool(current)
    except nvml.NVMLError:
        gpu.mig_enabled = False
    if gpu.mig_enabled:
        warnings.append(
            f"GPU {gpu.index} is in MIG mode: power and energy are for the whole board and cannot be "
            "split between MIG instances"
        )
    try:
        gpu.power_limit_w = nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1e3
    except nvml.NVMLError:
        gpu.power_limit_w = None
    return warnings
