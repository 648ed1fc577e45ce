"""The one import path for plugin authors: the three plugin kinds and everything they use.

A plugin is a class registered under an entry-point group (``energyframe.power``, ``.workloads``,
``.reporters``) whose name users type; its constructor only stores validated options. The contract
is docs/writing-plugins.md, the polling base docs/polling.md; ``energyframe.testing`` checks both.
Besides the bases below, this module hands out the polling base (``PollingSource``, ``Poller``,
``Stream``, ``Dedup``, ``mode_option``, and a poller's ``Schedule``: ``TickSchedule``); the data (``Channel``, ``Shape``, ``Sample``, ``Quantity``, ``Scope``,
``ClockBase``, ``Timing``, ``SourceContext``, ``Detection``, ``Phase``, ``WindowAnnotation``,
``DerivedTable``, ``WorkloadContext``, ``ReportFigure``, ``no_sync``, ``Option``); the errors
(``EnergyFrameError``, ``PowerSourceError``, ``WorkloadError``, ``UsageError``, ``OptionError``);
what a reporter reads (``RunResult``, ``PhaseSummary``, ``Spread``, ``SampleSeries``, ``COMPLETE``,
``INCOMPLETE``); and ``READ_BUDGET_S``, how long one ``read()`` may take before a run fails the source.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# re-exported (``X as X``) rather than listed in ``__all__``: pydoc documents every class of an
# ``__all__`` in full, and help() of this module would drown the three bases in str methods
from .errors import EnergyFrameError as EnergyFrameError
from .errors import OptionError as OptionError
from .errors import PowerSourceError as PowerSourceError
from .errors import UsageError as UsageError
from .errors import WorkloadError as WorkloadError
from .kit.contract import Plugin as Plugin
from .kit.contract import PowerSource as PowerSource
from .kit.contract import Reporter as Reporter
from .kit.contract import Workload as Workload
from .model import Channel as Channel
from .model import ClockBase as ClockBase
from .model import DerivedTable as DerivedTable
from .model import Detection as Detection
from .model import Phase as Phase
from .model import Quantity as Quantity
from .model import ReportFigure as ReportFigure
from .model import Sample as Sample
from .model import Scope as Scope
from .model import Shape as Shape
from .model import SourceContext as SourceContext
from .model import Timing as Timing
from .model import WindowAnnotation as WindowAnnotation
from .model import WorkloadContext as WorkloadContext
from .model import no_sync as no_sync
from .options import Option as Option

if TYPE_CHECKING:
    from .core.samples import SampleSeries as SampleSeries
    from .core.stats import Spread as Spread
    from .core.summary import PhaseSummary as PhaseSummary
    from .kit.polling import Dedup as Dedup
    from .kit.polling import Poller as Poller
    from .kit.polling import PollingSource as PollingSource
    from .kit.polling import Stream as Stream
    from .kit.polling import mode_option as mode_option
    from .kit.schedule import Schedule as Schedule
    from .kit.schedule import TickSchedule as TickSchedule
    from .results.result import COMPLETE as COMPLETE
    from .results.result import INCOMPLETE as INCOMPLETE
    from .results.result import RunResult as RunResult

#: the most one ``PowerSource.read()`` may take: a run fails the source after it, naming the slow
#: call, and ``energyframe.testing`` holds a plugin to the same budget. ``read()`` hands over what
#: the source buffered; waiting for the device belongs in the source's own thread. Units: s.
READ_BUDGET_S = 1.0

#: what a reporter reads, re-exported here but imported on first use: loading a plugin class
#: (``energyframe list``, ``--help``) must not import pandas
_LAZY = {
    "COMPLETE": "results.result",
    "INCOMPLETE": "results.result",
    "RunResult": "results.result",
    "SampleSeries": "core.samples",
    "Spread": "core.stats",
    "PhaseSummary": "core.summary",
    "PollingSource": "kit.polling",
    "Poller": "kit.polling",
    "Stream": "kit.polling",
    "Dedup": "kit.polling",
    "mode_option": "kit.polling",
    "Schedule": "kit.schedule",
    "TickSchedule": "kit.schedule",
}


def __getattr__(name: str) -> Any:
    """The names of ``_LAZY``, imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'energyframe.plugin' has no attribute {name!r}")
    value = getattr(import_module(f"energyframe.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Every name here, the lazy ones included."""
    return sorted({*globals(), *_LAZY})
