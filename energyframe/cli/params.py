"""Option types the commands share: numbers that must be finite, paths the system can hold.

click's ``FloatRange`` compares a value with its bounds, and NaN compares false with
everything: ``--alpha nan`` would pass ``0 < x < 1`` and reach the code as a silent "never
significant". These types refuse it at the command line, naming the value and what is valid.
``FiniteFloat`` lives in ``energyframe/options.py``, beneath every command that takes a number
(``serve-bench`` and ``sweep`` as well as these).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..options import FiniteFloat

__all__ = ["FiniteFloat", "checked_path"]

#: the longest path the kernel takes (Linux's PATH_MAX, the terminating NUL included). Units: bytes.
PATH_MAX = 4096
#: the longest file name when the file system does not say (Linux's NAME_MAX). Units: bytes.
NAME_MAX = 255


def _too_long(path: Path) -> str | None:
    """Why the system cannot hold ``path`` (a name or the whole path too long), or None."""
    absolute = os.fsencode(os.path.abspath(path))
    if len(absolute) >= PATH_MAX:
        return f"the path is {len(absolute)} bytes long; the system takes at most {PATH_MAX - 1}"
    existing = Path(os.path.abspath(path))
    while not os.path.exists(existing) and existing != existing.parent:  # False on any OSError
        existing = existing.parent
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = NAME_MAX
    for part in Path(path).parts:
        if len(os.fsencode(part)) > name_max:
            return f"a name in it is {len(os.fsencode(part))} bytes long; the file system takes at most {name_max}"
    return None


def checked_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """A click callback: refuse a path the system could only fail on later (exit 2)."""
    if value is None:
        return None
    reason = _too_long(value)
    if reason is not None:
        shown = str(value) if len(str(value)) <= 60 else f"{str(value)[:40]}...{str(value)[-12:]}"
        raise click.BadParameter(f"{shown!r} is too long: {reason}", ctx, param)
    return value
