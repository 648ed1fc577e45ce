"""Which GPU measured a sweep (or one shard of it), and whether the GPUs of a merged sweep differ.

The measuring process records its GPU (``describe``): what torch knows (index, name, UUID,
memory, compute capability), what NVML says about its settings where NVML answers (power limit,
maximum and application clocks, driver), and the host. ``merge`` labels each configuration with
its GPU and warns when the GPUs differ in a way that changes latency or energy.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

#: what must be equal for configurations measured on different GPUs to be comparable
COMPARED = (
    ("name", "model"),
    ("memory_bytes", "memory"),
    ("compute_capability", "compute capability"),
    ("power_limit_w", "power limit (W)"),
    ("max_sm_clock_mhz", "maximum SM clock (MHz)"),
    ("max_mem_clock_mhz", "maximum memory clock (MHz)"),
    ("applications_sm_clock_mhz", "application SM clock (MHz)"),
    ("applications_mem_clock_mhz", "application memory clock (MHz)"),
    ("driver_version", "driver"),
)


def describe(device) -> dict[str, Any]:
    """What identifies the CUDA device ``device`` (a torch device) and its settings."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    info: dict[str, Any] = {
        "index": index,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "host": socket.gethostname(),
        "name": props.name,
        "uuid": f"GPU-{uuid}" if uuid is not None else None,
        "memory_bytes": int(props.total_memory),
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": int(props.multi_processor_count),
    }
    if info["uuid"]:
        info.update(nvml_settings(info["uuid"]))
    return info


def nvml_settings(uuid: str) -> dict[str, Any]:
    """The GPU's power limit, clocks and driver from NVML, where NVML answers; else nothing."""
    from ..power.nvml.device import load_pynvml

    try:
        nvml = load_pynvml()
        nvml.nvmlInit()
    except Exception:  # no driver, no bindings: the settings stay unknown
        return {}
    out: dict[str, Any] = {}
    try:
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
        reads = {
            "power_limit_w": lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1e3,
            "max_sm_clock_mhz": lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
            "max_mem_clock_mhz": lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "applications_sm_clock_mhz": lambda: nvml.nvmlDeviceGetApplicationsClock(
                handle, nvml.NVML_CLOCK_SM
            ),
            "applications_mem_clock_mhz": lambda: nvml.nvmlDeviceGetApplicationsClock(
                handle, nvml.NVML_CLOCK_MEM
            ),
            "driver_version": lambda: _text(nvml.nvmlSystemGetDriverVersion()),
        }
        for key, read in reads.items():
            try:
                out[key] = read()
            except Exception:  # not supported on this GPU or by these bindings
                pass
    except Exception:
        pass
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def base_label(info: Mapping[str, Any]) -> str | None:
    """A GPU's short name: its ``CUDA_VISIBLE_DEVICES`` entry when it was the only one, else its
    torch index; ``None`` when nothing was recorded."""
    if not info:
        return None
    if info.get("label"):
        return str(info["label"])
    visible = info.get("cuda_visible_devices")
    if visible and "," not in visible:
        return visible.strip()
    if info.get("index") is not None:
        return str(info["index"])
    return None


def label_devices(
    infos: Sequence[Mapping[str, Any]],
    shards: Sequence[Sequence[int]],
    labels: Sequence[str | None] | None = None,
) -> list[str | None]:
    """One label per part: the given one, else ``base_label``; parts on different GPUs that
    would share a label (GPU 0 of two hosts) are told apart by host, then by shard."""
    names = [_given_or_base(info, labels[i] if labels is not None else None) for i, info in enumerate(infos)]
    identity = [(info.get("host"), info.get("uuid") or info.get("index")) for info in infos]
    out = list(names)
    for i, name in enumerate(names):
        clash = _sharing(i, names, identity)
        if clash:
            hosts = {infos[j].get("host") for j in [i, *clash]}
            out[i] = f"{name}@{infos[i].get('host')}" if len(hosts) > 1 else f"{name} (shard {shards[i][0]})"
    return out


def _given_or_base(info: Mapping[str, Any], given: str | None) -> str | None:
    return given if given is not None else base_label(info)


def _sharing(i: int, names: Sequence[str | None], identity: Sequence[tuple[Any, Any]]) -> list[int]:
    """The parts on another GPU (another host or UUID) that part ``i``'s label would name too
    (none for a part without a label)."""
    if names[i] is None:
        return []
    return [j for j, other in enumerate(names) if other == names[i] and identity[j] != identity[i]]


def differences(devices: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A warning per setting in which the GPUs of a merged sweep differ."""
    if len(devices) < 2:
        return []
    out = []
    for key, what in COMPARED:
        values = {label: info.get(key) for label, info in devices.items() if info.get(key) is not None}
        if len(set(values.values())) > 1:
            listed = ", ".join(f"GPU {label}: {value}" for label, value in values.items())
            out.append(
                f"the GPUs differ in {what} ({listed}): configurations measured on different GPUs "
                "are not comparable"
            )
    return out


def describe_line(label: str, info: Mapping[str, Any]) -> str:
    """``GPU 1: NVIDIA H100 80GB HBM3 (GPU-5f3a...), 700 W limit, host n1``, for reports."""
    parts = [str(info.get("name") or "unknown GPU")]
    if info.get("uuid"):
        parts[0] += f" ({info['uuid']})"
    if info.get("power_limit_w") is not None:
        parts.append(f"{info['power_limit_w']:g} W limit")
    if info.get("applications_sm_clock_mhz") is not None:
        parts.append(
            f"application clocks {info['applications_sm_clock_mhz']}/{info.get('applications_mem_clock_mhz')} MHz"
        )
    if info.get("sm_clock_mhz") is not None:
        parts.append(f"measured SM clock {info['sm_clock_mhz']:.0f} MHz (median)")
    if info.get("host"):
        parts.append(f"host {info['host']}")
    if info.get("shards"):
        parts.append(f"shards {', '.join('/'.join(map(str, s)) for s in info['shards'])}")
    return f"GPU {label}: " + ", ".join(parts)
