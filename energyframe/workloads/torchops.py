"""What per-layer decomposition and op replay share about aten ops: which ops launch no kernel,
and how a stand-in tensor is made from a recorded shape, stride and dtype.

Two spellings of an op name meet here: the profiler's (``aten::view``) and the dispatcher's
(``aten.view``, ``aten.view.default``). ``op_name`` reduces both to the bare name.

torch is imported inside functions: the trace reader (pure Python) imports this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: aten ops that launch no kernel of their own (views, metadata, allocation without a fill,
#: composite wrappers whose work is a child op), by bare name
FREE_OPS = frozenset(
    {
        # views and aliasing
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "as_strided",
        "t",
        "transpose",
        "permute",
        "expand",
        "expand_as",
        "unsqueeze",
        "squeeze",
        "select",
        "slice",
        "narrow",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "flatten",
        "unflatten",
        "unfold",
        "alias",
        "detach",
        "detach_",
        "lift_fresh",
        "resolve_conj",
        "resolve_neg",
        # allocation without a fill
        "empty",
        "empty_like",
        "empty_strided",
        "resize_",
        # metadata
        "size",
        "stride",
        "dim",
        "numel",
        "sym_size",
        "sym_stride",
        "is_contiguous",
        "result_type",
        # wrappers whose kernels (if any) belong to a child op (_to_copy, clone, copy_)
        "contiguous",
        "to",
        "item",
        "_local_scalar_dense",
    }
)

#: torch dtype names -> the short names tables print
SHORT_DTYPES = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp64",
    "int64": "i64",
    "int32": "i32",
    "bool": "bool",
}


def op_name(name: str) -> str:
    """The bare name of an aten op: ``aten::view``, ``aten.view`` and ``aten.view.default`` are
    all ``view``. Names outside the aten namespace are returned as they are."""
    for prefix in ("aten::", "aten."):
        if name.startswith(prefix):
            return name[len(prefix) :].split(".", 1)[0]
    return name


def is_free(name: str) -> bool:
    """Whether the op launches no kernel of its own (either spelling; profiler records of
    ``detach_`` without a namespace count too)."""
    return op_name(name) in FREE_OPS


def storage_elements(shape: Sequence[int], stride: Sequence[int]) -> int:
    """Elements a strided tensor's storage must hold (0 for an empty tensor)."""
    if not all(shape):
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride))


def stand_in(
    shape: Sequence[int],
    stride: Sequence[int] | None,
    dtype,
    device,
    low: int | None = None,
    high: int | None = None,
    true_count: int | None = None,
):
    """A tensor of the given shape, stride and dtype with values that are safe to compute on.

    Floating and complex tensors are random normal (float8 through float32); integer tensors
    are uniform in ``[low, high)`` when a range is given, else zeros (which index every
    dimension safely); boolean tensors hold ``true_count`` True values (at random places) when
    it is given, else half of them: a boolean mask's count decides the size of what it selects.
    On the ``meta`` device the values are left empty.

    Args:
        dtype: a torch dtype or its name (``float16``).
        stride: None for the contiguous strides.
    """
    import torch

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    shape = tuple(int(d) for d in shape)
    if stride is None or len(stride) != len(shape):
        stride = torch.empty(shape, device="meta").stride()
    stride = tuple(int(s) for s in stride)
    n = storage_elements(shape, stride)
    device = torch.device(device)
    base = _storage(n, dtype, device, shape, stride, low=low, high=high, true_count=true_count)
    return torch.as_strided(base, shape, stride)


def _storage(
    n: int,
    dtype,
    device,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    *,
    low: int | None,
    high: int | None,
    true_count: int | None,
):
    """The ``n`` values of a stand-in's storage (``stand_in`` says which, by dtype)."""
    import torch

    if device.type == "meta":
        return torch.empty(n, dtype=dtype, device=device)
    if dtype.is_floating_point or dtype.is_complex:
        if dtype.itemsize == 1:  # float8: randn cannot make it directly
            return torch.randn(n, device=device).to(dtype)
        return torch.randn(n, dtype=dtype, device=device)
    if dtype == torch.bool:
        return _mask(n, shape, stride, true_count, device)
    if low is not None and high is not None and high > low:
        return torch.randint(int(low), int(high), (n,), dtype=dtype, device=device)
    return torch.zeros(n, dtype=dtype, device=device)


def _mask(n: int, shape, stride, true_count: int | None, device):
    """Storage for a boolean tensor whose *visible* elements hold ``true_count`` True values."""
    import torch

    visible = math.prod(shape)
    if true_count is None:
        true_count = visible // 2
    true_count = max(0, min(int(true_count), visible))
    if n < visible:
        # overlapping strides (an expanded mask: a decoder's causal mask over the batch) cannot be
        # written element by element; its storage holds the same share of True values
        share = round(n * true_count / visible) if visible else 0
        base = torch.zeros(n, dtype=torch.bool)
        base[torch.randperm(n)[:share]] = True
        return base.to(device)
    values = torch.zeros(visible, dtype=torch.bool)
    values[torch.randperm(visible)[:true_count]] = True
    base = torch.zeros(n, dtype=torch.bool)
    if visible:
        view = torch.as_strided(base, shape, stride)
        view.copy_(values.view(shape))
    return base.to(device)
