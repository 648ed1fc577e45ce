"""The plugin contract's former home, deprecated: everything here now lives in
``energyframe.plugin`` (the ABCs and the one stable import path for plugins) and
``energyframe.model`` (plain data). Importing it warns (``DeprecationWarning``) and still gives
the same names, so that plugins written against it keep working."""

from __future__ import annotations

import warnings

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

warnings.warn(
    "energyframe.interfaces is deprecated: import the same names from energyframe.plugin",
    DeprecationWarning,
    stacklevel=2,  # the importer: warnings skips the import machinery's frames
)
