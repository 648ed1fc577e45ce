"""The plugin contract's former home: everything here now lives in ``energyframe.plugin``
(the ABCs and the one stable import path for plugins) and ``energyframe.model`` (plain data).
Kept so that plugins written against it keep working."""

from __future__ import annotations

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
    no_sync,
)
from .plugin import Plugin, PowerSource, Reporter, Workload  # noqa: F401
