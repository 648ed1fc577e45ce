"""A run's results: the result itself (``result``), the run directory on disk (``store``,
``rundir``), its display (``display``) and provenance (``provenance``)."""

from importlib import import_module
from typing import Any


def __getattr__(name: str) -> Any:
    # energyframe.results was the result's own module before the layered layout: its names
    # (RunResult, COMPLETE, ...) still resolve here for code written against it
    if name.startswith("__") or name == "result":
        raise AttributeError(name)
    try:
        return getattr(import_module(f"{__name__}.result"), name)
    except AttributeError:
        raise AttributeError(f"module 'energyframe.results' has no attribute {name!r}") from None
