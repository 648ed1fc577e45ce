"""energyframe: measure the latency and the energy of GPU work, or of any command.

The public API, imported lazily so that ``energyframe --help`` starts fast::

    import energyframe as ef
    with ef.measure(power=["nvml"]) as m:
        with m.window("step", iterations=100):
            ...
    print(m.result.table())
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from .kit.moved import install as _install_moved_paths

_install_moved_paths()  # energyframe.polling and the other pre-layout paths, with a warning

_EXPORTS = {
    "measure": "energyframe.lifecycle.measurement",
    "measured": "energyframe.lifecycle.measurement",
    "Measurement": "energyframe.lifecycle.measurement",
    "run": "energyframe.lifecycle.orchestrator",
    "RunConfig": "energyframe.lifecycle.config",
    "RunSettings": "energyframe.lifecycle.config",
    "RunResult": "energyframe.results.result",
    "PhaseSummary": "energyframe.core.windows",
    "Spread": "energyframe.core.stats",
    "PowerSource": "energyframe.plugin",
    "Workload": "energyframe.plugin",
    "Reporter": "energyframe.plugin",
    "Phase": "energyframe.model",
    "Channel": "energyframe.model",
    "Sample": "energyframe.model",
    "Quantity": "energyframe.model",
    "Scope": "energyframe.model",
    "ClockBase": "energyframe.model",
    "Timing": "energyframe.model",
    "SourceContext": "energyframe.model",
    "Detection": "energyframe.model",
    "WindowAnnotation": "energyframe.model",
    "Option": "energyframe.options",
    "DerivedTable": "energyframe.model",
    "GraphKernel": "energyframe.workloads.graph",
    "Pipeline": "energyframe.workloads.pipeline",
    "PerLayer": "energyframe.workloads.perlayer",
    "load_kernel": "energyframe.sweeps.kernel",
    "sweep": "energyframe.sweeps.api",
    "SweepResult": "energyframe.sweeps.results",
    "KernelResult": "energyframe.sweeps.results",
    "Stage": "energyframe.workloads.pipeline",
    "EnergyFrameError": "energyframe.errors",
    "UsageError": "energyframe.errors",
    "OptionError": "energyframe.errors",
    "PluginNotFoundError": "energyframe.errors",
    "PluginLoadError": "energyframe.errors",
    "PowerSourceError": "energyframe.errors",
    "WorkloadError": "energyframe.errors",
    "StoreError": "energyframe.errors",
    "RunInterrupted": "energyframe.errors",
    "DistributedError": "energyframe.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'energyframe' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first use
    from .core.stats import Spread  # noqa: F401
    from .core.windows import PhaseSummary  # noqa: F401
    from .errors import (  # noqa: F401
        DistributedError,
        EnergyFrameError,
        OptionError,
        PluginLoadError,
        PluginNotFoundError,
        PowerSourceError,
        RunInterrupted,
        StoreError,
        UsageError,
        WorkloadError,
    )
    from .lifecycle.config import RunConfig, RunSettings  # noqa: F401
    from .lifecycle.measurement import Measurement, measure, measured  # noqa: F401
    from .lifecycle.orchestrator import run  # noqa: F401
    from .model import (  # noqa: F401
        Channel,
        ClockBase,
        DerivedTable,
        Detection,
        Phase,
        Quantity,
        Sample,
        Scope,
        SourceContext,
        Timing,
        WindowAnnotation,
    )
    from .options import Option  # noqa: F401
    from .plugin import PowerSource, Reporter, Workload  # noqa: F401
    from .results.result import RunResult  # noqa: F401
    from .sweeps.api import sweep  # noqa: F401
    from .sweeps.kernel import load_kernel  # noqa: F401
    from .sweeps.results import KernelResult, SweepResult  # noqa: F401
    from .workloads.graph import GraphKernel  # noqa: F401
    from .workloads.perlayer import PerLayer  # noqa: F401
    from .workloads.pipeline import Pipeline, Stage  # noqa: F401
