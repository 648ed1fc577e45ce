"""The plugin contract: ``PowerSource``, ``Workload`` and ``Reporter``, and the one import path
for everything a plugin needs::

    from energyframe.plugin import PowerSource, Channel, Quantity, Sample, Option, PowerSourceError

A plugin is a class registered under an entry-point group (``energyframe.power``,
``energyframe.workloads``, ``energyframe.reporters``); the entry-point name is what users type.
Constructors only store validated options; hardware is touched in ``start``/``setup``, so that a
bad option is reported before anything runs. docs/writing-plugins.md documents every member here
(tests/test_docs.py checks it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import (
    EnergyFrameError,
    OptionError,
    PowerSourceError,
    UsageError,
    WorkloadError,
)
from .model import (
    Channel,
    ClockBase,
    DerivedTable,
    Detection,
    Phase,
    Quantity,
    ReportFigure,
    Sample,
    Scope,
    SourceContext,
    Timing,
    WindowAnnotation,
    WorkloadContext,
    no_sync,
)
from .options import Option, resolve_options

if TYPE_CHECKING:
    from .core.samples import SampleSeries
    from .core.stats import Spread
    from .core.windows import PhaseSummary
    from .results.result import COMPLETE, INCOMPLETE, RunResult

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
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'energyframe.plugin' has no attribute {name!r}")
    value = getattr(import_module(f"energyframe.{module}"), name)
    globals()[name] = value
    return value


class Plugin:
    """Shared by the three plugin kinds: declared options, validated values, a display name."""

    #: what ``energyframe list`` prints beside the name
    DESCRIPTION: ClassVar[str] = ""
    #: the options the plugin accepts
    OPTIONS: ClassVar[Sequence[Option]] = ()

    def __init__(self, name: str | None = None, **options: Any) -> None:
        self.name = name or type(self).__name__
        self.options: dict[str, Any] = resolve_options(
            self.OPTIONS, options, f"{self.kind_label()} {self.name!r}"
        )

    @classmethod
    def kind_label(cls) -> str:
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


__all__ = [
    "COMPLETE",
    "INCOMPLETE",
    "Channel",
    "ClockBase",
    "DerivedTable",
    "Detection",
    "EnergyFrameError",
    "Dedup",  # noqa: F822 (lazy: __getattr__)
    "Option",
    "OptionError",
    "Poller",  # noqa: F822
    "PollingSource",  # noqa: F822
    "Phase",
    "PhaseSummary",
    "Plugin",
    "PowerSource",
    "PowerSourceError",
    "Quantity",
    "ReportFigure",
    "Reporter",
    "RunResult",
    "Sample",
    "SampleSeries",
    "Scope",
    "SourceContext",
    "Spread",
    "Stream",  # noqa: F822
    "Timing",
    "UsageError",
    "WindowAnnotation",
    "Workload",
    "WorkloadContext",
    "WorkloadError",
    "no_sync",
]
