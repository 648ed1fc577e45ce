"""A ``__global__`` kernel's signature, read from its CUDA source without compiling it.

Only what a launch needs: each parameter's name, whether it is a pointer, whether it is
``const``, and its element type. Templates are refused (their parameter types are not known until
instantiated); so are types a launch cannot marshal (structs, vector types, references).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

#: C type spelling -> (torch dtype name, numpy scalar type name, bytes)
TYPES: dict[str, tuple[str, str, int]] = {
    "float": ("float32", "float32", 4),
    "double": ("float64", "float64", 8),
    "half": ("float16", "float16", 2),
    "__half": ("float16", "float16", 2),
    "__nv_bfloat16": ("bfloat16", "uint16", 2),
    "nv_bfloat16": ("bfloat16", "uint16", 2),
    "int": ("int32", "int32", 4),
    "signed int": ("int32", "int32", 4),
    "unsigned int": ("int32", "uint32", 4),
    "unsigned": ("int32", "uint32", 4),
    "int32_t": ("int32", "int32", 4),
    "uint32_t": ("int32", "uint32", 4),
    "long long": ("int64", "int64", 8),
    "long long int": ("int64", "int64", 8),
    "unsigned long long": ("int64", "uint64", 8),
    "int64_t": ("int64", "int64", 8),
    "uint64_t": ("int64", "uint64", 8),
    "size_t": ("int64", "uint64", 8),
    "long": ("int64", "int64", 8),
    "short": ("int16", "int16", 2),
    "int16_t": ("int16", "int16", 2),
    "char": ("int8", "int8", 1),
    "signed char": ("int8", "int8", 1),
    "int8_t": ("int8", "int8", 1),
    "unsigned char": ("uint8", "uint8", 1),
    "uint8_t": ("uint8", "uint8", 1),
    "bool": ("bool", "bool_", 1),
}
#: qualifiers that change nothing about how an argument is passed
_IGNORED = {"__restrict__", "__restrict", "restrict", "volatile", "__grid_constant__", "struct"}
_GLOBAL = re.compile(r"__global__")


@dataclass(frozen=True)
class Param:
    """One kernel parameter. ``ctype`` is the element type for a pointer."""

    name: str
    ctype: str
    pointer: bool
    const: bool

    @property
    def torch_dtype(self) -> str:
        return TYPES[self.ctype][0]

    @property
    def numpy_type(self) -> str:
        return TYPES[self.ctype][1]

    @property
    def itemsize(self) -> int:
        return TYPES[self.ctype][2]

    @property
    def floating(self) -> bool:
        return self.torch_dtype.startswith(("float", "bfloat"))

    def __str__(self) -> str:
        return f"{'const ' if self.const else ''}{self.ctype}{' *' if self.pointer else ' '}{self.name}"


@dataclass(frozen=True)
class Signature:
    """A kernel's name and parameters, in order."""

    name: str
    params: tuple[Param, ...]

    @property
    def pointers(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.pointer)

    @property
    def scalars(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.pointer)

    @property
    def outputs(self) -> tuple[Param, ...]:
        """Pointers the kernel may write: the non-const ones."""
        return tuple(p for p in self.pointers if not p.const)

    @property
    def inputs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not (p.pointer and not p.const))

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(p) for p in self.params)})"


def strip_comments(source: str) -> str:
    """The source without comments (string literals with // or /* are not expected in kernels)."""
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    return re.sub(r"//[^\n]*", "", source)


def _balanced(text: str, start: int, open_: str = "(", close: str = ")") -> int:
    """Index just after the bracket that closes the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    raise UsageError("unbalanced brackets in the kernel source")


def _drop_launch_bounds(text: str) -> str:
    while (at := text.find("__launch_bounds__")) >= 0:
        end = _balanced(text, text.index("(", at))
        text = text[:at] + " " * (end - at) + text[end:]
    return text


def kernels_in(source: str) -> dict[str, str]:
    """Every ``__global__`` function: name -> its declaration, from what precedes ``__global__``
    (a ``template<...>`` header, ``extern "C"``) to the ``)`` closing its parameters."""
    text = _drop_launch_bounds(strip_comments(source))
    found: dict[str, str] = {}
    for match in _GLOBAL.finditer(text):
        paren = text.find("(", match.end())
        if paren < 0:
            continue
        words = text[match.end() : paren].split()
        if not words:
            continue
        end = _balanced(text, paren)
        start = max(text.rfind(";", 0, match.start()), text.rfind("}", 0, match.start())) + 1
        found[words[-1]] = text[start:end]
    return found


def _param(text: str, kernel: str, index: int) -> Param:
    decl = _declaration(text, kernel, index)
    words = [w for w in decl.split(" ") if w not in _IGNORED]
    pointer = _is_pointer(words, kernel, decl)
    const = "const" in words
    words = [w for w in words if w not in ("*", "const")]
    if len(words) < 2:
        raise UsageError(f"kernel {kernel!r}: parameter {decl!r} has no name; name every parameter")
    name, ctype = words[-1], " ".join(words[:-1])
    if ctype not in TYPES:
        raise UsageError(
            f"kernel {kernel!r}: parameter {name!r} has type {ctype!r}, which energyframe cannot "
            f"allocate or pass; supported: {', '.join(sorted(TYPES))}"
        )
    return Param(name, ctype, pointer, const)


def _declaration(text: str, kernel: str, index: int) -> str:
    """A parameter's declaration with ``*`` and ``&`` as words of their own, one space between
    words.

    Raises:
        UsageError: it is empty, an array or has a default value.
    """
    decl = re.sub(r"\s+", " ", text.replace("*", " * ").replace("&", " & ")).strip()
    if not decl:
        raise UsageError(f"kernel {kernel!r}: parameter {index + 1} is empty")
    if "[" in decl or "=" in decl:
        raise UsageError(
            f"kernel {kernel!r}: parameter {decl!r}: arrays and default values are not supported"
        )
    return decl


def _is_pointer(words: list[str], kernel: str, decl: str) -> bool:
    """Whether the parameter is a pointer.

    Raises:
        UsageError: a reference, or a pointer to a pointer.
    """
    if "&" in words:
        raise UsageError(f"kernel {kernel!r}: parameter {decl!r}: a kernel cannot take references")
    stars = words.count("*")
    if stars > 1:
        raise UsageError(f"kernel {kernel!r}: parameter {decl!r}: pointers to pointers are not supported")
    return stars == 1


def parse_signature(source: str, name: str) -> Signature:
    """The signature of the ``__global__`` function ``name`` in ``source``.

    Raises:
        UsageError: no such kernel (the message lists those found), a template kernel, or a
            parameter type that cannot be passed.
    """
    kernels = kernels_in(source)
    if name not in kernels:
        have = ", ".join(sorted(kernels)) or "none"
        raise UsageError(f"no __global__ kernel {name!r} in the source; found: {have}")
    decl = kernels[name]
    if re.search(r"\btemplate\s*<", decl):
        raise UsageError(
            f"kernel {name!r} is a template: its parameter types are unknown until instantiated. "
            f'Add a wrapper, e.g. extern "C" __global__ void {name}_float(...) calling it with float'
        )
    inner = decl[decl.index("(", decl.index(name) + len(name)) + 1 : -1]
    return Signature(name, tuple(_param(p, name, i) for i, p in enumerate(_parameters(inner))))


def _parameters(inner: str) -> list[str]:
    """The text between a declaration's parentheses split on its top-level commas (types such
    as foo<a, b> are refused later anyway); none for ``()`` or ``(void)``."""
    parts, depth, current = [], 0, ""
    for ch in inner:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip() and current.strip() != "void":
        parts.append(current)
    return parts
