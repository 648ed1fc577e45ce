"""Per-layer decomposition of any ``torch.nn.Module`` from one forward pass.

A forward pass runs with hooks on the *units* (leaf modules, or named blocks with the leaves
outside them) that record each call's exact inputs (shapes, strides, dtypes, value ranges of
integer tensors, non-tensor arguments). A dispatch mode records every aten op that runs *outside*
any unit: the functional code between layers (ResNet's residual adds, the attention inside
``nn.MultiheadAttention``) that leaf modules alone miss. Views and metadata ops launch no kernel
and are left out.

Units that are the same (same type and configuration, same parameter shapes, same inputs) are
measured once and counted.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .torchops import SHORT_DTYPES, is_free, stand_in


@dataclass(frozen=True)
class TensorMeta:
    """Everything needed to make a stand-in for a tensor argument."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    low: float | None = None  # value range of integer tensors (indices stay in range)
    high: float | None = None
    true_count: int | None = None  # True values of a boolean tensor (a mask's selection size)

    @classmethod
    def of(cls, t) -> TensorMeta:
        import torch

        low = high = true_count = None
        real = t.device.type != "meta" and t.numel()
        if real and t.dtype == torch.bool:
            true_count = int(t.sum())
        elif real and not t.is_floating_point() and not t.is_complex():
            low, high = float(t.min()), float(t.max())
        return cls(
            tuple(t.shape), tuple(t.stride()), str(t.dtype).replace("torch.", ""), low, high, true_count
        )

    @property
    def nbytes(self) -> int:
        import torch

        return math.prod(self.shape) * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()

    def describe(self) -> str:
        """``1x64x56x56 fp16 NHWC``: shape, short dtype, and the memory format when not plain."""
        short = SHORT_DTYPES.get(self.dtype, self.dtype)
        text = "x".join(str(s) for s in self.shape) + f" {short}"
        if len(self.shape) == 4 and self.stride[1] == 1 and self.shape[1] > 1:
            text += " NHWC"
        return text

    def make(self, device, dtype_override: str | None = None):
        """A tensor with this shape, stride and dtype (random values; integer values in the
        recorded range, boolean tensors with the recorded number of True values)."""
        import torch

        dtype = getattr(torch, self.dtype)
        if dtype.is_floating_point and dtype_override is not None:
            dtype = getattr(torch, dtype_override)
        high = int(self.high) + 1 if self.high is not None else None  # recorded max is inclusive
        low = int(self.low) if self.low is not None else None
        return stand_in(self.shape, self.stride, dtype, device, low, high, self.true_count)


def encode(value: Any) -> Any:
    """Replace tensors (recursively) by ``TensorMeta``; keep everything else."""
    import torch

    if isinstance(value, torch.Tensor):
        return TensorMeta.of(value)
    if isinstance(value, (list, tuple)):
        return type(value)(encode(v) for v in value)
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def materialize(value: Any, device, dtype_override: str | None = None) -> Any:
    if isinstance(value, TensorMeta):
        return value.make(device, dtype_override)
    if isinstance(value, (list, tuple)):
        return type(value)(materialize(v, device, dtype_override) for v in value)
    if isinstance(value, dict):
        return {k: materialize(v, device, dtype_override) for k, v in value.items()}
    return value


def tensor_metas(value: Any) -> list[TensorMeta]:
    if isinstance(value, TensorMeta):
        return [value]
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in tensor_metas(v)]
    if isinstance(value, dict):
        return [m for v in value.values() for m in tensor_metas(v)]
    return []


def _freeze(value: Any) -> Any:
    """A hashable form of encoded arguments, for deduplication."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, TensorMeta):
        return ("T", value.shape, value.stride, value.dtype)
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


@dataclass
class Unit:
    """One measured piece of a model: a module call or an op between modules.

    ``paths`` lists every place it occurs (its count); ``path`` is the first.
    """

    path: str
    kind: str  # "module" or "op"
    type_name: str
    args: Any
    kwargs: Any
    key: Any
    module: Any = None
    op: Any = None
    params_bytes: int = 0
    paths: list[str] = field(default_factory=list)
    kernels: int = 0  # aten ops that ran inside it (0: nothing to measure, e.g. Dropout in eval)

    @property
    def count(self) -> int:
        """Calls this unit stands for in the model (repeated layers included)."""
        return len(self.paths)

    @property
    def measured_calls(self) -> int:
        """Calls in the forward pass that was run (without ``Decomposition.repeat``)."""
        return sum(1 for p in self.paths if not p.endswith("]"))

    def inputs(self) -> str:
        metas = tensor_metas(self.args) + tensor_metas(self.kwargs)
        return ", ".join(m.describe() for m in metas)

    def input_bytes(self) -> int:
        """Bytes of the call's tensor arguments."""
        return sum(m.nbytes for m in tensor_metas(self.args) + tensor_metas(self.kwargs))

    def call_factory(
        self, device, copies: int = 1, input_copies: int = 1
    ) -> tuple[Callable[[Any], Any], Callable[[Any], None]]:
        """(make_state, call) for ``graph.Captured``.

        Args:
            copies: > 1 rotates copies of the module's weights, so that each call reads them
                from memory, not from L2.
            input_copies: > 1 rotates copies of the call's inputs (activations) the same way;
                1 re-reads the same inputs every call.
        """
        args, kwargs = self.args, self.kwargs
        input_copies = max(1, input_copies)

        def make_inputs(dev) -> list:
            return [(materialize(args, dev), materialize(kwargs, dev)) for _ in range(input_copies)]

        if self.kind == "op":
            op = self.op

            def make_state(dev):
                return make_inputs(dev), [0]

            def call(state):
                inputs, turn = state
                a, k = inputs[turn[0] % len(inputs)]
                op(*a, **k)
                turn[0] += 1

            return make_state, call

        module = self.module

        def make_module_state(dev):
            modules = [module] + [clone_module(module) for _ in range(copies - 1)]
            return modules, make_inputs(dev), [0]

        def call_module(state):
            modules, inputs, turn = state
            a, k = inputs[turn[0] % len(inputs)]
            modules[turn[0] % len(modules)](*a, **k)
            turn[0] += 1

        return make_module_state, call_module


def clone_module(module):
    """A copy of ``module`` with storage of its own for every parameter and buffer.

    A module tree that keeps its tensors only as parameters and buffers (torchvision's, timm's,
    transformers' layers) is copied module by module: each module shallowly, its parameters and
    buffers cloned. That is what ``copy.deepcopy`` gives, at half its Python cost or less: the
    per-layer weight rotation makes up to 64 copies of each unit (``graph.copies_for``), and a
    resnet50 per-layer run's unit capture took 0.7-0.95 s instead of 1.76 s on an H100. Any other
    module tree (a tensor kept as a plain attribute, a module with its own ``__deepcopy__``) is
    deep-copied."""
    import torch

    if not _plain_tree(module, torch):
        return copy.deepcopy(module)
    done: dict[int, Any] = {}

    def clone(m):
        if id(m) in done:  # a module used twice stays one module in the copy
            return done[id(m)]
        new = object.__new__(type(m))
        # containers (the hook dictionaries) shallowly copied, so that the copies share none
        new.__dict__ = {k: v.copy() if isinstance(v, (dict, list, set)) else v for k, v in vars(m).items()}
        done[id(m)] = new
        new._parameters = {k: None if v is None else clone_tensor(v, True) for k, v in m._parameters.items()}
        new._buffers = {k: None if v is None else clone_tensor(v, False) for k, v in m._buffers.items()}
        new._modules = {k: None if c is None else clone(c) for k, c in m._modules.items()}
        return new

    tensors: dict[int, Any] = {}

    def clone_tensor(t, parameter: bool):  # one shared by two modules (tied weights) stays shared
        if id(t) not in tensors:
            data = t.detach().clone()
            tensors[id(t)] = torch.nn.Parameter(data, requires_grad=t.requires_grad) if parameter else data
        return tensors[id(t)]

    return clone(module)


def _plain_tree(module, torch) -> bool:
    """Whether every module under ``module`` keeps its tensors as parameters and buffers only
    and copies the default way."""
    default = getattr(torch.nn.Module, "__deepcopy__", None)
    return all(_plain_module(m, torch, default) for m in module.modules())


def _plain_module(m, torch, default_deepcopy) -> bool:
    """Whether one module copies the default way, holds exact ``Parameter``s and ``Tensor``s as
    its parameters and buffers, and no tensor in any other attribute."""
    if getattr(type(m), "__deepcopy__", None) is not default_deepcopy:
        return False
    if any(v is not None and type(v) is not torch.nn.Parameter for v in m._parameters.values()):
        return False
    if any(v is not None and type(v) is not torch.Tensor for v in m._buffers.values()):
        return False
    return not _tensor_attribute(m, torch)


def _tensor_attribute(m, torch) -> bool:
    """Whether an attribute of the module other than its parameters, buffers and submodules
    holds a tensor (itself, or as an item of a list, tuple or dict)."""
    for key, value in vars(m).items():
        if key in ("_parameters", "_buffers", "_modules"):
            continue
        if isinstance(value, torch.Tensor) or (
            isinstance(value, (list, tuple, dict)) and _holds_tensor(value, torch)
        ):
            return True
    return False


def _holds_tensor(value, torch) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return any(isinstance(v, torch.Tensor) for v in items)


@dataclass
class Decomposition:
    """The units of a model in execution order (deduplicated), and how they were found."""

    units: list[Unit]
    granularity: str
    without_kernels: list[str] = field(default_factory=list)  # calls that launched nothing
    #: ops between units whose results only the host read (``.item()``, ``bool(t)``): checks a
    #: model makes in eager mode and skips under a CUDA graph's capture (transformers does), left out
    host_checks: list[str] = field(default_factory=list)

    @property
    def calls(self) -> int:
        """Unit calls in one forward pass, before deduplication."""
        return sum(u.count for u in self.units)

    @property
    def deduplicated(self) -> int:
        """Calls measured through an identical unit instead of on their own."""
        return self.calls - len(self.units)

    @property
    def single_kernel_calls(self) -> int:
        """Calls, in the forward that was run, of units that launch one kernel-launching op: in
        their own CUDA graph they repeat one kernel back to back."""
        return sum(u.measured_calls for u in self.units if u.kernels == 1)

    def repeat(self, prefix: str, times: int) -> None:
        """Count every call under ``prefix`` ``times`` times: a model built with one of N
        identical layers (OPT-66B's 64 decoder layers) is measured once and counted N times."""
        for unit in self.units:
            extra = [p for p in unit.paths if p == prefix or p.startswith(prefix + ".")]
            unit.paths += [f"{p}[{i}]" for i in range(1, times) for p in extra]


def _module_units(model, granularity: str, blocks: Iterable[str]) -> dict:
    """Which modules are measured as a whole: leaves, or blocks plus the leaves outside them."""
    blocks = set(blocks)
    units = {}

    def visit(module, path: str) -> None:
        children = list(module.named_children())
        is_block = granularity == "block" and type(module).__name__ in blocks
        if is_block or not children:
            units[id(module)] = path
            return
        for name, child in children:
            visit(child, f"{path}.{name}" if path else name)

    visit(model, "")
    return units


def decompose(  # noqa: C901 (counts its nested hooks and dispatch mode, which share one unit stack)
    model,
    args: Sequence[Any],
    kwargs: dict | None = None,
    granularity: str = "leaf",
    blocks: Iterable[str] = (),
    as_captured: bool = False,
) -> Decomposition:
    """Run ``model(*args, **kwargs)`` once and return its units with their exact inputs.

    Args:
        model: any module (on any device, ``meta`` included: shapes are all that is needed).
        granularity: ``leaf`` (leaf modules and the ops between them) or ``block`` (modules whose
            class name is in ``blocks``, the leaves outside them, and the ops between).
        as_captured: record the forward as a CUDA graph's capture runs it
            (``capture_view.seen_as_captured``): what the units and the whole model run when
            they are measured as graphs. Without it a library that checks on the host when no
            stream captures (transformers' masks) may record other inputs than the graphs see.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from .capture_view import seen_as_captured

    if granularity not in ("leaf", "block"):
        raise ValueError(f"granularity must be leaf or block, not {granularity!r}")
    unit_paths = _module_units(model, granularity, blocks)
    all_paths = {id(m): name or type(model).__name__ for name, m in model.named_modules()}
    calls: list[Unit] = []
    stack: list[str] = []  # every module currently running
    inside_unit = [0]
    open_unit: list[Unit] = []
    handles = []

    muted = [False]  # while a hook reads its arguments (encode: min, max, sum): not the model's ops

    def pre(module, a, k):
        stack.append(all_paths[id(module)])
        if id(module) in unit_paths:
            if inside_unit[0] == 0:
                muted[0] = True
                try:
                    calls.append(_module_call(module, all_paths[id(module)], a, k))
                finally:
                    muted[0] = False
                open_unit.append(calls[-1])
            inside_unit[0] += 1

    def post(module, a, k, out):
        stack.pop()
        if id(module) in unit_paths:
            inside_unit[0] -= 1
            if inside_unit[0] == 0:
                open_unit.pop()

    for module in model.modules():
        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))

    uses = _GlueUses()

    class Glue(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), k=None):
            k = k or {}
            out = func(*a, **k)
            if muted[0]:
                return out
            name = str(func.overloadpacket)
            free = is_free(name) or getattr(func, "is_view", False)
            if inside_unit[0] and not free:
                open_unit[-1].kernels += 1
            if name in HOST_READS:
                uses.consumed(a, k, HOST)
            elif free:
                uses.aliased(a, k, out)  # a view or a no-op conversion of a result is that result
            elif inside_unit[0]:
                uses.consumed(a, k, DEVICE)
            else:
                parent = stack[-1] if stack else type(model).__name__
                calls.append(_op_call(func, name, parent, a, k))
                uses.consumed(a, k, calls[-1])
                uses.produced(out, calls[-1])
            return out

    try:
        with torch.no_grad(), seen_as_captured(as_captured), Glue():
            output = model(*args, **(kwargs or {}))
        uses.consumed((output,), {}, DEVICE)
    finally:
        for handle in handles:
            handle.remove()

    return _deduplicated(calls, uses.host_only(), granularity)


def _deduplicated(calls: list[Unit], host_checks: set[int], granularity: str) -> Decomposition:
    """The calls as units: identical ones counted once, calls that launched no kernel and host
    checks (ids in ``host_checks``) left out and listed."""
    units: dict[Any, Unit] = {}
    for call in calls:
        if call.kernels == 0 or id(call) in host_checks:  # Dropout in eval: nothing to measure
            continue
        unit = units.get(call.key)
        if unit is None:
            units[call.key] = unit = call
        unit.paths.append(call.path)
    skipped = sorted({c.path for c in calls if c.kernels == 0})
    checks = [c.path for c in calls if id(c) in host_checks]
    return Decomposition(list(units.values()), granularity, skipped, checks)


def _module_call(module, path: str, a: Any, k: Any) -> Unit:
    """A call of a unit module with its exact inputs (encoding reads integer and boolean ones)."""
    params = list(module.parameters()) + list(module.buffers())
    encoded_a, encoded_k = encode(a), encode(k)  # each reads its integer and boolean tensors once
    key = (
        "module",
        type(module).__name__,
        module.extra_repr(),
        tuple((tuple(p.shape), str(p.dtype)) for p in params),
        _freeze(encoded_a),
        _freeze(encoded_k),
    )
    return Unit(
        path=path,
        kind="module",
        type_name=type(module).__name__,
        args=encoded_a,
        kwargs=encoded_k,
        key=key,
        module=module,
        params_bytes=sum(p.numel() * p.element_size() for p in params),
    )


def _op_call(func: Any, name: str, parent: str, a: Any, k: Any) -> Unit:
    """A call of an op between units with its exact inputs."""
    encoded_a, encoded_k = encode(a), encode(k)
    return Unit(
        path=f"{parent}.({name.removeprefix('aten.')})",
        kind="op",
        type_name=name,
        args=encoded_a,
        kwargs=encoded_k,
        key=("op", str(func), _freeze(encoded_a), _freeze(encoded_k)),
        op=func,
        kernels=1,
    )


#: ops through which the host reads a tensor's value (``.item()``, ``bool(t)``, ``torch.equal``)
HOST_READS = frozenset({"aten._local_scalar_dense", "aten.is_nonzero", "aten.equal"})


def _tensors(value: Any) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return _output_tensors(value)


def _output_tensors(value: Any) -> list:
    """The tensors of a model's output object: its logits, its last hidden state, and what its
    ``to_tuple()`` holds (none for any other value)."""
    out = []
    for attribute in ("logits", "last_hidden_state"):
        v = getattr(value, attribute, None)
        if v is not None:
            out += _tensors(v)
    if hasattr(value, "to_tuple"):
        out += _tensors(value.to_tuple())
    return out


#: who used a result of an op between units, besides another such op
HOST, DEVICE = "host", "device"


class _GlueUses:
    """Who used each result of an op between units: a later op between units, an op inside a
    unit or the model's output (the device), or the host (a value read). Tensors are held weakly:
    an id is checked against its tensor, so a freed tensor's reused id is not taken for it."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[Any, Unit]] = {}  # id(tensor) -> (weakref, producing call)
        self._users: dict[int, list[Any]] = {}  # id(call) -> [a later call, HOST or DEVICE]
        self._order: list[Unit] = []

    def produced(self, out: Any, call: Unit) -> None:
        self._users.setdefault(id(call), [])
        self._order.append(call)
        self._remember(out, call)

    def aliased(self, a: Sequence[Any], k: dict, out: Any) -> None:
        sources = [c for c in (self._call_of(t) for t in _tensors(list(a)) + _tensors(k)) if c is not None]
        if sources:
            self._remember(out, sources[0])

    def consumed(self, a: Sequence[Any], k: dict, user: Any) -> None:
        for t in _tensors(list(a)) + _tensors(k):
            call = self._call_of(t)
            if call is not None and call is not user:
                self._users[id(call)].append(user)

    def host_only(self) -> set[int]:
        """ids of the calls whose results reached the host only (read there), directly or
        through other such calls."""
        only: set[int] = set()
        for call in reversed(self._order):  # users come after the calls they use
            users = self._users[id(call)]
            if users and all(u == HOST or (isinstance(u, Unit) and id(u) in only) for u in users):
                only.add(id(call))
        return only

    def _remember(self, out: Any, call: Unit) -> None:
        import weakref

        for t in _tensors(out):
            self._made[id(t)] = (weakref.ref(t), call)

    def _call_of(self, t: Any) -> Unit | None:
        entry = self._made.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None
