"""Which of an op's inputs the model reads from memory, and which it has just written.

A model reads each weight (and buffer, cache, and its own input) once per forward. Those
tensors existed before the forward began, and between two reads the rest of the model's traffic
evicts them from the L2, so they come from memory. An activation, by contrast, is read right after
the kernel before it wrote it, and small activations are still in the L2. A replayed op that
reads the same inputs call after call finds all of them in the L2 (``l2=warm``: too fast where
weights dominate). Rotating every input over copies (``l2=all``) also sends the activations to
memory (too slow and too costly where activations dominate). ``l2=rotate`` rotates only the
inputs that existed before the forward.

``energyframe trace`` finds them by running one more step of the workload under a dispatch
mode. The mode sees every aten op's tensors. A tensor whose storage no op of the step produced
existed before the step. Views share their base's storage, so a transposed weight counts as the
weight. The recorded fact is a set of tensor signatures (shape, stride, dtype), because a
profiler trace names no tensors. ``memory_inputs.json`` holds them beside ops.jsonl. A replayed
op rotates the inputs whose signature is in the set. A trace without the file (one imported
from elsewhere) rotates every input.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .rebuild import DTYPE_NAMES

log = logging.getLogger("energyframe")

#: the file ``energyframe trace`` writes beside ops.jsonl
MEMORY_INPUTS = "memory_inputs.json"

Signature = tuple[tuple[int, ...], tuple[int, ...], str]


def record_memory_inputs(step: Callable[[], None]) -> list[Signature] | None:
    """Run ``step`` once under a dispatch mode and return the signatures of the tensors that
    its ops read and no op of the step produced. None when no op was seen: a step that replays
    a CUDA graph, or runs outside aten, says nothing about its inputs."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def storage(t: torch.Tensor) -> int:
        try:
            return t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):  # a tensor without storage
            return 0

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.before: set[int] = set()  # storages read before any op of the step made them
            self.made: set[int] = set()
            self.signatures: set[Signature] = set()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            for t in tree_leaves((args, kwargs or {})):
                if isinstance(t, torch.Tensor) and (ptr := storage(t)) and ptr not in self.made:
                    self.before.add(ptr)
                    self.signatures.add((tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch.")))
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and (ptr := storage(t)) and ptr not in self.before:
                    self.made.add(ptr)
            return out

    mode = Seen()
    with torch.no_grad(), mode:
        step()
    return sorted(mode.signatures) if mode.ops else None


def write_memory_inputs(folder: Path, signatures: Sequence[Signature]) -> None:
    rows = [{"dims": list(d), "strides": list(s), "dtype": t} for d, s, t in signatures]
    (folder / MEMORY_INPUTS).write_text(json.dumps({"inputs": rows}, indent=0))


def read_memory_inputs(folder: Path) -> set[Signature] | None:
    """The signatures in ``folder/memory_inputs.json``; None when the trace has none."""
    path = folder / MEMORY_INPUTS
    if not path.exists():
        return None
    try:
        rows = json.loads(path.read_text())["inputs"]
        return {(tuple(r["dims"]), tuple(r["strides"]), str(r["dtype"])) for r in rows}
    except (ValueError, KeyError, TypeError) as e:
        log.warning("%s is unreadable (%s): every input of a replayed op is rotated", path, e)
        return None


def memory_positions(record: dict, signatures: set[Signature]) -> set[int]:
    """The schema positions of ``record``'s tensor inputs whose signature is in ``signatures``."""
    types = record.get("input_types") or []
    dims = record.get("input_dims") or []
    strides = record.get("input_strides") or []
    out = set()
    for i, t in enumerate(types):
        signature = _signature(i, t, dims, strides)
        if signature is not None and signature in signatures:
            out.add(i)
    return out


def _signature(i: int, recorded_type: str, dims: list, strides: list) -> Signature | None:
    """The signature of the record's input ``i``; None for an input that is not one tensor."""
    dtype = DTYPE_NAMES.get(recorded_type)
    if dtype is None or i >= len(dims) or not isinstance(dims[i], list):
        return None
    if dims[i] and not all(isinstance(d, int) for d in dims[i]):
        return None  # a list of tensors: never rotated
    stride = strides[i] if i < len(strides) and isinstance(strides[i], list) else []
    return (tuple(dims[i]), tuple(stride), dtype)


def _places(arguments: Iterable[Any]) -> list[tuple[bool, Any]]:
    """Where each schema argument sits in (positional, keywords): (True, index) or (False, name)."""
    out: list[tuple[bool, Any]] = []
    positional = 0
    for arg in arguments:
        if arg.kwarg_only:
            out.append((False, arg.name))
        else:
            out.append((True, positional))
            positional += 1
    return out


def _value(state: tuple[list, dict], place: tuple[bool, Any]) -> Any:
    positional, keywords = state
    is_positional, key = place
    if is_positional:
        return positional[key] if key < len(positional) else None
    return keywords.get(key)


def keep_others(arguments: Iterable[Any], rotated: set[int]) -> tuple[Callable, Callable]:
    """For a rebuilt op's (positional, keywords) arguments: a function that takes a fresh copy
    and puts back the first copy's inputs at every position not in ``rotated`` (shared by all
    copies), and one that counts the bytes of the rotated inputs."""
    from ..workloads.graph import tensor_bytes

    places = _places(arguments)
    shared = [place for i, place in enumerate(places) if i not in rotated]
    moved = [place for i, place in enumerate(places) if i in rotated]

    def keep(first, fresh):
        positional, keywords = list(fresh[0]), dict(fresh[1])
        for is_positional, key in shared:
            if is_positional and key < len(positional):
                positional[key] = first[0][key]
            elif not is_positional and key in keywords:
                keywords[key] = first[1][key]
        return positional, keywords

    def rotated_bytes(state) -> int:
        return sum(tensor_bytes(_value(state, place)) for place in moved)

    return keep, rotated_bytes
