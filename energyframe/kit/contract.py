"""The three plugin kinds' base classes: ``Plugin`` (declared options, validated values, a
display name), ``PowerSource``, ``Workload`` and ``Reporter``. Authors import them from
``energyframe.plugin``, their public home (docs/writing-plugins.md); they live here, beside the
polling base that builds on ``PowerSource`` (``polling.py``), so that ``energyframe.plugin`` can
hand out both without an import circle."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..model import (
    Channel,
    DerivedTable,
    Detection,
    Phase,
    ReportFigure,
    Sample,
    Scope,
    SourceContext,
    WindowAnnotation,
    WorkloadContext,
)
from ..options import Option, resolve_options

if TYPE_CHECKING:
    from ..core.samples import SampleSeries
    from ..results.result import RunResult

#: the public home of the classes below (their reprs, pickles and ``help(energyframe.plugin)``)
PUBLIC_MODULE = "energyframe.plugin"


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

    def stamp_half_widths_s(self) -> Mapping[str, float]:
        """Per energy counter whose ticks this source stamped by polling, once it stopped: the
        half-width within which each tick's stamp lies. The run sets it on the channel
        (``Channel.stamp_s``) and the windows' bounds widen to match (±2 ms at least). Empty: the
        source stamps no counter by polling. ``PollingSource`` reports half the median time
        between the two polls around a tick. Units: s."""
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
            from ..ranks.world import world

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


for _cls in (Plugin, PowerSource, Workload, Reporter):
    _cls.__module__ = PUBLIC_MODULE
