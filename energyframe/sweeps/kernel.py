"""A CUDA kernel loaded from a ``.cu`` file, and its launch configurations.

``load_kernel`` reads the signature from the source (no GPU needed); ``CudaKernel.configure``
turns one point of a sweep into a concrete launch: grid, block, shared memory, every pointer's
shape and dtype and every scalar's value. Compiling and launching are in ``runtime.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .signature import Param, Signature, parse_signature
from .space import as_function

Dim3 = tuple[int, int, int]
#: compiler options every kernel gets (the user's are added after them)
BASE_OPTIONS = ("-std=c++17",)
#: the default block by the rank of the first output: 1-D outputs get a 1-D block (a 2-D block
#: would have threads along y with no elements there: each element computed by 16 threads)
DEFAULT_BLOCK_1D: Dim3 = (256, 1, 1)
DEFAULT_BLOCK_2D: Dim3 = (16, 16, 1)
#: CUDA's largest grid, blocks along x, y, z (every GPU since compute capability 3.0)
MAX_GRID = (2**31 - 1, 65535, 65535)
#: CUDA's largest block, threads along x, y, z, and in all (every GPU since compute capability 2.0)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
#: a configuration whose arrays take more than this is probably a typo (warned, before allocating)
LARGE_ARRAYS_BYTES = 32 * 2**30
#: a grid of more blocks than this is probably a typo (warned)
LARGE_GRID_BLOCKS = 2**31


def dim3(value: Any, what: str) -> Dim3:
    """(x, y, z) from an int or a sequence of 1 to 3 positive ints."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be up to three positive integers, got {value!r}") from None
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims) or any(d != v for d, v in zip(dims, value)):
        raise UsageError(f"{what} must be up to three positive integers, got {value!r}")
    return (dims + (1, 1))[:3]  # type: ignore[return-value]


def block_dim3(value: Any, what: str) -> Dim3:
    """A block: ``dim3`` within CUDA's limits (1024 threads in all; x, y <= 1024, z <= 64), which
    no GPU launches beyond."""
    block = dim3(value, what)
    if any(b > m for b, m in zip(block, MAX_BLOCK)) or math.prod(block) > MAX_THREADS_PER_BLOCK:
        raise UsageError(
            f"{what} {'x'.join(map(str, block))} is {math.prod(block)} threads: CUDA takes at most "
            f"{MAX_THREADS_PER_BLOCK} threads per block, at most {'x'.join(map(str, MAX_BLOCK))} along x, y, z"
        )
    return block


def parse_dim3(text: str) -> Dim3:
    """``16,16`` or ``16x16x1`` -> (16, 16, 1), a block within CUDA's limits."""
    parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise UsageError(f"block {text!r}: expected up to three integers, e.g. 16,16,1") from None
    return block_dim3(numbers, f"block {text!r}:")


@dataclass(frozen=True)
class Launch:
    """One concrete launch of a kernel: everything needed to allocate its arguments and run it.

    ``shapes`` holds every pointer's shape (elements), ``scalars`` every scalar's value.
    """

    grid: Dim3
    block: Dim3
    shared_mem_bytes: int
    shapes: Mapping[str, tuple[int, ...]]
    scalars: Mapping[str, Any]
    #: what looks wrong about this launch, found before anything is allocated
    warnings: tuple[str, ...] = ()
    #: bytes of every pointer argument together
    array_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "grid": list(self.grid),
            "block": list(self.block),
            "shared_mem_bytes": self.shared_mem_bytes,
            "shapes": {k: list(v) for k, v in self.shapes.items()},
            "scalars": dict(self.scalars),
        }


@dataclass(frozen=True)
class CudaKernel:
    """A ``__global__`` function of a CUDA source file, with how to launch it.

    Build it with ``load_kernel``. ``label`` names it in results (the kernel's name unless two
    loaded kernels share it). ``blocks`` empty: the default block, chosen by the rank of the
    first output (``DEFAULT_BLOCK_1D`` for a 1-D output, else ``DEFAULT_BLOCK_2D``).
    """

    source_path: Path
    source: str
    signature: Signature
    blocks: tuple[Dim3, ...]
    grid: Any = None
    shapes: Any = None
    shared_mem: Any = 0
    args: Mapping[str, Any] = field(default_factory=dict)
    output_names: tuple[str, ...] = ()
    inout_names: tuple[str, ...] = ()
    compile_options: tuple[str, ...] = BASE_OPTIONS
    label: str = ""
    inputs: Callable[..., Mapping[str, Any]] | None = None

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def outputs(self) -> tuple[Param, ...]:
        """The pointers compared with the reference: those named in ``outputs=``, else the
        non-const pointers, else (no pointer is const) the last pointer."""
        pointers = self.signature.pointers
        if self.output_names:
            return tuple(p for p in pointers if p.name in self.output_names)
        return self.signature.outputs or pointers[-1:]

    @property
    def inouts(self) -> tuple[Param, ...]:
        """Outputs the kernel also reads (``y = a*x + y``): random like inputs, not poisoned, and
        given to the reference as inputs (their values before the launch)."""
        return tuple(p for p in self.outputs if p.name in self.inout_names)

    def blocks_for(self, point: Mapping[str, Any]) -> tuple[Dim3, ...]:
        """The blocks swept at ``point``: those given, else the default for the output's rank."""
        if self.blocks:
            return self.blocks
        return (self.default_block(point),)

    def default_block(self, point: Mapping[str, Any]) -> Dim3:
        """``DEFAULT_BLOCK_1D`` when the first output is one-dimensional, else ``DEFAULT_BLOCK_2D``."""
        outputs = self.outputs
        if not outputs:
            return DEFAULT_BLOCK_2D
        try:
            shape = self._shapes({**self.args, **point})[outputs[0].name]
        except UsageError:
            return DEFAULT_BLOCK_2D  # configure() reports the error
        return DEFAULT_BLOCK_1D if len(shape) <= 1 else DEFAULT_BLOCK_2D

    @property
    def size_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.signature.scalars if not p.floating)

    def describe(self) -> str:
        """The parsed signature with what is taken as output, one line."""
        inouts = {p.name for p in self.inouts}
        outs = ", ".join(p.name + (" (in-out)" if p.name in inouts else "") for p in self.outputs) or "none"
        return f"{self.label}: {self.signature}  [outputs: {outs}]"

    # -- one configuration --------------------------------------------------------------------
    def scalar_values(self, point: Mapping[str, Any]) -> dict[str, Any]:
        values = {}
        for p in self.signature.scalars:
            if p.name in point:
                values[p.name] = point[p.name]
            elif p.name in self.args:
                values[p.name] = self.args[p.name]
            else:
                raise UsageError(
                    f"{self.label}: scalar parameter {p.name!r} has no value: sweep it (-p {p.name}=...) "
                    f"or fix it (args={{'{p.name}': ...}} / --arg {p.name}=...)"
                )
        return values

    def _shapes(self, values: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        given = self._given_shapes(values)
        unknown = set(given) - {p.name for p in self.signature.pointers}
        if unknown:
            raise UsageError(
                f"{self.label}: shapes given for {sorted(unknown)}, which are not pointer parameters"
            )
        default = self.default_numel(values)
        shapes: dict[str, tuple[int, ...]] = {}
        for p in self.signature.pointers:
            spec = given.get(p.name)
            if spec is None:
                shapes[p.name] = self._default_shape(p.name, default, values)
            else:
                shapes[p.name] = self._given_shape(p.name, spec, values)
        return shapes

    def _given_shapes(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The shapes ``shapes=`` gives at these values, by pointer, not yet checked: a function
        of the values returning them all, or one shape (or function) per pointer."""
        if callable(self.shapes):
            return dict(as_function(self.shapes)(values) or {})
        given: dict[str, Any] = {}
        for name, spec in (self.shapes or {}).items():
            given[name] = as_function(spec)(values) if callable(spec) else spec
        return given

    def _given_shape(self, name: str, spec: Any, values: Mapping[str, Any]) -> tuple[int, ...]:
        """A given shape's dimensions (a single int or expression is one dimension).

        Raises:
            UsageError: a dimension under 1, or no dimension.
        """
        if isinstance(spec, (int, str)):
            spec = (spec,)
        dims = tuple(int(_value(d, values)) for d in spec)
        if not dims or any(d < 1 for d in dims):
            raise UsageError(f"{self.label}: shape of {name!r} must be positive, got {dims}")
        return dims

    def _default_shape(self, name: str, default: int | None, values: Mapping[str, Any]) -> tuple[int]:
        """The flat shape of a pointer whose shape is not given (``default_numel``)."""
        if default is None:
            raise UsageError(
                f"{self.label}: no integer size parameter to size {name!r} from: give its shape "
                f"(shapes={{'{name}': ...}} / --shape {name}=...)"
            )
        if default < 1:  # a negative or zero size: an empty array and an empty grid
            sizes = ", ".join(f"{n}={values[n]}" for n in self.size_names if n in values)
            raise UsageError(
                f"{self.label}: {name!r} is sized from {sizes}, which gives {default} elements; "
                "sizes must be positive"
            )
        return (default,)

    def default_numel(self, values: Mapping[str, Any]) -> int | None:
        """Elements of a pointer whose shape is not given: the largest product of two integer
        size parameters (N*M, N*K, K*M for a matrix product), or the one size there is."""
        sizes = [int(values[n]) for n in self.size_names if n in values]
        if not sizes:
            return None
        if len(sizes) == 1:
            return sizes[0]
        return max(a * b for i, a in enumerate(sizes) for b in sizes[i + 1 :])

    def _grid(self, values: Mapping[str, Any], block: Dim3, shapes) -> Dim3:
        if self.grid is not None:
            with_block = {**values, "block": block, "bx": block[0], "by": block[1], "bz": block[2]}
            spec = self.grid
            grid = as_function(spec)(with_block) if callable(spec) or isinstance(spec, str) else spec
            return dim3(grid, f"{self.label}: grid")
        outputs = self.outputs
        if not outputs:
            raise UsageError(f"{self.label}: no output to cover with the default grid: give grid=")
        shape = shapes[outputs[0].name]
        bx, by, bz = block
        if by == 1 and bz == 1:
            return (-(-math.prod(shape) // bx), 1, 1)
        if bz == 1:
            return (-(-shape[-1] // bx), -(-math.prod(shape[:-1]) // by), 1)
        rest = math.prod(shape[:-2]) if len(shape) > 2 else 1
        return (-(-shape[-1] // bx), -(-(shape[-2] if len(shape) > 1 else 1) // by), -(-rest // bz))

    def configure(self, point: Mapping[str, Any], block: Dim3) -> Launch:
        """The launch of this kernel at ``point`` with ``block``.

        Raises:
            UsageError: a scalar without a value, a shape or grid that cannot be computed, a grid
                over CUDA's limits.
        """
        values = {**self.args, **point}
        scalars = self.scalar_values(point)
        shapes = self._shapes(values)
        grid = self._grid(values, block, shapes)
        if any(g > m for g, m in zip(grid, MAX_GRID)):
            raise UsageError(
                f"{self.label}: grid {'x'.join(map(str, grid))} exceeds CUDA's limit of "
                f"{'x'.join(map(str, MAX_GRID))} blocks"
            )
        shared = self.shared_mem
        if callable(shared) or isinstance(shared, str):
            shared = as_function(shared)({**values, "block": block})
        if int(shared) < 0:
            raise UsageError(f"{self.label}: shared memory must not be negative, got {shared}")
        sizes = {p.name: math.prod(shapes[p.name]) * p.itemsize for p in self.signature.pointers}
        warnings = self._idle_threads(block, grid, shapes) + _too_large(self.label, grid, sizes)
        return Launch(grid, block, int(shared), shapes, scalars, tuple(warnings), sum(sizes.values()))

    def _idle_threads(self, block: Dim3, grid: Dim3, shapes) -> list[str]:
        """A block dimension with threads but no grid extent and no output extent behind it: the
        kernel likely computes each element once per thread along it."""
        outputs = self.outputs
        if not outputs or block[1:] == (1, 1):
            return []
        name = outputs[0].name
        shape = shapes[name]
        if block[2] == 1:
            extents = (shape[-1], math.prod(shape[:-1]), 1)
        else:
            extents = (shape[-1], shape[-2] if len(shape) > 1 else 1, math.prod(shape[:-2]))
        out = []
        for axis, b, g, e in zip("xyz", block, grid, extents):
            if b > 1 and g == 1 and e == 1:
                hint = f"; use a 1-D block (--block {math.prod(block)})" if len(shape) == 1 else ""
                out.append(
                    f"{self.label}: block {'x'.join(map(str, block))} has {b} threads along {axis}, but "
                    f"neither the grid nor the output {name}{list(shape)} extends along {axis}: each "
                    f"element may be computed {b} times ({b}x the work, a race if the kernel reads what "
                    f"it writes){hint}"
                )
        return out


def _too_large(label: str, grid: Dim3, sizes: Mapping[str, int]) -> list[str]:
    out = []
    blocks = math.prod(grid)
    if blocks > LARGE_GRID_BLOCKS:
        out.append(f"{label}: grid {'x'.join(map(str, grid))} is {blocks:.3g} blocks: is a size wrong?")
    total = sum(sizes.values())
    if total > LARGE_ARRAYS_BYTES:
        largest = ", ".join(
            f"{k} {v / 2**30:.3g} GiB" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        )
        out.append(f"{label}: the arguments take {total / 2**30:.3g} GiB ({largest}): is a size wrong?")
    return out


def _value(dim: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(dim, str):
        return as_function(dim)(values)
    return dim


def load_kernel(
    source: str | Path,
    name: str,
    block: Sequence[int] | Sequence[Sequence[int]] | int | None = None,
    grid: Any = None,
    shapes: Any = None,
    shared_mem: Any = 0,
    args: Mapping[str, Any] | None = None,
    outputs: Sequence[str] = (),
    options: Sequence[str] = (),
    label: str | None = None,
    inputs: Callable[..., Mapping[str, Any]] | None = None,
    inouts: Sequence[str] = (),
) -> CudaKernel:
    """Load the ``__global__`` function ``name`` of a ``.cu`` file (read now, compiled on first
    launch, with the compiled binary cached on disk).

    Args:
        source: path of the ``.cu`` file.
        name: the kernel's name; templates are refused (wrap an instantiation in a plain kernel).
        block: threads per block, (x, y, z); a list of blocks sweeps them. Default: 256 threads
            along x for a one-dimensional output, 16 x 16 otherwise.
        grid: blocks per grid: a tuple, a function of the sweep's parameters (and ``block``,
            ``bx``, ``by``, ``bz``), or an expression such as ``"cdiv(M, bx), cdiv(N, by)"``.
            Default: one thread per element of the first output, x along its last dimension.
        shapes: per pointer, a shape (ints or parameter expressions: ``{"a": ("N", "K")}``) or a
            function of the parameters returning such a dict. Default: a flat array of the
            largest product of two integer size parameters.
        shared_mem: dynamic shared memory per block in bytes (an int, a function or an expression).
        args: fixed values of scalar parameters that are not swept (``{"alpha": 1.0}``).
        outputs: pointer parameters the kernel writes. Default: the non-const pointers.
        options: extra NVRTC options (``-DTILE=32``, ``--use_fast_math``).
        label: the name in results (default: ``name``).
        inputs: a function of the parameters (and ``device``) returning tensors for some or all
            pointer parameters, replacing the random default inputs.
        inouts: outputs the kernel also reads (``y[i] = a*x[i] + y[i]``): filled with random
            values instead of poison, and given to the reference as inputs.
    """
    path = Path(source)
    text = _read_source(path)
    signature = parse_signature(text, name)
    blocks = _blocks(block, name)
    _check_pointers(name, signature, outputs=outputs, inouts=inouts)
    kernel = CudaKernel(
        source_path=path,
        source=text,
        signature=signature,
        blocks=blocks,
        grid=grid,
        shapes=shapes,
        shared_mem=shared_mem,
        args=dict(args or {}),
        output_names=tuple(dict.fromkeys([*outputs, *inouts])) if outputs else (),
        inout_names=tuple(inouts),
        compile_options=BASE_OPTIONS + tuple(options),
        label=label or name,
        inputs=inputs,
    )
    written = {p.name for p in kernel.outputs}
    if not set(inouts) <= written:
        raise UsageError(
            f"{name}: inouts {sorted(set(inouts) - written)} are not outputs (outputs: "
            f"{', '.join(sorted(written)) or 'none'}); a const pointer cannot be written"
        )
    return kernel


def _read_source(path: Path) -> str:
    """The text of a ``.cu`` file.

    Raises:
        UsageError: unreadable, or not UTF-8 (naming the first bad byte).
    """
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as e:
        raise UsageError(f"cannot read the kernel source {str(path)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(
            f"the kernel source {str(path)!r} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
            f"{e.start}); save it as UTF-8"
        ) from None


def _blocks(block: Sequence[int] | Sequence[Sequence[int]] | int | None, name: str) -> tuple[Dim3, ...]:
    """The blocks to sweep: none (the default block) for ``None``, one for an int or a tuple of
    ints, else each one of a list.

    Raises:
        UsageError: an empty list, or a block that is not a valid dim3.
    """
    if block is None:
        return ()
    if isinstance(block, int) or (block and isinstance(block[0], int)):
        return (block_dim3(block, f"{name}: block"),)
    blocks = tuple(block_dim3(b, f"{name}: block") for b in block)
    if not blocks:
        raise UsageError(f"{name}: give at least one block")
    return blocks


def _check_pointers(
    name: str, signature: Signature, *, outputs: Sequence[str], inouts: Sequence[str]
) -> None:
    """Refuse outputs or in-outs that are not pointer parameters of the kernel."""
    pointers = {p.name for p in signature.pointers}
    unknown = set(outputs) - pointers
    if unknown:
        raise UsageError(f"{name}: outputs {sorted(unknown)} are not pointer parameters of {signature}")
    unknown = set(inouts) - pointers
    if unknown:
        raise UsageError(f"{name}: inouts {sorted(unknown)} are not pointer parameters of {signature}")
