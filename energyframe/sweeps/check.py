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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .kernel import CudaKernel, Launch
from .signature import Param
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
        shape = launch.shapes[p.name]
        if p.name in given:
            tensors[p.name] = _given_copy(kernel, p, given[p.name], shape, device)
        elif p.name in outputs:
            tensors[p.name] = torch.empty(shape, dtype=getattr(torch, p.torch_dtype), device=device)
        else:
            tensors[p.name] = _random(p, shape, device, generator)
    poison(kernel, tensors)
    return tensors


def _given_copy(kernel: CudaKernel, p: Param, given: Any, shape: Sequence[int], device):
    """A contiguous copy, on the device, of a tensor the user's ``inputs`` gave.

    Raises:
        UsageError: it is not a tensor of the argument's dtype with enough elements.
    """
    import torch

    dtype = getattr(torch, p.torch_dtype)
    if not isinstance(given, torch.Tensor) or given.dtype != dtype or given.numel() < math.prod(shape):
        raise UsageError(
            f"{kernel.label}: inputs()[{p.name!r}] must be a {p.torch_dtype} tensor of at least "
            f"{math.prod(shape)} elements"
        )
    return given.to(device).clone(memory_format=torch.contiguous_format)


def _random(p: Param, shape: Sequence[int], device, generator):
    """Seeded random values of the argument's dtype: normal for floats, 0 or 1 for bools,
    0 to 15 for integers."""
    import torch

    dtype = getattr(torch, p.torch_dtype)
    if p.floating:
        return torch.randn(shape, dtype=dtype, device=device, generator=generator)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, device=device, generator=generator).bool()
    return torch.randint(0, 16, shape, dtype=dtype, device=device, generator=generator)


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

    result = call_with(reference, _reference_arguments(kernel, tensors, scalars, point, before))
    if isinstance(result, torch.Tensor):
        result = [result]
    named = dict(result) if isinstance(result, Mapping) else _by_output(kernel, list(result))
    return {k: torch.as_tensor(v) for k, v in named.items()}


def _reference_arguments(
    kernel: CudaKernel,
    tensors: Mapping[str, Any],
    scalars: Mapping[str, Any],
    point,
    before: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What the reference is called with, by name: the point's parameters, the scalars, and
    every pointer argument but the pure outputs (in-outs as they were before the launch),
    floating ones upcast to float64 and every one a copy."""
    outputs = kernel.outputs
    inouts = {p.name for p in kernel.inouts}
    values: dict[str, Any] = {**point, **scalars}
    for p in kernel.signature.pointers:
        if p in outputs and p.name not in inouts:
            continue
        t = (before or {}).get(p.name, tensors[p.name]) if p.name in inouts else tensors[p.name]
        values[p.name] = t.double() if t.is_floating_point() else t.clone()
    return values


def _by_output(kernel: CudaKernel, result: list[Any]) -> dict[str, Any]:
    """A reference's sequence of results named by the kernel's outputs, in order.

    Raises:
        UsageError: not one result per output.
    """
    outputs = kernel.outputs
    if len(result) != len(outputs):
        raise UsageError(
            f"the reference returned {len(result)} tensors for {kernel.label}'s {len(outputs)} outputs "
            f"({', '.join(p.name for p in outputs)})"
        )
    return {p.name: r for p, r in zip(outputs, result)}


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
    worst, tol, compared = 0.0, 0.0, 0
    details: list[str] = []
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
        output = _against_reference(p.name, ref, got, limit)
        details += output.details
        if output.compared:
            compared += 1
            # an output with unwritten elements makes the worst error unknown for good
            worst = math.nan if output.unwritten or math.isnan(worst) else max(worst, output.rel_error)
    if not expected:
        return Check(UNCHECKED, detail="the reference gave no outputs to compare")
    if not compared:
        return Check(UNCHECKED, math.nan, tol, against, "; ".join(details))
    status = PASSED if not details else MISMATCH
    return Check(status, worst, tol, against, "; ".join(details))


@dataclass(frozen=True)
class _OutputCheck:
    """One output against the reference.

    Args:
        compared: the reference held a finite value to compare with.
        unwritten: elements the reference holds finite are not finite in the output.
        rel_error: ``||out - ref|| / ||ref||`` over the reference's finite elements (NaN when
            not compared or unwritten).
        details: what failed, for the check's detail.
    """

    compared: bool
    unwritten: bool = False
    rel_error: float = math.nan
    details: tuple[str, ...] = ()


def _against_reference(name: str, ref, got, limit: float) -> _OutputCheck:
    """One output's elements (float64, as many as the reference's) against the reference's."""
    finite = ref.isfinite()
    if not bool(finite.any()):
        return _OutputCheck(compared=False, details=(f"{name}: the reference holds no finite value",))
    bad = int((~got.isfinite() & finite).sum())
    if bad > 0:
        return _OutputCheck(
            compared=True, unwritten=True, details=(f"{name}: {bad} elements not finite (unwritten?)",)
        )
    err = _relative_error(ref[finite], got[finite])
    failed = (f"{name}: error {err:.3g} > {limit:.3g}",) if err > limit else ()
    return _OutputCheck(compared=True, rel_error=err, details=failed)


def _relative_error(ref, got) -> float:
    """``||got - ref|| / ||ref||``, or the absolute difference where ``ref`` is all zeros."""
    norm = float(ref.norm())
    diff = float((got - ref).norm())
    return diff / norm if norm > 0 else diff


def determinism(
    kernel: CudaKernel, first: Mapping[str, Any], second: Mapping[str, Any], rtol: float | None = None
) -> Check:
    """Whether two launches, each on freshly allocated arguments (the same inputs, poisoned
    outputs), wrote the same outputs: ``deterministic`` when every output agrees within the
    dtype's tolerance and the same elements are written, else ``nondeterministic``; ``unchecked``
    when no output holds a finite value (nothing was written, or the kernel reads its poisoned
    output: declare it an in-out)."""
    worst, tol, exact = 0.0, 0.0, True
    details: list[str] = []
    empty: list[str] = []
    for p in kernel.outputs:
        a = first[p.name].detach().reshape(-1).to(dtype=_f64())  # on their device: only scalars move
        b = second[p.name].detach().reshape(-1).to(dtype=_f64())
        limit = tolerance(p.torch_dtype, rtol)
        output = _between_launches(p.name, a, b, limit)
        if output is None:
            empty.append(p.name)
            continue
        tol = max(tol, limit)
        worst = max(worst, output.rel_error)
        exact = exact and output.exact
        details += output.details
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


@dataclass(frozen=True)
class _LaunchesCompared:
    """One output of two launches.

    Args:
        rel_error: ``||b - a|| / ||a||`` over the elements finite in both.
        exact: the same elements are finite in both, and equal bit for bit.
        details: how they differ, for the check's detail.
    """

    rel_error: float
    exact: bool
    details: tuple[str, ...]


def _between_launches(name: str, a, b, limit: float) -> _LaunchesCompared | None:
    """One output of the first launch against the second's (float64, on their device); None
    when neither launch left a finite value in it."""
    fa, fb = a.isfinite(), b.isfinite()
    if not bool(fa.any()) and not bool(fb.any()):
        return None
    one_only = int((fa != fb).sum())
    both = fa & fb
    a, b = a[both], b[both]
    err = _relative_error(a, b)
    details: list[str] = []
    if one_only:
        details.append(f"{name}: {one_only} elements finite in one launch only")
    if err > limit:
        details.append(f"{name}: the launches differ by {err:.3g} > {limit:.3g}")
    return _LaunchesCompared(err, one_only == 0 and bool((a == b).all()), tuple(details))


def _f64():
    import torch

    return torch.float64
