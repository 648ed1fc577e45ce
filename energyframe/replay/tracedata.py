"""A parsed profiler trace's data: its aten ops (``Op``), GPU kernels (``Kernel``) and the
``Trace`` that holds them, and the kernel tiers. ``kineto`` builds them from a trace file;
``comm`` reads the collectives among them.

Pure Python (no torch), as ``kineto``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..workloads.torchops import is_free

TIER_MEMORY = "memcpy/memset"
TIER_GEMM = "gemm"
TIER_OTHER = "other"
#: the tier of communication kernels (NCCL's)
TIER_COMMUNICATION = "communication"
TIER_COMM = TIER_COMMUNICATION
_COMM = re.compile(r"^nccl|nccl\w*kernel", re.IGNORECASE)
_GEMM = re.compile(r"gemm|gemv|cutlass|cublas|nvjet|xmma|wgmma|splitk|dot_kernel", re.IGNORECASE)


def tier(kernel_name: str, category: str = "kernel") -> str:
    if _COMM.search(kernel_name):
        return TIER_COMM
    if category in ("gpu_memcpy", "gpu_memset") or kernel_name.lower().startswith(("memcpy", "memset")):
        return TIER_MEMORY
    if _GEMM.search(kernel_name):
        return TIER_GEMM
    return TIER_OTHER


@dataclass
class Op:
    """A CPU-side aten op event."""

    name: str
    start_us: float
    end_us: float
    tid: object
    args: dict
    external_id: int | None
    children: list[Op] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    step: int | None = None
    parent: Op | None = field(default=None, repr=False, compare=False)
    #: launches a kernel itself, outside its child ops (batch norm that converts its weights
    #: with a child copy_ and then launches its own kernel): replayed whole, children included
    launches_directly: bool = False

    @property
    def is_leaf(self) -> bool:
        """No child op but views and metadata ops, and none of those hides a real op."""
        return all(is_free(c.name) and c.is_leaf for c in self.children)

    @property
    def is_unit(self) -> bool:
        """Replayed as one: a leaf, or a composite that launches kernels itself; never an op
        inside such a composite (its kernels are the composite's)."""
        return (self.is_leaf or self.launches_directly) and self.unit() is self

    def unit(self) -> Op:
        """The op whose replay runs this op's kernels: the outermost ancestor (or itself) that
        launches kernels directly, else this op."""
        unit, op = self, self.parent
        while op is not None:
            if op.launches_directly:
                unit = op
            op = op.parent
        return unit

    def key(self) -> str:
        a = self.args
        return json.dumps(
            [
                self.name,
                a.get("Input Dims"),
                a.get("Input type"),
                a.get("Input Strides"),
                a.get("Concrete Inputs"),
            ],
            sort_keys=True,
        )

    def record(self) -> dict:
        a = self.args
        out = {
            "name": self.name,
            "input_dims": a.get("Input Dims"),
            "input_types": a.get("Input type"),
            "input_strides": a.get("Input Strides"),
            "concrete_inputs": a.get("Concrete Inputs"),
        }
        if self.name == "aten::index":
            masks = boolean_masks(self)
            if masks:
                out["boolean_masks"] = masks
        return out

    def descendants(self) -> list[Op]:
        """Every op nested in this one, in the order they started."""
        out = []
        for child in self.children:
            out += [child, *child.descendants()]
        return sorted(out, key=lambda o: o.start_us)


def boolean_masks(op: Op) -> list[dict]:
    """The boolean masks an ``aten::index`` was given, read from its children: the profiler
    records the index list itself as empty. A mask is turned into indices by a ``nonzero``
    child (whose input is the mask: dims, strides) and then one ``select(1, j)`` per mask
    dimension of its ``n x mask_dims`` result, whose dims give the mask's True count ``n``."""
    masks = []
    nested = op.descendants()
    for i, child in enumerate(nested):
        if not _is_nonzero_of_a_mask(child):
            continue
        dims = child.args["Input Dims"][0]
        masks.append(
            {
                "dims": dims,
                "strides": (child.args.get("Input Strides") or [None])[0],
                "true_count": _true_count(nested[i + 1 :], dims),
            }
        )
    return masks


def _is_nonzero_of_a_mask(op: Op) -> bool:
    """A ``nonzero`` of a boolean tensor: a mask turned into indices."""
    dims, types = op.args.get("Input Dims") or [], op.args.get("Input type") or []
    return op.name == "aten::nonzero" and bool(dims) and types[:1] == ["bool"]


def _true_count(later: list[Op], mask_dims: list) -> int | None:
    """The mask's True count: the rows of the first ``select`` of a long ``n x len(mask_dims)``
    tensor (the ``nonzero``'s result) among the ops after the ``nonzero``; None without one."""
    for each in later:
        shape = (each.args.get("Input Dims") or [None])[0]
        if (
            each.name == "aten::select"
            and (each.args.get("Input type") or [None])[0] == "long int"
            and isinstance(shape, list)
            and len(shape) == 2
            and shape[1] == len(mask_dims)
        ):
            return shape[0]
    return None


@dataclass
class Kernel:
    name: str
    category: str
    start_us: float
    end_us: float
    grid: list | None
    block: list | None
    stream: object
    external_id: int | None
    correlation: int | None
    op: Op | None = None
    step: int | None = None

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def tier(self) -> str:
        return tier(self.name, self.category)


@dataclass
class Trace:
    path: Path
    ops: list[Op]
    kernels: list[Kernel]
    steps: list[tuple[float, float]]  # (start, end) of each annotated step, in trace µs
    #: iterations the trace holds: its annotated steps, or what the importer says
    iterations: int = 1
