"""Workloads of one process per rank under ``torchrun``: the process group, this rank's device,
and which power channel is this rank's GPU.

The measurement agrees every window edge, calibrated step count, warm-up and guard band across
the ranks itself (``energyframe.ranks.coordinator``), so a phase that runs collectives is an ordinary
phase here: every rank runs it the same number of steps because the core decides them together.
What stays here is what a workload needs: joining the process group (NCCL between GPUs, gloo on
the CPU), this rank's device, a host (gloo) group for the barriers of a trace, and the GPU channel
of this rank in a result.

torch is imported inside the functions: the CLI imports this module to name trace directories.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UsageError, WorkloadError
from ..model import WorkloadContext
from ..ranks.world import World
from ..ranks.world import world as _world


def world() -> World:
    """RANK, LOCAL_RANK and WORLD_SIZE from the environment (a single process without them; srun's
    variables count too)."""
    try:
        return _world()
    except UsageError as e:
        raise WorkloadError(str(e)) from e


def rank_dir_name(rank: int) -> str:
    """The sub-directory one rank writes its trace (or run) into."""
    return f"rank{rank}"


def rank_device(spec: str, w: World | WorkloadContext):
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
        self.host: Any = None  # a torch ProcessGroup once joined (torch is imported late)


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


def joined() -> bool:
    """Whether this process joined the ranks' process group (``join``)."""
    return _GROUP.host is not None


def wait_for_ranks() -> None:
    """Return when every rank has called this (on the host group)."""
    import torch.distributed as dist

    dist.barrier(group=host_group())


def gather(obj: Any) -> list:
    """Every rank's ``obj``, in rank order, on every rank (small, picklable objects)."""
    import torch.distributed as dist

    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj, group=host_group())
    return out


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
