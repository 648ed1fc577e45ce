"""The parameter space of a sweep: the Cartesian product of the given values, filtered by a
constraint, split into shards; and the small arithmetic expressions the CLI takes for grids,
shapes, constraints and work counts (``cdiv(M, 16)``, ``N == M``, ``2*N*M*K``).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import UsageError

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "cdiv": lambda a, b: -(-a // b),
    "ceil": math.ceil,
    "floor": math.floor,
    "min": min,
    "max": max,
    "abs": abs,
    "log2": math.log2,
}


def evaluate(text: str, names: Mapping[str, Any]) -> Any:
    """Evaluate an arithmetic expression over ``names`` (numbers, + - * / // % ** << >>,
    comparisons, and/or/not, and ``cdiv ceil floor min max abs log2``); nothing else runs."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise UsageError(f"cannot parse the expression {text!r}: {e.msg}") from None

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise UsageError(f"{text!r}: unknown name {node.id!r}; known: {', '.join(sorted(names))}")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            value = ev(node.operand)
            if isinstance(node.op, ast.USub):
                return -value
            return not value if isinstance(node.op, ast.Not) else value
        if isinstance(node, ast.BoolOp):
            values = [ev(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
            if node.keywords:
                raise UsageError(f"{text!r}: {node.func.id}() takes positional arguments only")
            return FUNCTIONS[node.func.id](*(ev(a) for a in node.args))
        if isinstance(node, ast.Tuple):
            return tuple(ev(e) for e in node.elts)
        raise UsageError(f"{text!r}: {ast.unparse(node)!r} is not allowed in an expression")

    return ev(tree)


def call_with(fn: Callable[..., Any], values: Mapping[str, Any]) -> Any:
    """Call ``fn`` with the entries of ``values`` it takes by name (all of them if it takes
    ``**kwargs``); a parameter it needs that ``values`` lacks is a clear error."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(**values)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(**values)
    missing = [
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL,)
        and n not in values
    ]
    if missing:
        raise UsageError(
            f"{getattr(fn, '__name__', fn)!r} needs {', '.join(missing)}; the configuration has "
            f"{', '.join(values)}"
        )
    return fn(**{n: values[n] for n in params if n in values})


def as_function(spec: str | Callable[..., Any] | None) -> Callable[[Mapping[str, Any]], Any] | None:
    """A callable of a configuration's values from an expression string or a Python callable."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return lambda values: evaluate(spec, values)
    if callable(spec):
        return lambda values: call_with(spec, values)
    return lambda values: spec


def parse_values(text: str) -> tuple[str, list[Any]]:
    """``N=512,1024,2048`` -> ("N", [512, 1024, 2048]); ``N=2**9..2**12`` doubles from 512 to 4096."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier() or not rest.strip():
        raise UsageError(f"-p {text!r}: expected NAME=V1,V2,... (or NAME=LO..HI for powers of two)")
    if ".." in rest:
        lo, hi = (evaluate(part, {}) for part in rest.split("..", 1))
        if not (isinstance(lo, int) and isinstance(hi, int) and 0 < lo <= hi):
            raise UsageError(f"-p {text!r}: LO..HI needs integers 0 < LO <= HI")
        values, v = [], lo
        while v <= hi:
            values.append(v)
            v *= 2
        return name, values
    return name, [evaluate(part, {}) for part in rest.split(",") if part.strip()]


def expand(
    params: Mapping[str, Sequence[Any]], where: Callable[[Mapping[str, Any]], Any] | None = None
) -> list[dict[str, Any]]:
    """Every combination of the values, in a stable order: the first parameter varies slowest,
    each parameter's values in the order given; combinations ``where`` rejects are left out."""
    for name, values in params.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise UsageError(f"parameter {name!r}: give a non-empty list of values, got {values!r}")
    names = list(params)
    points = [dict(zip(names, combo)) for combo in itertools.product(*(params[n] for n in names))]
    if where is not None:
        points = [p for p in points if where(p)]
    return points


def parse_shard(text: str | Sequence[int] | None) -> tuple[int, int] | None:
    """``"2/8"`` -> (2, 8): the third of eight shards (0-based, as Slurm's array task ids)."""
    if text is None:
        return None
    if isinstance(text, str):
        index, sep, count = text.partition("/")
        try:
            shard = (int(index), int(count))
        except ValueError:
            raise UsageError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
        if not sep:
            raise UsageError(f"--shard {text!r}: expected I/N, e.g. 0/4")
    else:
        shard = (int(text[0]), int(text[1]))
    if not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise UsageError(f"shard {shard[0]}/{shard[1]}: need 0 <= I < N")
    return shard


def in_shard(point_index: int, shard: tuple[int, int] | None) -> bool:
    """Shard I of N holds every N-th parameter point from the I-th on (all kernels and blocks
    of a point stay together, so they are compared on the same inputs)."""
    return shard is None or point_index % shard[1] == shard[0]
