"""Runs of one process per rank under ``torchrun``: the process group, this rank's device, and
phases whose step counts every rank agrees on.

Each rank runs its own ``energyframe run`` (or ``energyframe trace``). A phase that runs
collectives must run exactly as many steps on every rank — a rank that ran one all-reduce more
would wait forever for its peers — so such a phase fixes its steps per window, calibrated
together (the slowest rank's time decides), and its sync waits for the device and then for
every rank: a window opens when all ranks are ready and closes when all have finished. The
barrier runs on a host (gloo) group, so it launches no GPU kernel and leaves no collective in a
trace. Nothing here assumes that one rank writes or reports alone.

torch is imported inside the functions: the CLI imports this module to name trace directories.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import WorkloadError

#: steps per window aim this far above the window length (as the orchestrator's calibration)
CALIBRATION_MARGIN = 1.15


@dataclass(frozen=True)
class World:
    """This process's place among the ranks, as ``torchrun`` sets it in the environment."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    #: whether WORLD_SIZE was set at all (a launcher started this process)
    launched: bool = False

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def world() -> World:
    """RANK, LOCAL_RANK and WORLD_SIZE from the environment (a single process without them)."""
    env = os.environ
    try:
        size = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        local = int(env.get("LOCAL_RANK", str(rank)))
    except ValueError as e:
        raise WorkloadError(
            f"RANK, LOCAL_RANK and WORLD_SIZE must be integers (torchrun sets them): {e}"
        ) from e
    return World(rank, local, size, "WORLD_SIZE" in env)


def rank_dir_name(rank: int) -> str:
    """The sub-directory one rank writes its trace (or run) into."""
    return f"rank{rank}"


def rank_device(spec: str, w: World):
    """This rank's device: ``cuda:LOCAL_RANK`` (made current) on a GPU, else the CPU.

    ``spec`` is the workload's ``device`` option: ``auto`` or ``cuda`` (a GPU per rank), or
    ``cpu`` (every rank on the CPU, over gloo); an explicit ``cuda:N`` is refused with several
    ranks, because the rank decides the GPU."""
    import torch

    if spec == "cpu":
        return torch.device("cpu")
    if spec not in ("auto", "cuda"):
        raise WorkloadError(
            f"device={spec} cannot be used with {w.world_size} ranks: each rank takes cuda:LOCAL_RANK; "
            "use device=cuda, auto or cpu"
        )
    if not torch.cuda.is_available():
        if spec == "cuda":
            raise WorkloadError("device=cuda was asked for, but torch sees no CUDA GPU here")
        return torch.device("cpu")
    device = torch.device("cuda", w.local_rank)
    torch.cuda.set_device(device)
    return device


class _Group:
    """The default process group (ours or the caller's) and a host group for barriers."""

    def __init__(self) -> None:
        self.users = 0
        self.owned = False
        self.host = None


_GROUP = _Group()


def join(device) -> None:
    """Join the default process group, initialising it (NCCL on a GPU, gloo on the CPU) from
    the environment if nobody has; pair with ``leave``. Also makes a gloo group for barriers."""
    import torch.distributed as dist

    if not dist.is_available():
        raise WorkloadError("this torch was built without torch.distributed")
    w = world()
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
        try:
            dist.init_process_group(backend=backend, **kwargs)
        except (RuntimeError, ValueError) as e:
            raise WorkloadError(f"could not join the {w.world_size} ranks over {backend}: {e}") from e
        _GROUP.owned = True
    elif dist.get_world_size() != w.world_size:
        raise WorkloadError(
            f"the process group has {dist.get_world_size()} ranks but WORLD_SIZE is {w.world_size}"
        )
    if _GROUP.host is None:
        _GROUP.host = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    _GROUP.users += 1


def leave() -> None:
    """Undo one ``join``; the last one destroys the process group if ``join`` created it."""
    import torch.distributed as dist

    _GROUP.users = max(0, _GROUP.users - 1)
    if _GROUP.users == 0 and dist.is_initialized():
        if _GROUP.owned:
            dist.destroy_process_group()
            _GROUP.owned = False
        _GROUP.host = None


def host_group():
    """The gloo group for barriers and small agreements (``join`` first)."""
    if _GROUP.host is None:
        raise WorkloadError("not joined to a process group (distributed.join was not called)")
    return _GROUP.host


def barrier_sync(device) -> Callable[[], None]:
    """Wait for this rank's device, then for every rank (on the host group: no GPU kernel)."""
    import torch
    import torch.distributed as dist

    group = host_group()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier(group=group)

    return sync


def wait_for_ranks() -> None:
    """Return when every rank has called this (on the host group)."""
    import torch.distributed as dist

    dist.barrier(group=host_group())


def agreed_max(value: float) -> float:
    """The largest ``value`` over the ranks."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=host_group())
    return float(t.item())


def gather(obj: Any) -> list:
    """Every rank's ``obj``, in rank order, on every rank (small, picklable objects)."""
    import torch.distributed as dist

    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj, group=host_group())
    return out


def agreed_steps(
    step: Callable[[], Any],
    sync: Callable[[], None],
    window_s: float,
    max_steps: int = 1_000_000_000,
    clock: Callable[[], float] = time.monotonic,
    warmup: int = 2,
) -> tuple[int, float]:
    """Steps per window so that a window lasts at least ``window_s`` on the slowest rank, the
    same on every rank: after ``warmup`` untimed steps (a first call initialises communicators
    and caches), growing batches are timed (each synced) and the ranks' largest time decides
    each next batch, so every rank runs the same steps. Returns the steps and the time per
    step. Units: s."""
    for _ in range(warmup):
        step()
    n = 1
    while True:
        sync()
        t0 = clock()
        for _ in range(n):
            step()
        sync()
        dt = agreed_max(clock() - t0)
        if dt >= 0.5 * window_s or n >= max_steps:
            break
        grow = 10 if dt < 1e-3 else max(2, math.ceil(0.55 * window_s / max(dt, 1e-9)))
        n = min(max_steps, n * grow)
    per_step = dt / n
    if dt < window_s:
        n = math.ceil(CALIBRATION_MARGIN * window_s / max(per_step, 1e-12))
    return max(1, min(max_steps, n)), per_step


def own_channel(result, device) -> str | None:
    """The primary channel that measures this rank's GPU (matched by UUID in the power sources'
    info), or None when no source names it (then the first primary channel stands)."""
    if device is None or getattr(device, "type", None) != "cuda":
        return None
    import torch

    try:
        uuid = "GPU-" + str(torch.cuda.get_device_properties(device).uuid)
    except (AttributeError, RuntimeError):
        return None
    return channel_of_gpu(result.meta, uuid)


def channel_of_gpu(meta, uuid: str) -> str | None:
    """The primary channel of the GPU with ``uuid`` in a run's metadata (``gpu<NVML index>``)."""
    primary = set(meta.get("primary_channels", []))
    for source in meta.get("sources", []):
        for gpu in (source.get("info") or {}).get("gpus", []) or []:
            if str(gpu.get("uuid", "")) == uuid and f"gpu{gpu.get('index')}" in primary:
                return f"gpu{gpu.get('index')}"
    return None
