"""A kernel's arguments on the device, and the check of its outputs against a reference.

Inputs are fresh random numbers for every parameter point (seeded, so every kernel of a point
sees the same ones); outputs are poisoned (NaN, or the most negative integer) before the checked
launch, so an element the kernel never wrote fails the check. In-out arguments (outputs the
kernel also reads) are random like inputs. The error is ``||out - ref|| / ||ref||`` in float64
over the elements the reference holds finite, against a tolerance that depends on the output's
dtype.

With nothing to compare against (no reference function, the first configuration of a parameter
point), the determinism check launches the kernel twice, each time on freshly allocated
arguments (the same seeded inputs, poisoned outputs), and compares the two outputs: a race
between threads (``y[i] = a*x[i] + y[i]`` computed by several threads) shows as a difference.
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
DETERMINISTIC, NONDETERMINISTIC = "deterministic", "nondeterministic"
#: check statuses that make a configuration's result wrong (measured anyway, marked ``mismatch``)
WRONG = (MISMATCH, NONDETERMINISTIC)


@dataclass(frozen=True)
class Check:
    """How a kernel's outputs compared with the reference.

    Args:
        status: ``passed``, ``mismatch`` (against a reference), ``deterministic`` or
            ``nondeterministic`` (two launches on fresh copies of the inputs, when there is no
            reference), ``unchecked`` (checking off, or nothing could be compared).
        rel_error: the largest ``||out - ref|| / ||ref||`` over the outputs (NaN if an output
            held NaN: unwritten elements).
        tolerance: what ``rel_error`` had to stay under.
        against: ``reference`` (a Python function), the reference configuration's name, or
            ``a second launch`` (the determinism check).
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
    """Every pointer argument as a fresh device tensor: a copy of the user's ``inputs`` where
    given, random inputs (and in-outs), poisoned outputs."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    given = dict(call_with(kernel.inputs, {**point, "device": device}) or {}) if kernel.inputs else {}
    outputs = {p.name for p in kernel.outputs} - {p.name for p in kernel.inouts}
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
            tensors[p.name] = t.to(device).clone(memory_format=torch.contiguous_format)
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

    inouts = {p.name for p in kernel.inouts}
    for p in kernel.outputs:
        if p.name in inouts:
            continue
        t = tensors[p.name]
        t.fill_(math.nan if p.floating else (False if t.dtype is torch.bool else torch.iinfo(t.dtype).min))


def reference_outputs(
    kernel: CudaKernel,
    reference: Callable[..., Any],
    tensors: Mapping[str, Any],
    scalars: Mapping[str, Any],
    point,
    before: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Call the Python reference on the inputs (floating ones upcast to float64) and the
    scalars, by parameter name; its result (a tensor, a sequence or a dict) by output name.

    Args:
        before: the in-out arguments' values before the launch (the reference reads those).
    """
    import torch

    outputs = kernel.outputs
    inouts = {p.name for p in kernel.inouts}
    values: dict[str, Any] = {**point, **scalars}
    for p in kernel.signature.pointers:
        if p in outputs and p.name not in inouts:
            continue
        t = (before or {}).get(p.name, tensors[p.name]) if p.name in inouts else tensors[p.name]
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
    """Each output's leading ``expected.numel()`` elements against ``expected``, over the
    elements ``expected`` holds finite (a reference kernel leaves unwritten elements NaN)."""
    worst, tol, details, compared = 0.0, 0.0, [], 0
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
        finite = ref.isfinite()
        if not bool(finite.any()):
            details.append(f"{p.name}: the reference holds no finite value")
            continue
        compared += 1
        bad = int((~got.isfinite() & finite).sum())
        if bad > 0:
            details.append(f"{p.name}: {bad} elements not finite (unwritten?)")
            worst = math.nan
            continue
        ref, got = ref[finite], got[finite]
        norm = float(ref.norm())
        diff = float((got - ref).norm())
        err = diff / norm if norm > 0 else diff
        if not math.isnan(worst):
            worst = max(worst, err)
        if err > limit:
            details.append(f"{p.name}: error {err:.3g} > {limit:.3g}")
    if not expected:
        return Check(UNCHECKED, detail="the reference gave no outputs to compare")
    if not compared:
        return Check(UNCHECKED, math.nan, tol, against, "; ".join(details))
    status = PASSED if not details else MISMATCH
    return Check(status, worst, tol, against, "; ".join(details))


def determinism(
    kernel: CudaKernel, first: Mapping[str, Any], second: Mapping[str, Any], rtol: float | None = None
) -> Check:
    """Whether two launches, each on freshly allocated arguments (the same inputs, poisoned
    outputs), wrote the same outputs: ``deterministic`` when every output agrees within the
    dtype's tolerance and the same elements are written, else ``nondeterministic``; ``unchecked``
    when no output holds a finite value (nothing was written, or the kernel reads its poisoned
    output: declare it an in-out)."""
    worst, tol, details, exact, empty = 0.0, 0.0, [], True, []
    for p in kernel.outputs:
        a = first[p.name].detach().reshape(-1).to(dtype=_f64())  # on their device: only scalars move
        b = second[p.name].detach().reshape(-1).to(dtype=_f64())
        fa, fb = a.isfinite(), b.isfinite()
        if not bool(fa.any()) and not bool(fb.any()):
            empty.append(p.name)
            continue
        limit = tolerance(p.torch_dtype, rtol)
        tol = max(tol, limit)
        one_only = int((fa != fb).sum())
        both = fa & fb
        a, b = a[both], b[both]
        norm = float(a.norm())
        diff = float((a - b).norm())
        err = diff / norm if norm > 0 else diff
        worst = max(worst, err)
        exact = exact and one_only == 0 and bool((a == b).all())
        if one_only:
            details.append(f"{p.name}: {one_only} elements finite in one launch only")
        if err > limit:
            details.append(f"{p.name}: the launches differ by {err:.3g} > {limit:.3g}")
    against = "a second launch"
    if len(empty) == len(kernel.outputs):
        names = ", ".join(empty)
        return Check(
            UNCHECKED,
            against=against,
            detail=f"{names}: no finite value after the launch (poisoned with NaN): the kernel never "
            f"writes it, or reads it (y = a*x + y): declare it an in-out (inouts= / --inout {empty[0]})",
        )
    if details:
        return Check(NONDETERMINISTIC, worst, tol, against, "; ".join(details))
    how = "bit for bit" if exact else "within the tolerance, not bit for bit"
    skipped = f"; {', '.join(empty)} never finite" if empty else ""
    return Check(
        DETERMINISTIC,
        worst,
        tol,
        against,
        f"two launches on fresh copies of the inputs agree {how}{skipped}",
    )


def _f64():
    import torch

    return torch.float64
