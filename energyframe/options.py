"""Plugin options and ``name[:key=value[,key=value...]]`` specs.

Every plugin declares its options; a spec given on the command line or to the Python API is
parsed and validated against those declarations before anything starts, so a typo never costs
a half-finished run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from .errors import OptionError, UsageError

KINDS = ("str", "int", "float", "bool", "path", "choice", "list", "int_list", "float_list")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Option:
    """One option a plugin accepts.

    Args:
        name: the key users type (``batch`` in ``resnet50:batch=64``).
        kind: one of ``KINDS``; lists are comma-separated on the command line.
        default: value used when the option is not given (``None`` means "not set").
        help: one line shown by ``energyframe list``; say the unit.
        choices: allowed values for ``kind="choice"``.
        required: the plugin cannot run without it.
        minimum: smallest allowed value for numbers (and for each item of number lists).
        min_items: fewest items a list option takes when given (``sizes=,,`` is no size).
    """

    name: str
    kind: str = "str"
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()
    required: bool = False
    minimum: float | None = None
    min_items: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name!r}: unknown kind {self.kind!r}; use one of {KINDS}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"option {self.name!r}: kind 'choice' needs choices")

    def describe_default(self) -> str:
        """The default as a user would type it in a spec (``/sys/class/powercap``, ``0,1``)."""
        if self.required:
            return "required"
        if self.default is None:
            return "not set"
        return "default " + _format_value(self.default)

    def describe_type(self) -> str:
        if self.kind == "choice":
            return "|".join(self.choices)
        return self.kind

    def convert(self, value: Any, owner: str) -> Any:
        """Convert a string (from a spec) or a Python value (from the API) to this option's type."""
        try:
            converted = _CONVERTERS[self.kind](self, value)
        except (TypeError, ValueError) as e:
            raise OptionError(
                f"option {self.name!r} of {owner} expects {self._expects()}, got {value!r}"
            ) from e
        self._check_finite(converted, owner)
        self._check_minimum(converted, owner)
        if isinstance(converted, tuple) and len(converted) < self.min_items:
            raise OptionError(
                f"option {self.name!r} of {owner} needs at least {self.min_items} "
                f"{'value' if self.min_items == 1 else 'values'} ({self._expects()}), got {value!r}"
            )
        return converted

    def _check_finite(self, value: Any, owner: str) -> None:
        """NaN or infinity in an option is always a typo (or an attack): refuse it by name."""
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, float) and not math.isfinite(item):
                raise OptionError(f"option {self.name!r} of {owner} expects a finite number, got {item!r}")

    def _expects(self) -> str:
        return {
            "int": "an integer",
            "float": "a number",
            "bool": "true or false",
            "choice": "one of " + ", ".join(self.choices),
            "int_list": "comma-separated integers",
            "float_list": "comma-separated numbers",
            "list": "comma-separated values",
            "path": "a path",
        }.get(self.kind, "a string")

    def _check_minimum(self, value: Any, owner: str) -> None:
        if self.minimum is None or value is None:
            return
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, (int, float)) and item < self.minimum:
                raise OptionError(
                    f"option {self.name!r} of {owner} must be >= {self.minimum:g}, got {item!r}"
                )


def _split_list(value: Any) -> list:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(value)


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return int(value)


def _to_choice(option: Option, value: Any) -> str:
    text = str(value)
    if text not in option.choices:
        raise ValueError(text)
    return text


_CONVERTERS = {
    "str": lambda o, v: str(v),
    "path": lambda o, v: Path(v).expanduser(),
    "int": lambda o, v: _to_int(v),
    "float": lambda o, v: float(v),
    "bool": lambda o, v: _to_bool(v),
    "choice": _to_choice,
    "list": lambda o, v: tuple(str(x) for x in _split_list(v)),
    "int_list": lambda o, v: tuple(_to_int(x) for x in _split_list(v)),
    "float_list": lambda o, v: tuple(float(x) for x in _split_list(v)),
}


@dataclass(frozen=True)
class Spec:
    """A parsed ``name[:key=value,...]`` string; values are still strings."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.options:
            return self.name
        return self.name + ":" + ",".join(f"{k}={_format_value(v)}" for k, v in self.options.items())


def _format_value(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(_format_value(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)


def parse_spec(text: str) -> Spec:
    """Parse ``name[:key=value[,key=value...]]``.

    A comma-separated piece without ``=`` continues the previous value, so list values need no
    quoting: ``nvml:gpus=0,1,interval_ms=2`` gives ``gpus="0,1"`` and ``interval_ms="2"``.
    """
    text = text.strip()
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise UsageError(f"empty plugin name in spec {text!r}; expected name[:key=value,...]")
    options: dict[str, str] = {}
    if sep and rest.strip():
        last_key: str | None = None
        for piece in rest.split(","):
            if "=" in piece:
                key, _, value = piece.partition("=")
                key = key.strip()
                if not key:
                    raise UsageError(f"missing option name before '=' in spec {text!r}")
                if key in options:
                    raise UsageError(f"option {key!r} given twice in spec {text!r}")
                options[key] = value.strip()
                last_key = key
            elif last_key is not None:
                options[last_key] += "," + piece.strip()
            else:
                raise UsageError(
                    f"cannot parse {piece!r} in spec {text!r}; expected name:key=value[,key=value...]"
                )
    return Spec(name, options)


def resolve_options(declared: Sequence[Option], given: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """Check ``given`` against ``declared`` and return every option's value (defaults filled in).

    Raises:
        OptionError: an unknown key (the valid keys are listed), a bad value, or a missing
            required option.
    """
    by_name = {o.name: o for o in declared}
    unknown = [k for k in given if k not in by_name]
    if unknown:
        valid = ", ".join(sorted(by_name)) or "(this plugin takes no options)"
        raise OptionError(f"unknown option {unknown[0]!r} for {owner}. Valid options: {valid}")
    values: dict[str, Any] = {}
    for option in declared:
        if given.get(option.name) is not None:  # None from the Python API means "not given"
            values[option.name] = option.convert(given[option.name], owner)
        elif option.required:
            raise OptionError(f"{owner} needs option {option.name!r}: {option.help}")
        else:
            values[option.name] = option.default
    return values


class FiniteFloat(click.FloatRange):
    """A finite number, optionally within bounds: NaN and infinities are refused by name."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        valid = self.describe()
        if not math.isfinite(number):
            self.fail(f"must be a finite number{f' in the range {valid}' if valid else ''}, got {number!r}", param, ctx)
        return super().convert(number, param, ctx)

    def describe(self) -> str:
        """The range as ``0<x<1``, ``x>=0`` or ``''`` when unbounded."""
        if self.min is None and self.max is None:
            return ""
        if self.max is None:
            return f"x{'>' if self.min_open else '>='}{self.min:g}"
        low = "" if self.min is None else f"{self.min:g}{'<' if self.min_open else '<='}"
        return f"{low}x{'<' if self.max_open else '<='}{self.max:g}"
