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
from typing import Any, overload

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


#: the largest magnitude an expression may reach (sizes, grids and work counts are far below it)
MAX_MAGNITUDE = 2**64
#: the largest exponent of ``**`` and shift of ``<<``
MAX_EXPONENT = 64
#: the longest expression text (deeper nesting than this is a typo, not a grid)
MAX_LENGTH = 500


def _number(value: Any, text: str, what: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{text!r}: {what} needs numbers, got {value!r}")
    return value


def _bounded(value: Any, text: str) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and math.isnan(value):
            raise UsageError(f"{text!r}: the result is not a number")
        if abs(value) > MAX_MAGNITUDE:
            raise UsageError(
                f"{text!r}: a value of the expression exceeds 2**64 (got {_short(value)}); "
                "sizes, grids and work counts are far smaller"
            )
    return value


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return f"~1e{len(str(abs(value))) - 1}" if abs(value) >= 10**12 else str(value)


def _binary(op: ast.operator, left: Any, right: Any, text: str) -> Any:
    name = type(op).__name__.lower()
    _number(left, text, f"'{name}'")
    _number(right, text, f"'{name}'")
    if isinstance(op, ast.Pow) and abs(right) > MAX_EXPONENT:
        raise UsageError(f"{text!r}: exponent {_short(right)} is too large (at most {MAX_EXPONENT})")
    if isinstance(op, (ast.LShift, ast.RShift)) and not 0 <= right <= MAX_EXPONENT:
        raise UsageError(f"{text!r}: shift by {_short(right)}: shifts go from 0 to {MAX_EXPONENT}")
    try:
        return _BINARY[type(op)](left, right)
    except ZeroDivisionError:
        raise UsageError(f"{text!r}: division by zero") from None
    except (OverflowError, TypeError, ValueError) as e:
        raise UsageError(f"{text!r}: {e}") from None


def evaluate(text: str, names: Mapping[str, Any]) -> Any:  # noqa: C901 (counts its nested evaluator ev, one branch per allowed node type)
    """Evaluate an arithmetic expression over ``names`` (numbers, + - * / // % ** << >>,
    comparisons, and/or/not, and ``cdiv ceil floor min max abs log2``); nothing else runs.

    Bounded: exponents and shifts up to 64, every intermediate value within 2**64, the text
    at most 500 characters; anything else is a ``UsageError`` (``10**10**10`` does not hang).
    """
    text = str(text)
    if len(text) > MAX_LENGTH:
        raise UsageError(f"expression {text[:40]!r}... is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise UsageError(f"cannot parse the expression {text!r}: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise UsageError(f"cannot parse the expression {text!r}: nested too deeply") from None

    def ev(node: ast.AST) -> Any:  # noqa: C901 (recursive evaluator: one branch per allowed AST node type)
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
            return _bounded(node.value, text)
        if isinstance(node, ast.Name):
            if node.id not in names:
                if not names:
                    raise UsageError(
                        f"{text!r}: {node.id!r} is not a number (only numbers and arithmetic are "
                        "allowed here, e.g. 512 or 2**10)"
                    )
                raise UsageError(f"{text!r}: unknown name {node.id!r}; known: {', '.join(sorted(names))}")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _bounded(_binary(node.op, ev(node.left), ev(node.right), text), text)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            value = ev(node.operand)
            if isinstance(node.op, ast.Not):
                return not value
            _number(value, text, "a sign")
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BoolOp):
            values = [ev(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = ev(right_node)
                try:
                    if not _COMPARE[type(op)](left, right):
                        return False
                except TypeError as e:
                    raise UsageError(f"{text!r}: {e}") from None
                left = right
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
            if node.keywords:
                raise UsageError(f"{text!r}: {node.func.id}() takes positional arguments only")
            args = [ev(a) for a in node.args]
            try:
                return _bounded(FUNCTIONS[node.func.id](*args), text)
            except ZeroDivisionError:
                raise UsageError(f"{text!r}: division by zero") from None
            except (OverflowError, TypeError, ValueError) as e:
                raise UsageError(f"{text!r}: {node.func.id}(): {e}") from None
        if isinstance(node, ast.Tuple):
            return tuple(ev(e) for e in node.elts)
        raise UsageError(f"{text!r}: {ast.unparse(node)!r} is not allowed in an expression")

    try:
        return ev(tree)
    except RecursionError:
        raise UsageError(f"expression {text[:40]!r} is nested too deeply") from None


def call_with(fn: Callable[..., Any], values: Mapping[str, Any]) -> Any:
    """Call ``fn`` with the entries of ``values`` it takes by name (all of them if it takes
    ``**kwargs``); a parameter it needs that ``values`` lacks is a clear error."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(**values)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(**values)
    missing = _lacking(params, values)
    if missing:
        raise UsageError(
            f"{getattr(fn, '__name__', fn)!r} needs {', '.join(missing)}; the configuration has "
            f"{', '.join(values)}"
        )
    return fn(**{n: values[n] for n in params if n in values})


def _lacking(params: Mapping[str, inspect.Parameter], values: Mapping[str, Any]) -> list[str]:
    """The parameters a function needs (no default, not ``*args``) that ``values`` lacks."""
    return [
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL,)
        and n not in values
    ]


@overload
def as_function(spec: None) -> None: ...
@overload
def as_function(spec: str | Callable[..., Any]) -> Callable[[Mapping[str, Any]], Any]: ...
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
    usage = "expected NAME=V1,V2,... (numbers, or arithmetic such as 2**10) or NAME=LO..HI (powers of two)"
    if not sep or not name.isidentifier() or not rest.strip():
        raise UsageError(f"-p {text!r}: {usage}")
    if ".." in rest:
        return name, _powers_of_two(rest, f"-p {text!r}")
    return name, [constant(part, f"-p {text!r}") for part in rest.split(",") if part.strip()]


def _powers_of_two(text: str, what: str) -> list[int]:
    """``LO..HI`` -> LO, 2 LO, 4 LO ... up to HI.

    Raises:
        UsageError: naming ``what``: LO or HI is not a number, or not integers 0 < LO <= HI.
    """
    lo, hi = (constant(part, what) for part in text.split("..", 1))
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 < lo <= hi):
        raise UsageError(f"{what}: LO..HI needs integers 0 < LO <= HI")
    values, v = [], lo
    while v <= hi:
        values.append(v)
        v *= 2
    return values


def constant(text: str, what: str) -> Any:
    """A number written as a number or as arithmetic of numbers (``512``, ``2**10``, ``0.5``).

    Raises:
        UsageError: naming ``what`` (the option and its text), the bad part and what is expected.
    """
    try:
        value = evaluate(text, {})
    except UsageError as e:
        message = str(e)
        message = message[len(f"{text!r}: ") :] if message.startswith(f"{text!r}: ") else message
        raise UsageError(f"{what}: {message}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{what}: {text.strip()!r} is not a number")
    return value


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
