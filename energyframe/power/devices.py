"""Which GPU a rank measures: the devices a launcher gave the process (``SourceContext.devices``)
as the identifiers NVML and nvidia-smi take (UUIDs, or indices in their PCI order)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..errors import PowerSourceError


def cuda_visible_devices() -> str | None:
    """``CUDA_VISIBLE_DEVICES`` as UUIDs when torch has already initialised CUDA in this process
    (exact), else as set in the environment (indices are then read in PCI order)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    torch = sys.modules.get("torch")
    if torch is not None and value is not None:
        try:
            if torch.cuda.is_initialized():
                uuids = []
                for i in range(torch.cuda.device_count()):
                    uuids.append("GPU-" + str(torch.cuda.get_device_properties(i).uuid))
                return ",".join(uuids)
        except Exception:  # older torch without .uuid: fall back to the variable
            pass
    return value


def rank_gpus(devices: Sequence[str], cuda_visible: str | None) -> tuple[list[str], list[str]]:
    """The GPUs ``devices`` name, as UUIDs or NVML indices, and notes for the user.

    A ``cuda:N`` ordinal is the N-th GPU ``CUDA_VISIBLE_DEVICES`` shows (all GPUs, in NVML's
    order, when it is unset); a launcher that shows each process one GPU (Slurm's
    ``--gpus-per-task=1``) makes that one the rank's GPU whatever its LOCAL_RANK. UUIDs pass
    through.

    Raises:
        PowerSourceError: the ordinal names no GPU this process can see.
    """
    visible = [v.strip() for v in cuda_visible.split(",")] if cuda_visible is not None else None
    if visible == [""]:
        raise PowerSourceError("CUDA_VISIBLE_DEVICES is empty: this rank sees no GPU; choose one with gpus=")
    out: list[str] = []
    notes: list[str] = []
    for device in devices:
        if not device.startswith("cuda:"):
            out.append(device)
            continue
        try:
            n = int(device.split(":", 1)[1])
        except ValueError:
            raise PowerSourceError(f"device {device!r} is not cuda:N") from None
        if visible is None:
            out.append(str(n))
        elif n < len(visible):
            out.append(visible[n])
        elif len(visible) == 1:
            out.append(visible[0])
            notes.append(
                f"LOCAL_RANK {n} sees one GPU (CUDA_VISIBLE_DEVICES={cuda_visible}): measuring that one"
            )
        else:
            raise PowerSourceError(
                f"LOCAL_RANK {n} has no GPU: CUDA_VISIBLE_DEVICES shows {len(visible)} ({cuda_visible}); "
                "start one rank per visible GPU, or choose the GPU with gpus="
            )
    return out, notes
