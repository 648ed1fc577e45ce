"""The one import path for plugin authors: the three plugin kinds and everything they use.

A plugin is a class registered under an entry-point group (``energyframe.power``, ``.workloads``,
``.reporters``) whose name users type; its constructor only stores validated options. The contract
is docs/writing-plugins.md, the polling base docs/polling.md; ``energyframe.testing`` checks both.
Besides the bases below, this module hands out the polling base (``PollingSource``, ``Poller``,
``Stream``, ``Dedup``, ``mode_option``); the data (``Channel``, ``Sample``, ``Quantity``, ``Scope``,
``ClockBase``, ``Timing``, ``SourceContext``, ``Detection``, ``Phase``, ``WindowAnnotation``,
``DerivedTable``, ``WorkloadContext``, ``ReportFigure``, ``no_sync``, ``Option``); the errors
(``EnergyFrameError``, ``PowerSourceError``, ``WorkloadError``, ``UsageError``, ``OptionError``);
what a reporter reads (``RunResult``, ``PhaseSummary``, ``Spread``, ``SampleSeries``, ``COMPLETE``,
``INCOMPLETE``); and ``READ_BUDGET_S``, how long one ``read()`` may take before a run fails the source.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

# re-exported (``X as X``) rather than listed in ``__all__``: pydoc documents every class of an
# ``__all__`` in full, and help() of this module would drown the three bases in str methods
from .errors import EnergyFrameError as EnergyFrameError
from .errors import OptionError as OptionError
from .errors import PowerSourceError as PowerSourceError
from .errors import UsageError as UsageError
from .errors import WorkloadError as WorkloadError
from .model import Channel as Channel
from .model import ClockBase as ClockBase
from .model import DerivedTable as DerivedTable
from .model import Detection as Detection
from .model import Phase as Phase
from .model import Quantity as Quantity
from .model import ReportFigure as ReportFigure
from .model import Sample as Sample
from .model import Scope as Scope
from .model import SourceContext as SourceContext
from .model import Timing as Timing
from .model import WindowAnnotation as WindowAnnotation
from .model import WorkloadContext as WorkloadContext
from .model import no_sync as no_sync
from .options import Option as Option
from .options import resolve_options

if TYPE_CHECKING:
    from typing import ClassVar

    from .core.samples import SampleSeries as SampleSeries
    from .core.stats import Spread as Spread
    from .core.windows import PhaseSummary as PhaseSummary
    from .kit.polling import Dedup as Dedup
    from .kit.polling import Poller as Poller
    from .kit.polling import PollingSource as PollingSource
    from .kit.polling import Stream as Stream
    from .kit.polling import mode_option as mode_option
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
    "PhaseSummary": "core.windows",
    "PollingSource": "kit.polling",
    "Poller": "kit.polling",
    "Stream": "kit.polling",
    "Dedup": "kit.polling",
    "mode_option": "kit.polling",
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


class Plugin:
    """Shared by the three plugin kinds: declared options, validated values, a display name."""

    #: what ``energyframe list`` prints beside the name
    DESCRIPTION: ClassVar[str] = ""
    #: the options the plugin accepts
    OPTIONS: ClassVar[Sequence[Option]] = ()

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        if "name" in options and all(o.name != "name" for o in self.OPTIONS):
            name = options.pop("name")  # the plugin's name given by keyword; 'name' is no option of it
        self.name = name or type(self).__name__
        self.options: dict[str, Any] = resolve_options(
            self.OPTIONS, options, f"{_kind_label(type(self))} {self.name!r}"
        )


def _kind_label(cls: type) -> str:
    for base, label in ((PowerSource, "power source"), (Workload, "workload"), (Reporter, "reporter")):
        if issubclass(cls, base):
            return label
    return "plugin"


class PowerSource(Plugin, ABC):
    """Acquires timestamped energy or power samples in the background."""

    #: sources of the same scope compete in auto-detection; the highest priority wins.
    #: ``None`` means never chosen automatically (e.g. needs a port or a file).
    AUTO_PRIORITY: ClassVar[int | None] = None
    AUTO_SCOPE: ClassVar[Scope] = Scope.OTHER
    #: with several ranks (torchrun, srun): ``True`` runs the source in every rank, measuring
    #: that rank's own device (``SourceContext.devices``); ``False`` (a wall meter, RAPL: the
    #: whole machine) runs it once per machine, in the rank whose LOCAL_RANK is 0
    PER_PROCESS: ClassVar[bool] = False

    @classmethod
    def detect(cls) -> Detection:
        """Say whether this source can run here without starting it (cheap, no side effects)."""
        return Detection(False, "not auto-detected")

    @abstractmethod
    def start(self, context: SourceContext) -> Sequence[Channel]:
        """Begin background acquisition and return the channels it will produce.

        Raises:
            PowerSourceError: the hardware, driver or permissions are missing, with the fix.
        """

    @abstractmethod
    def read(self) -> list[Sample]:
        """Return the samples acquired since the last call, oldest first, without blocking.

        After acquisition has failed, the remaining samples are returned first; the next call
        raises ``PowerSourceError`` saying what went wrong.
        """

    @abstractmethod
    def stop(self) -> None:
        """Stop acquiring and release the hardware; samples not yet read stay readable."""

    def info(self) -> Mapping[str, Any]:
        """Describe what was measured (device names, driver versions) for run.json."""
        return {}

    def resources(self) -> Sequence[str]:
        """Hardware this source uses exclusively (``"serial:/dev/ttyUSB0"``), known from its
        options alone. Two sources of one run that claim the same resource are refused before
        anything starts, so that one meter is never counted twice."""
        return ()

    def annotate(
        self, channel: Channel, start_s: float, end_s: float, series: Mapping[str, SampleSeries]
    ) -> WindowAnnotation:
        """Add columns and flags to one window of ``channel`` (e.g. clocks, throttling).

        ``series`` holds this source's samples by channel name, on the run's monotonic timeline.
        """
        return WindowAnnotation()


class Workload(Plugin, ABC):
    """Work to measure: set up, one or more phases, torn down."""

    _context: WorkloadContext | None = None

    @property
    def context(self) -> WorkloadContext:
        """Where this workload runs (its rank, the run directory), set by the run before
        ``setup``; before that, what the launcher's environment says."""
        if self._context is None:
            from .ranks.world import world

            w = world()
            self._context = WorkloadContext(w.rank, w.local_rank, w.world_size, w.launched, w.launcher)
        return self._context

    def bind(self, context: WorkloadContext) -> None:
        """Tell the workload where it runs (the run calls this before ``setup``)."""
        self._context = context

    def setup(self) -> None:
        """Allocate what the phases need (models, tensors). Runs before any phase."""

    @abstractmethod
    def phases(self) -> Iterable[Phase]:
        """The phases to measure, in order. Called after ``setup``. May be a generator: each
        phase is then prepared just before it is measured (a sweep sizes its graph, or skips a
        configuration that fails, there)."""

    def teardown(self) -> None:
        """Release what ``setup`` allocated. Runs even when a phase failed."""

    def info(self) -> Mapping[str, Any]:
        """Describe the work (device, model, shapes) for run.json."""
        return {}

    def run_defaults(self) -> Mapping[str, Any]:
        """Run settings this workload needs when the user gives none (``RunConfig`` field names):
        a per-layer pipeline of 80 phases wants short windows and an idle baseline."""
        return {}

    def derive(self, result: RunResult) -> Sequence[DerivedTable]:
        """Figures computed from the measured phases, e.g. a pipeline's totals. Called once the
        run's windows are integrated; the tables are saved and reported with the run."""
        return ()

    def extra_files(self, result: RunResult) -> Mapping[str, bytes]:
        """Files to save in the run directory beside the standard ones (a report's JSON, a
        plot), by file name. Called after ``derive``; only when the run is saved."""
        return {}

    @property
    def exit_code(self) -> int | None:
        """For workloads that run a program: its exit status, which the CLI returns."""
        return None

    # -- a saved run of this workload, read later (compare, report) ---------------------------
    @classmethod
    def phase_kinds(cls, run_dir: Path, result: RunResult) -> Mapping[str, str]:
        """What each measured phase of a saved run is, where it is more than a phase: ``layer``,
        ``stage``, ``op`` or ``configuration`` (comparisons group rows by it). ``run_dir`` holds
        the files ``extra_files`` wrote."""
        return {}

    @classmethod
    def report_figures(cls, run_dir: Path, result: RunResult) -> Sequence[ReportFigure]:
        """Figures of a saved run for the HTML report (``energyframe report``), drawn from the
        files ``extra_files`` wrote into ``run_dir``."""
        return ()


class Reporter(Plugin, ABC):
    """Presents a finished or interrupted run."""

    @abstractmethod
    def report(self, result: RunResult, run_dir: Path | None) -> None:
        """Present ``result``; ``run_dir`` is where the run was saved (``None`` if it was not)."""
