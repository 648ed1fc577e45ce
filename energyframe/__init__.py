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

_EXPORTS = {
    "measure": "energyframe.measurement",
    "Measurement": "energyframe.measurement",
    "run": "energyframe.orchestrator",
    "RunConfig": "energyframe.orchestrator",
    "RunResult": "energyframe.results",
    "PhaseSummary": "energyframe.windows",
    "Spread": "energyframe.stats",
    "PowerSource": "energyframe.interfaces",
    "Workload": "energyframe.interfaces",
    "Reporter": "energyframe.interfaces",
    "Phase": "energyframe.interfaces",
    "Channel": "energyframe.interfaces",
    "Sample": "energyframe.interfaces",
    "Quantity": "energyframe.interfaces",
    "Scope": "energyframe.interfaces",
    "ClockBase": "energyframe.interfaces",
    "Timing": "energyframe.interfaces",
    "SourceContext": "energyframe.interfaces",
    "Detection": "energyframe.interfaces",
    "WindowAnnotation": "energyframe.interfaces",
    "Option": "energyframe.options",
    "DerivedTable": "energyframe.interfaces",
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
    from .errors import (  # noqa: F401
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
    from .interfaces import (  # noqa: F401
        Channel,
        ClockBase,
        DerivedTable,  # noqa: F401
        Detection,
        Phase,
        PowerSource,
        Quantity,
        Reporter,
        Sample,
        Scope,
        SourceContext,
        Timing,
        WindowAnnotation,
        Workload,
    )
    from .measurement import Measurement, measure  # noqa: F401
    from .options import Option  # noqa: F401
    from .orchestrator import RunConfig, run  # noqa: F401
    from .results import RunResult  # noqa: F401
    from .stats import Spread  # noqa: F401
    from .sweeps.api import sweep  # noqa: F401
    from .sweeps.kernel import load_kernel  # noqa: F401
    from .sweeps.results import KernelResult, SweepResult  # noqa: F401
    from .windows import PhaseSummary  # noqa: F401
    from .workloads.graph import GraphKernel  # noqa: F401
    from .workloads.perlayer import PerLayer  # noqa: F401
    from .workloads.pipeline import Pipeline, Stage  # noqa: F401
