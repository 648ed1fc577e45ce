"""Paths the user gives for output, checked in one place for every command and the API.

Kept free of heavy imports: the command line builds its options from it at start-up.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, overload

from ..errors import UsageError


@overload
def out_path(value: str | os.PathLike[str], option: str = ...) -> Path: ...
@overload
def out_path(value: None, option: str = ...) -> None: ...
@overload
def out_path(value: str | os.PathLike[str] | None, option: str = ...) -> Path | None: ...


def out_path(value: str | os.PathLike[str] | None, option: str = "--out") -> Path | None:
    """A path the user gave for output, or None when none was given. An empty one is refused:
    it would mean the current directory, where a run's files would overwrite what is there.

    Raises:
        UsageError: ``value`` is empty (or only blanks), naming ``option``.
    """
    if value is None:
        return None
    if str(value).strip() == "":
        raise UsageError(f"{option} is empty; give a path (use . for the current directory)")
    return Path(value)


def click_out_path(**kwargs: Any) -> Any:
    """A ``click.Path`` for an output option that refuses an empty value (click would make it
    ``.``, the current directory) with ``out_path``'s one line, before anything runs."""
    import click

    class _OutPath(click.Path):
        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, str) and value.strip() == "":
                name = param.opts[0] if param is not None and param.opts else "--out"
                self.fail(f"{name} is empty; give a path (use . for the current directory)", param, ctx)
            return super().convert(value, param, ctx)

    return _OutPath(path_type=Path, **kwargs)
