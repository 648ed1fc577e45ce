"""Rebuilding an aten op from what the profiler recorded: its name, the input dims, dtypes and
strides, and the concrete scalar arguments. The overload is chosen by matching the recorded
inputs against each overload's schema; tensors are made with the recorded shape, stride and
dtype (random values; index tensors in range); scalars are parsed and converted by schema type
(a dtype recorded as its ScalarType code becomes a torch dtype).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..workloads.torchops import stand_in

#: the profiler's names for tensor element types
DTYPE_NAMES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
}
#: c10::ScalarType codes, in order
SCALAR_TYPES = [
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex32",
    "complex64",
    "complex128",
    "bool",
    "qint8",
    "quint8",
    "qint32",
    "bfloat16",
]
MEMORY_FORMATS = ["contiguous_format", "preserve_format", "channels_last", "channels_last_3d"]
#: ops whose integer tensor argument indexes into another argument along a dimension
INDEX_RULES = {
    "aten::embedding": (1, 0, 0),
    "aten::index_select": (2, 0, "dim"),
    "aten::gather": (2, 0, "dim"),
}


#: the types of the 0-dim tensors that Python numbers become in an op (``x * 0.5``): they
#: stay on the CPU, and the kernel takes them by value
WRAPPED_NUMBER_TYPES = ("double", "long int")


class RebuildError(Exception):
    """The op cannot be rebuilt; the message says why."""


@dataclass
class Rebuilt:
    """A rebuilt op: the overload and a function that makes its arguments on a device."""

    name: str
    overload: Any
    make_args: Callable[[Any], tuple[list, dict]]

    def call(self, args: tuple[list, dict]) -> None:
        positional, keywords = args
        self.overload(*positional, **keywords)


def _concrete(text: str) -> Any:
    if text is None or text == "":
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        lowered = text.strip()
        if lowered in ("inf", "-inf", "nan"):
            return float(lowered)
        return text


#: schema types (without Optional) that name an argument kind outright
_KIND_OF_TYPE = {
    "Tensor": "tensor",
    **dict.fromkeys(("Tensor[]", "List[Tensor]", "Tensor?[]", "List[Optional[Tensor]]"), "tensors"),
    # dimension names: the profiler records none, so never a recorded number
    **dict.fromkeys(("str", "Dimname", "List[str]", "Dimname[]", "str[]"), "names"),
}
#: a word of the schema type that decides its kind, in the order they are looked for
_KIND_OF_WORD = (
    ("ScalarType", "dtype"),
    ("Layout", "layout"),
    ("MemoryFormat", "memory_format"),
    ("Device", "device"),
    ("Generator", "none"),
)


def _kind(schema_type: str) -> str:
    """What a schema type asks for: a tensor, tensors, names, one of the enum-like kinds, a
    list of numbers, or a scalar."""
    t = _without_optional(schema_type)
    if t in _KIND_OF_TYPE:
        return _KIND_OF_TYPE[t]
    for word, kind in _KIND_OF_WORD:
        if word in t:
            return kind
    if "[]" in t or t.startswith("List") or re.search(r"\[\d+\]$", t):
        return "list"
    return "scalar"


def _without_optional(schema_type: str) -> str:
    """The schema type without spaces and without its ``Optional[...]`` or ``?``."""
    t = schema_type.replace(" ", "")
    if t.startswith("Optional[") and t.endswith("]"):
        t = t[len("Optional[") : -1]
    return t.removesuffix("?")


def _optional(schema_type: str) -> bool:
    t = schema_type.replace(" ", "")
    return t.endswith("?") or t.startswith("Optional")


def _fits(schema_type: str, recorded: str) -> bool:
    kind = _kind(schema_type)
    if recorded in DTYPE_NAMES:
        return kind == "tensor"
    if recorded == "TensorList":
        return kind == "tensors"
    if recorded == "ScalarList":
        return kind == "list"
    if recorded == "GenericList":
        return kind in ("list", "tensors")
    if recorded == "Scalar":
        return kind in ("scalar", "dtype", "layout", "memory_format")
    if recorded == "":
        # None, or a string (the profiler records strings with an empty type)
        return _optional(schema_type) or kind in ("device", "none", "names")
    return False


def choose_overload(name: str, types: list[str]):
    import torch

    if not name.startswith("aten::"):
        raise RebuildError(f"{name} is not an aten op")
    packet = getattr(torch.ops.aten, name.split("::", 1)[1], None)
    if packet is None:
        raise RebuildError(f"torch has no op {name}")
    candidates = _fitting_overloads(packet, types)
    if not candidates:
        unrecorded = _unrecorded_lists(packet, types)
        if unrecorded:
            raise RebuildError(
                f"the trace does not hold the tensors of {name}'s {unrecorded} argument "
                "(the profiler records such lists as empty)"
            )
        raise RebuildError(f"no overload of {name} takes ({', '.join(t or 'None' for t in types)})")
    return min(candidates, key=lambda c: c[:3])[3]


def _fitting_overloads(packet, types: list[str]) -> list[tuple[bool, bool, str, Any]]:
    """The overloads whose schema takes the recorded types, each with what ranks it: an out=
    variant last, then the default first, then by name."""
    candidates = []
    for overload_name in packet.overloads():
        overload = getattr(packet, overload_name)
        arguments = overload._schema.arguments
        if len(arguments) != len(types):
            continue
        if all(_fits(str(a.type), t) for a, t in zip(arguments, types)):
            # an op can be recorded as its out= variant (arange called inside arange): last resort
            is_out = "out" in overload_name.split("_")
            candidates.append((is_out, overload_name != "default", overload_name, overload))
    return candidates


def _unrecorded_lists(packet, types: list[str]) -> str | None:
    """The name of a tensor-list argument that the trace left empty, if that alone is what fails."""
    for overload_name in packet.overloads():
        arguments = getattr(packet, overload_name)._schema.arguments
        if len(arguments) != len(types):
            continue
        misfits = [a for a, t in zip(arguments, types) if not _fits(str(a.type), t)]
        if misfits and all(_kind(str(a.type)) == "tensors" for a in misfits):
            return " ".join(f"{a.name} ({a.type})" for a in misfits)
    return None


def rebuild(record: dict, tensor_dtype_hint: str = "float16") -> Rebuilt:  # noqa: C901, PLR0915 (counts its nested make_args, one branch per argument kind)
    """An op from one ops.jsonl record. Raises RebuildError with the reason."""
    name = record["name"]
    types = list(record.get("input_types") or [])
    dims = list(record.get("input_dims") or [[]] * len(types))
    strides = list(record.get("input_strides") or [[]] * len(types))
    concrete = list(record.get("concrete_inputs") or [""] * len(types))
    if not (len(types) == len(dims) == len(concrete)):
        raise RebuildError(f"{name}: the trace's input lists disagree in length")
    masks = _mask_indices(record) if name == "aten::index" else None
    if masks is not None:
        types[1] = "TensorList"  # the list the profiler left empty, known from the op's children
    overload = choose_overload(name, types)
    arguments = overload._schema.arguments
    kernels = " ".join(record.get("kernel_names") or [])
    index_rule = INDEX_RULES.get(name)

    def make_args(device) -> tuple[list, dict]:  # noqa: C901 (one branch per argument kind of the op's schema)
        import torch

        values: list = []
        for i, (arg, t) in enumerate(zip(arguments, types)):
            kind = _kind(str(arg.type))
            value = _concrete(concrete[i]) if i < len(concrete) else None
            if kind == "tensor" and t in DTYPE_NAMES:
                where = device
                if "HtoD" in kernels and i == 1 or "DtoH" in kernels and i == 0:
                    where = torch.device("cpu")  # the host side of a copy stays on the host
                wrapped = i > 0 and dims[i] == [] and t in WRAPPED_NUMBER_TYPES
                if wrapped:  # x * 0.5: a Python number, a CPU scalar passed to the kernel by value
                    where = torch.device("cpu")
                low = high = None
                if index_rule and i == index_rule[0]:
                    table = dims[index_rule[1]]
                    axis = (
                        index_rule[2] if isinstance(index_rule[2], int) else int(_concrete(concrete[1]) or 0)
                    )
                    low, high = 0, int(table[axis]) if table else None
                tensor = stand_in(
                    dims[i], strides[i] if i < len(strides) else None, DTYPE_NAMES[t], where, low, high
                )
                if where.type == "cpu" and device.type == "cuda" and not wrapped:
                    tensor = tensor.pin_memory()
                values.append(tensor)
            elif kind == "tensors" and masks is not None:
                values.append(
                    [
                        None
                        if m is None
                        else stand_in(m["dims"], m["strides"], "bool", device, true_count=m["true_count"])
                        for m in masks
                    ]
                )
            elif kind == "tensors":
                parts = dims[i] or []
                part_strides = strides[i] if i < len(strides) and strides[i] else [None] * len(parts)
                values.append(
                    [stand_in(d, s, tensor_dtype_hint, device) for d, s in zip(parts, part_strides)]
                )
            elif kind == "dtype":
                values.append(
                    getattr(torch, SCALAR_TYPES[int(value)]) if isinstance(value, (int, float)) else None
                )
            elif kind == "layout":
                values.append(torch.strided if value is not None else None)
            elif kind == "memory_format":
                values.append(
                    getattr(torch, MEMORY_FORMATS[int(value)]) if isinstance(value, (int, float)) else None
                )
            elif kind == "device":
                values.append(device if arg.name == "device" else None)  # factory ops make their tensor here
            elif kind == "none":
                values.append(None)
            else:
                if isinstance(value, float) and math.isnan(value):
                    value = float("nan")
                values.append(value)
        positional = [v for a, v in zip(arguments, values) if not a.kwarg_only]
        keywords = {
            a.name: v
            for a, v in zip(arguments, values)
            # a value the trace did not record falls back to the schema's default
            if a.kwarg_only and not (v is None and not _optional(str(a.type)) and a.has_default_value())
        }
        return positional, keywords

    return Rebuilt(name, overload, make_args)


def _mask_indices(record: dict) -> list | None:
    """``aten::index``'s index list from the boolean masks its children revealed (see
    ``kineto.boolean_masks``): None for the dimensions before the masks, then the masks, which
    cover consecutive dimensions of the indexed tensor, placed where their shapes fit it first.
    None when the record has no masks (long index tensors leave no trace of their position)."""
    masks = record.get("boolean_masks")
    dims = (record.get("input_dims") or [[]])[0]
    if not masks or not isinstance(dims, list):
        return None
    covered = [d for m in masks for d in m["dims"]]
    for start in range(len(dims) - len(covered) + 1):
        if dims[start : start + len(covered)] == covered:
            return [None] * start + list(masks)
    raise RebuildError(
        f"aten::index: boolean masks of shapes {[m['dims'] for m in masks]} do not fit the indexed "
        f"tensor's shape {dims}"
    )


def float_dtype_hint(records: list[dict]) -> str:
    """The commonest floating element type in a trace (for tensor lists, whose dtype is not
    recorded)."""
    counts: dict[str, int] = {}
    for record in records:
        for t in record.get("input_types") or []:
            name = DTYPE_NAMES.get(t)
            if name and name.startswith(("float", "bfloat")):
                counts[name] = counts.get(name, 0) + 1
    return max(counts, key=lambda name: counts[name]) if counts else "float32"
