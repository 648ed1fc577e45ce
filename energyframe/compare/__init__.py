"""Comparing runs: the statistics (``statistics``), why two runs may not compare
(``comparability``), and the comparison's tables (``tables``)."""

from importlib import import_module
from typing import Any


def __getattr__(name: str) -> Any:
    # energyframe.compare was the statistics' own module before the layered layout: its names
    # still resolve here for code written against it
    if name.startswith("__") or name == "statistics":
        raise AttributeError(name)
    try:
        return getattr(import_module(f"{__name__}.statistics"), name)
    except AttributeError:
        raise AttributeError(f"module 'energyframe.compare' has no attribute {name!r}") from None
