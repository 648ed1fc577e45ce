"""Collectives in a profiler trace: which ops they are, their sizes, counts and traced time.

Pure Python (no torch), as ``kineto``. A collective is a ``c10d::`` dispatcher op (what every
``torch.distributed`` call and the process-group backends go through: ``c10d::allreduce_``
...); a functional collective (``_c10d_functional::all_reduce``, used by DTensor) is a wrapper
around one and counts only when the trace shows no ``c10d::`` op inside it. Its size is the
recorded input shape; its element type comes from the ``record_param_comms`` event inside it
(NCCL traces), else from the functional wrapper's recorded input, else from the trace's
commonest floating type. Its GPU time is that of the kernels launched inside it (NCCL's, and
any the backend launches itself: ops inside a collective are not leaf ops).
Barriers are synchronisation, not the model's work: they are counted, not replayed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from .rebuild import DTYPE_NAMES
from .tracedata import TIER_COMMUNICATION, Kernel, Op, Trace

#: c10d dispatcher ops: the kind of collective, and the argument holding its (input) tensors
C10D = {
    "c10d::allreduce_": ("all_reduce", 0),
    "c10d::allreduce_coalesced_": ("all_reduce_coalesced", 0),
    "c10d::allgather_": ("all_gather", 1),
    "c10d::_allgather_base_": ("all_gather_into_tensor", 1),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather_into_tensor_coalesced", 1),
    "c10d::reduce_scatter_": ("reduce_scatter", 1),
    "c10d::_reduce_scatter_base_": ("reduce_scatter_tensor", 1),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter_tensor_coalesced", 1),
    "c10d::broadcast_": ("broadcast", 0),
    "c10d::reduce_": ("reduce", 0),
    "c10d::alltoall_base_": ("all_to_all_single", 1),
    "c10d::alltoall_": ("all_to_all", 1),
    "c10d::gather_": ("gather", 1),
    "c10d::scatter_": ("scatter", 1),
    "c10d::send": ("send", 0),
    "c10d::recv_": ("recv", 0),
    "c10d::recv_any_source_": ("recv", 0),
    "c10d::barrier": ("barrier", 0),
}
#: functional collectives (DTensor, torch.compile): wrappers of a c10d op, their input first
FUNCTIONAL = {
    "_c10d_functional::all_reduce": "all_reduce",
    "_c10d_functional::all_reduce_": "all_reduce",
    "_c10d_functional::all_reduce_coalesced": "all_reduce_coalesced",
    "_c10d_functional::all_gather_into_tensor": "all_gather_into_tensor",
    "_c10d_functional::all_gather_into_tensor_out": "all_gather_into_tensor",
    "_c10d_functional::reduce_scatter_tensor": "reduce_scatter_tensor",
    "_c10d_functional::all_to_all_single": "all_to_all_single",
    "_c10d_functional::broadcast": "broadcast",
    "_c10d_functional::broadcast_": "broadcast",
}
#: what record_param_comms calls an element type (c10::ScalarType names)
SCALAR_TYPE_NAMES = {
    "Half": "float16",
    "Float": "float32",
    "Double": "float64",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
}
ITEM_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int64": 8, "int32": 4}
ITEM_BYTES.update({"int16": 2, "int8": 1, "uint8": 1, "bool": 1})
BARRIER = "barrier"
PARAM_COMMS = "record_param_comms"


def is_collective_name(name: str) -> bool:
    return name in C10D or name in FUNCTIONAL


def collective_ops(trace: Trace) -> list[Op]:
    """The collectives of a trace (barriers included), inside its steps when it has some."""
    out = []
    for op in trace.ops:
        if trace.steps and op.step is None:
            continue
        if op.name in C10D:
            out.append(op)
        elif op.name in FUNCTIONAL and not any(d.name in C10D for d in descendants(op)):
            out.append(op)
    return out


def inside_collective(op: Op) -> bool:
    """Whether an op runs inside a collective (the backend's own work, not the model's)."""
    parent = op.parent
    while parent is not None:
        if parent.name in C10D:
            return True
        parent = parent.parent
    return False


def descendants(op: Op):
    stack = list(op.children)
    while stack:
        child = stack.pop()
        yield child
        stack.extend(child.children)


def _shapes(dims: Any) -> list[list[int]]:
    """Tensor shapes of one recorded argument: a tensor, a list of them, or a list of lists."""
    if not isinstance(dims, list) or not dims:
        return []
    if all(isinstance(d, int) for d in dims):
        return [dims]
    out: list[list[int]] = []
    for d in dims:
        out.extend(_shapes(d))
    return out


def describe(op: Op, dtype_hint: str, world_size: int) -> dict:
    """A collective's kind, input shapes, element type and group size."""
    kind, index = _kind_and_input(op)
    dims = op.args.get("Input Dims") or []
    shapes = _shapes(dims[index]) if index < len(dims) else []
    params: Mapping[str, Any] = next((d.args for d in [op, *descendants(op)] if d.name == PARAM_COMMS), {})
    dtype = _element_type(op, index, params) or dtype_hint
    group = params.get("Group size")
    numel = _numel(shapes)
    return {
        "name": op.name,
        "kind": kind,
        "shapes": shapes,
        "dtype": dtype,
        "group_size": int(group) if group not in (None, "") else world_size,
        "numel": numel,
        "bytes": numel * ITEM_BYTES.get(dtype, 4),
    }


def _kind_and_input(op: Op) -> tuple[str, int]:
    """The collective's kind, and which recorded argument holds its input tensors."""
    if op.name in C10D:
        return C10D[op.name]
    return FUNCTIONAL[op.name], 0


def _element_type(op: Op, index: int, params: Mapping[str, Any]) -> str | None:
    """The element type, from the first that records it: record_param_comms, the op's own input,
    the functional collective around it. None when none does."""
    dtype = SCALAR_TYPE_NAMES.get(str(params.get("dtype", "")))
    types = op.args.get("Input type") or []
    if dtype is None and index < len(types):
        dtype = DTYPE_NAMES.get(types[index])
    parent = op.parent
    if dtype is None and parent is not None and parent.name in FUNCTIONAL:
        dtype = DTYPE_NAMES.get((parent.args.get("Input type") or [""])[0])
    return dtype


def _numel(shapes: list[list[int]]) -> int:
    """The elements of all the tensors, together."""
    numel = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= int(d)
        numel += n
    return numel


def unique_collectives(trace: Trace, dtype_hint: str = "float32", world_size: int = 1) -> list[dict]:
    """One record per unique collective: kind, shapes, type, group size, count (per
    iteration), and the GPU time of the kernels launched inside it (NCCL's)."""
    ops = collective_ops(trace)
    kernels_of = _kernels_by_collective(trace, ops)
    groups: dict[str, list[tuple[Op, dict]]] = defaultdict(list)
    for op in ops:
        record = describe(op, dtype_hint, world_size)
        key = json.dumps(
            [record["name"], record["kind"], record["shapes"], record["dtype"], record["group_size"]]
        )
        groups[key].append((op, record))
    out = []
    for key, members in groups.items():
        record = dict(members[0][1])
        kernels = [k for op, _ in members for k in kernels_of[id(op)]]
        out.append(
            {
                **record,
                "key": key,
                "count": len(members),
                "count_per_iteration": len(members) / trace.iterations,
                "gpu_time_us": sum(k.duration_us for k in kernels),
                "kernel_names": sorted({k.name for k in kernels}),
                "replayed": record["kind"] != BARRIER,
            }
        )
    return sorted(out, key=lambda r: (not r["replayed"], r["key"]))


def _kernels_by_collective(trace: Trace, ops: list[Op]) -> dict[int, list[Kernel]]:
    """The kernels each collective launched (NCCL's and its backend's), by the collective's id()."""
    chosen = {id(op) for op in ops}
    kernels_of: dict[int, list[Kernel]] = defaultdict(list)
    for k in trace.kernels:
        op = _collective_of(k, chosen)
        if op is not None:
            kernels_of[id(op)].append(k)
    return kernels_of


def _collective_of(k: Kernel, chosen: set[int]) -> Op | None:
    """The collective (of those whose id() is in ``chosen``) that launched the kernel: the one
    its op runs in, or for a communication kernel the one inside its op."""
    op = k.op
    while op is not None and id(op) not in chosen:
        op = op.parent
    if op is None and k.op is not None and k.tier == TIER_COMMUNICATION:
        # the kernel's op encloses the collective (it launched a kernel of its own)
        op = next((d for d in descendants(k.op) if id(d) in chosen), None)
    return op
