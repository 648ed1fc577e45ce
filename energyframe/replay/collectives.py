"""Replaying a trace's collectives: each one a real collective of the recorded kind, size and
element type, on the process group of the ranks replaying their traces together.

A collective needs its peers: the replay of one rank's trace runs under ``torchrun`` with the
traced world size, every rank replaying its own trace, and the ranks run each collective phase
together — the same collectives in the same order; the measurement agrees the steps per window
(the slowest rank's time decides) and opens and closes every window on every rank together.
On GPUs a collective's ``unroll`` calls are captured in one CUDA graph, as the model's graph runs
them (an eager NCCL call costs the host more than a small all-reduce costs the GPU: a decode
step's 8-KB all-reduces would be measured at the host's pace); on the CPU (gloo) they run eagerly,
back to back. The values are random and are not kept bounded (a repeated sum grows): a
collective's time does not depend on them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..model import Phase
from ..workloads import distributed
from .rebuild import RebuildError

#: the kinds rebuilt, and how the output relates to the input
REPLAYED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "all_to_all_single")


@dataclass
class Collective:
    """A rebuilt collective: makes its tensors on a device, and runs once on them."""

    record: dict
    make_state: Callable[[Any], dict]
    call: Callable[[dict], None]


def rebuild_collective(record: dict, world_size: int) -> Collective:
    """A collective from one collectives.jsonl record. Raises RebuildError with the reason."""
    shape = _replayed_shape(record, world_size)
    kind: str = record["kind"]  # one of REPLAYED: checked
    dtype_name = record.get("dtype") or "float32"
    return Collective(
        record,
        functools.partial(_make_state, kind, shape, dtype_name, world_size),
        functools.partial(_call, kind),
    )


def _replayed_shape(record: dict, world_size: int) -> list[int]:
    """The shape of the one tensor the collective is replayed on; RebuildError for a record
    that cannot be replayed here (its kind, its group, its tensors)."""
    kind, group = record.get("kind"), int(record.get("group_size") or 0)
    if kind not in REPLAYED:
        raise RebuildError(f"{record.get('name')} ({kind}) is not replayed; replayed: {', '.join(REPLAYED)}")
    if group != world_size:
        raise RebuildError(
            f"{record.get('name')} ran over {group} ranks and this replay has {world_size}: "
            "collectives over a subgroup are not replayed"
        )
    shapes = record.get("shapes") or []
    if len(shapes) != 1:
        raise RebuildError(f"{record.get('name')} has {len(shapes)} recorded tensors; one is replayed")
    shape = [int(d) for d in shapes[0]]
    if kind in ("reduce_scatter_tensor", "all_to_all_single") and (not shape or shape[0] % world_size):
        raise RebuildError(f"{kind} of {shape}: the first dimension does not split over {world_size} ranks")
    return shape


def _make_state(kind: str, shape: list[int], dtype_name: str, world_size: int, device) -> dict:
    """The collective's input (random values, zeros for an integer type) and, for a kind that
    writes another tensor, its output."""
    import torch

    dtype = getattr(torch, dtype_name)
    if dtype.is_floating_point:
        data = torch.randn(shape, device=device, dtype=dtype)
    else:
        data = torch.zeros(shape, device=device, dtype=dtype)
    state = {"input": data}
    if kind == "all_gather_into_tensor":
        state["output"] = torch.empty([world_size * shape[0], *shape[1:]], device=device, dtype=dtype)
    elif kind == "reduce_scatter_tensor":
        state["output"] = torch.empty([shape[0] // world_size, *shape[1:]], device=device, dtype=dtype)
    elif kind == "all_to_all_single":
        state["output"] = torch.empty_like(data)
    return state


def _call(kind: str, state: dict) -> None:
    """One call of the collective on its tensors."""
    import torch.distributed as dist

    if kind == "all_reduce":
        dist.all_reduce(state["input"])
    elif kind == "all_gather_into_tensor":
        dist.all_gather_into_tensor(state["output"], state["input"])
    elif kind == "reduce_scatter_tensor":
        dist.reduce_scatter_tensor(state["output"], state["input"])
    elif kind == "broadcast":
        dist.broadcast(state["input"], src=0)
    else:
        dist.all_to_all_single(state["output"], state["input"])


def collective_phase(name: str, collective: Collective, device, unroll: int) -> Phase:
    """A phase of ``unroll`` calls per step, its tensors made now (call it on every rank, in the
    same order): one CUDA graph of them on a GPU, eager calls on the CPU. The measurement agrees
    its steps per window and its window edges over the ranks."""
    import dataclasses

    from ..workloads.graph import Captured, device_sync

    w = distributed.world()
    if device.type == "cuda":
        # the process group's own threads call CUDA while this one captures: thread-local mode
        captured = Captured(
            collective.make_state, collective.call, unroll, device, capture_error_mode="thread_local"
        )
        phase = captured.phase(name)
        return dataclasses.replace(phase, note=f"collective on {w.world_size} ranks, {unroll} per CUDA graph")
    holder: dict[str, Any] = {"state": collective.make_state(device)}  # freed by teardown

    def step() -> None:
        state = holder["state"]
        for _ in range(unroll):
            collective.call(state)

    def teardown() -> None:
        holder["state"] = None

    return Phase(
        name,
        step=step,
        sync=device_sync(device),
        iterations_per_step=unroll,
        teardown=teardown,
        note=f"eager collective on {w.world_size} ranks",
    )
