"""Import paths that moved when the package took its layered layout, kept for plugins written
against them: ``import energyframe.polling`` still works, warns (``DeprecationWarning``, at the
importing line) and gives the module at its new place, the very same module object.

Plugin authors need only ``energyframe.plugin`` and ``energyframe.testing`` (docs/writing-plugins.md);
these aliases keep older plugins and scripts running while they move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType

#: old module -> where it lives now
MOVED = {
    "energyframe.align": "energyframe.core.align",
    "energyframe.analyze": "energyframe.offline.analyze",
    "energyframe.assemble": "energyframe.lifecycle.assemble",
    "energyframe.clock": "energyframe.core.clock",
    "energyframe.comparability": "energyframe.compare.comparability",
    "energyframe.compare_cli": "energyframe.cli.compare",
    "energyframe.compare_report": "energyframe.compare.tables",
    "energyframe.config": "energyframe.lifecycle.config",
    "energyframe.display": "energyframe.results.display",
    "energyframe.distributed": "energyframe.ranks.world",
    "energyframe.energy": "energyframe.core.energy",
    "energyframe.extras": "energyframe.kit.extras",
    "energyframe.fusion": "energyframe.core.fusion",
    "energyframe.htmlreport": "energyframe.report.html",
    "energyframe.logs": "energyframe.offline.logs",
    "energyframe.markdown": "energyframe.report.markdown",
    "energyframe.measurement": "energyframe.lifecycle.measurement",
    "energyframe.merge": "energyframe.ranks.merge",
    "energyframe.orchestrator": "energyframe.lifecycle.orchestrator",
    "energyframe.plots": "energyframe.report.plots",
    "energyframe.polling": "energyframe.kit.polling",
    "energyframe.progress": "energyframe.lifecycle.progress",
    "energyframe.provenance": "energyframe.results.provenance",
    "energyframe.pulse": "energyframe.lifecycle.pulse",
    "energyframe.recorder": "energyframe.lifecycle.recorder",
    "energyframe.recovery": "energyframe.results.load",
    "energyframe.registry": "energyframe.kit.registry",
    "energyframe.results": "energyframe.results.result",
    "energyframe.rundir": "energyframe.results.rundir",
    "energyframe.sampler": "energyframe.kit.sampler",
    "energyframe.samples": "energyframe.core.samples",
    "energyframe.shapes": "energyframe.core.shapes",
    "energyframe.simulate": "energyframe.offline.simulate",
    "energyframe.smi_format": "energyframe.offline.smi_format",
    "energyframe.stats": "energyframe.core.stats",
    "energyframe.store": "energyframe.results.store",
    "energyframe.sync": "energyframe.lifecycle.sync",
    "energyframe.timings": "energyframe.lifecycle.timings",
    "energyframe.windows": "energyframe.core.windows",
    # the plugin contract's first home
    "energyframe.interfaces": "energyframe.plugin",
}


def message(old: str, new: str) -> str:
    if old == "energyframe.interfaces":
        return "energyframe.interfaces is deprecated: import the same names from energyframe.plugin"
    return f"{old} moved to {new}; plugins import from energyframe.plugin (docs/writing-plugins.md)"


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new place."""

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: ModuleSpec | None = None

    def create_module(self, spec) -> ModuleType:
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system set the alias's spec on the real module


class MovedFinder:
    """Finds the old names only; every other import goes on to the usual finders."""

    def find_spec(self, fullname: str, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        # stacklevel 2: the importing line (warnings skips the import machinery's frames)
        warnings.warn(message(fullname, new), DeprecationWarning, stacklevel=2)
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
