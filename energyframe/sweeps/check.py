"""A kernel's arguments on the device, and the check of its outputs against a reference.

Inputs are fresh random numbers for every parameter point (seeded, so every kernel of a point
sees the same ones); outputs are poisoned (NaN, or the most negative integer) before the checked
launch, so an element the kernel never wrote fails the check. The error is
``||out - ref|| / ||ref||`` in float64, against a tolerance that depends on the output's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .kernel import CudaKernel, Launch
from .space import call_with

#: relative error allowed by output dtype (METHOD: float32 far under 1e-3; bf16 ~1e-2)
TOLERANCES = {"float64": 1e-10, "float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}
PASSED, MISMATCH, UNCHECKED = "passed", "mismatch", "unchecked"


@dataclass(frozen=True)
class Check:
    """How a kernel's outputs compared with the reference.

    Args:
        status: ``passed``, ``mismatch`` or ``unchecked`` (no reference).
        rel_error: the largest ``||out - ref|| / ||ref||`` over the outputs (NaN if an output
            held NaN: unwritten elements).
        tolerance: what ``rel_error`` had to stay under.
        against: ``reference`` (a Python function) or the reference kernel's label.
        detail: which output failed and how, or why nothing was checked.
    """

    status: str
    rel_error: float = math.nan
    tolerance: float = math.nan
    against: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "rel_error": None if math.isnan(self.rel_error) else self.rel_error,
            "tolerance": None if math.isnan(self.tolerance) else self.tolerance,
            "against": self.against,
            "detail": self.detail,
        }


def tolerance(dtype_name: str, rtol: float | None = None) -> float:
    if rtol is not None:
        return rtol
    return TOLERANCES.get(dtype_name, 0.0)  # integers: exact


def allocate(kernel: CudaKernel, launch: Launch, point: Mapping[str, Any], device, seed: int) -> dict:
    """Every pointer argument as a device tensor: the user's ``inputs`` where given, random
    inputs, poisoned outputs."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    given = dict(call_with(kernel.inputs, {**point, "device": device}) or {}) if kernel.inputs else {}
    outputs = {p.name for p in kernel.outputs}
    tensors = {}
    for p in kernel.signature.pointers:
        dtype = getattr(torch, p.torch_dtype)
        shape = launch.shapes[p.name]
        if p.name in given:
            t = given[p.name]
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.numel() < math.prod(shape):
                raise UsageError(
                    f"{kernel.label}: inputs()[{p.name!r}] must be a {p.torch_dtype} tensor of at least "
                    f"{math.prod(shape)} elements"
                )
            tensors[p.name] = t.to(device).contiguous()
        elif p.name in outputs:
            tensors[p.name] = torch.empty(shape, dtype=dtype, device=device)
        elif p.floating:
            tensors[p.name] = torch.randn(shape, dtype=dtype, device=device, generator=generator)
        elif dtype is torch.bool:
            tensors[p.name] = torch.randint(0, 2, shape, device=device, generator=generator).bool()
        else:
            tensors[p.name] = torch.randint(0, 16, shape, dtype=dtype, device=device, generator=generator)
    poison(kernel, tensors)
    return tensors


def poison(kernel: CudaKernel, tensors: Mapping[str, Any]) -> None:
    import torch

    for p in kernel.outputs:
        t = tensors[p.name]
        t.fill_(math.nan if p.floating else (False if t.dtype is torch.bool else torch.iinfo(t.dtype).min))


def reference_outputs(
    kernel: CudaKernel,
    reference: Callable[..., Any],
    tensors: Mapping[str, Any],
    scalars: Mapping[str, Any],
    point,
) -> dict[str, Any]:
    """Call the Python reference on the inputs (floating ones upcast to float64) and the
    scalars, by parameter name; its result (a tensor, a sequence or a dict) by output name."""
    import torch

    outputs = kernel.outputs
    values: dict[str, Any] = {**point, **scalars}
    for p in kernel.signature.pointers:
        if p in outputs:
            continue
        t = tensors[p.name]
        values[p.name] = t.double() if t.is_floating_point() else t.clone()
    result = call_with(reference, values)
    if isinstance(result, torch.Tensor):
        result = [result]
    if isinstance(result, Mapping):
        named = dict(result)
    else:
        result = list(result)
        if len(result) != len(outputs):
            raise UsageError(
                f"the reference returned {len(result)} tensors for {kernel.label}'s {len(outputs)} outputs "
                f"({', '.join(p.name for p in outputs)})"
            )
        named = {p.name: r for p, r in zip(outputs, result)}
    return {k: torch.as_tensor(v) for k, v in named.items()}


def compare(
    kernel: CudaKernel,
    tensors: Mapping[str, Any],
    expected: Mapping[str, Any],
    against: str,
    rtol: float | None = None,
    slack: float = 1.0,
) -> Check:
    """Each output's leading ``expected.numel()`` elements against ``expected``."""
    worst, tol, details = 0.0, 0.0, []
    for p in kernel.outputs:
        if p.name not in expected:
            continue
        ref = expected[p.name].detach().reshape(-1).to(device="cpu", dtype=_f64())
        got = tensors[p.name].detach().reshape(-1)
        if got.numel() < ref.numel():
            return Check(
                MISMATCH,
                math.nan,
                math.nan,
                against,
                f"{p.name}: {got.numel()} elements, reference {ref.numel()}",
            )
        got = got[: ref.numel()].to(device="cpu", dtype=_f64())
        limit = slack * tolerance(p.torch_dtype, rtol)
        tol = max(tol, limit)
        bad = int((~got.isfinite()).sum()) - int((~ref.isfinite()).sum())
        if bad > 0:
            details.append(f"{p.name}: {bad} elements not finite (unwritten?)")
            worst = math.nan
            continue
        norm = float(ref.norm())
        diff = float((got - ref).norm())
        err = diff / norm if norm > 0 else diff
        if not math.isnan(worst):
            worst = max(worst, err)
        if err > limit:
            details.append(f"{p.name}: error {err:.3g} > {limit:.3g}")
    if not expected:
        return Check(UNCHECKED, detail="the reference gave no outputs to compare")
    status = PASSED if not details else MISMATCH
    return Check(status, worst, tol, against, "; ".join(details))


def _f64():
    import torch

    return torch.float64
