"""energyframe: measure the latency and the energy of GPU work, or of any command.

The public API, imported lazily so that ``energyframe --help`` starts fast::

    import energyframe as ef
    with ef.measure(power=["nvml"]) as m:
        with m.window("step", iterations=100):
            ...
    print(m.result.table())

Plugin authors import the plugin contract from ``energyframe.plugin`` (docs/writing-plugins.md).
"""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Every public name is declared once, in this block: type checkers read it, and at run time the
# same block is read (below) to import each name on first use.
if TYPE_CHECKING:
    from .api import measure, measured
    from .core.stats import Spread
    from .core.summary import PhaseSummary
    from .errors import (
        DistributedError,
        EnergyFrameError,
        OptionError,
        PluginLoadError,
        PluginNotFoundError,
        PowerSourceError,
        RunInterrupted,
        ServerError,
        StoreError,
        UsageError,
        WorkloadError,
    )
    from .lifecycle.config import RunConfig, RunSettings
    from .lifecycle.measurement import Measurement
    from .lifecycle.orchestrator import run
    from .model import Phase
    from .offline.runs import load_runs
    from .options import Option
    from .plugin import Workload
    from .results.meta import RunMeta
    from .results.result import RunResult, load_run
    from .serving.run import serve_bench
    from .sweeps.api import sweep
    from .sweeps.kernel import load_kernel
    from .sweeps.results import KernelResult, SweepResult
    from .workloads.anymodel import Model
    from .workloads.graph import GraphKernel
    from .workloads.perlayer import PerLayer
    from .workloads.pipeline import Pipeline, Stage

def _declared() -> dict[str, str]:
    """Each name of the ``TYPE_CHECKING`` block above, and the module it comes from."""
    tree = ast.parse(Path(__file__).read_text())
    block = next(
        node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: f"{__name__}.{node.module}"
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


_EXPORTS = _declared()
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(_no_attribute(name))
    value = globals()[name] = getattr(import_module(module), name)
    return value


def _no_attribute(name: str) -> str:
    """Why ``ef.<name>`` fails; a name of the plugin contract says where it is imported from."""
    message = f"module 'energyframe' has no attribute {name!r}"
    if name.startswith("_"):
        return message
    contract = getattr(import_module(f"{__name__}.plugin"), name, None)
    if getattr(contract, "__module__", "").startswith(f"{__name__}."):
        message += f"; import it from energyframe.plugin (from energyframe.plugin import {name})"
    return message


def __dir__() -> list[str]:
    return __all__
