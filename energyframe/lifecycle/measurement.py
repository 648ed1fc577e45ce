"""``Measurement``: the live part of a run, as ``ef.measure`` and ``ef.run`` use it.

    with ef.measure(power=["nvml"]) as m:
        with m.window("train-step", iterations=100):
            ...
    print(m.result.table())

The orchestrator (``ef.run``) measures workloads through the same ``Measurement``, through its
methods. A run directory is written by one writer (``writer.RunWriter``), three ways, each once: the claim (``run.json`` created with
``O_EXCL``, saying "running"), the journals while the run goes (``windows.partial.csv``,
``samples.partial.csv``, ``sources.partial.json``), and the result at the end (the tables, then
``run.json`` last). Turning what was recorded into a result is ``assemble``'s straight pipeline.

``Measurement`` is the public face; each responsibility is an object of its own:
``acquisition.Acquisition`` (the clock, the sources, what they recorded), ``windowbook.WindowBook``
(the open and closed windows), ``live.LiveWindows`` (a closed window's energy while the run goes),
``output.RunOutput`` (run.json's fields and the run directory's writer). With several ranks
(torchrun, srun) the measurement's ``coordinator`` agrees every window edge with the other ranks,
and ``ranked.RankedRun`` gathers every rank's part on rank 0, which merges and saves the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.windows import WindowRecord
from ..errors import UsageError
from ..model import WorkloadContext
from ..ranks.connect import connect
from ..results.paths import out_path
from ..results.result import COMPLETE, INCOMPLETE
from .acquisition import Acquisition
from .finisher import Finisher
from .live import LiveWindows
from .output import RunOutput
from .ranked import RankedRun
from .window_edges import WindowEdges
from .windowbook import WindowBook

if TYPE_CHECKING:  # what the public face's signatures name; the work is done by the parts above
    from ..core.clock import ClockModel
    from ..core.pipeline import Recording, TimeAligner
    from ..errors import DistributedError, PowerSourceError
    from ..live.listener import LiveListener
    from ..model import Channel
    from ..plugin import PowerSource, Workload
    from ..ranks.coordinator import Coordinator
    from ..results.result import RunResult
    from .live import LiveEnergy
    from .windowbook import WindowHandle


class Measurement:
    """Power sources running in the background and the windows measured against them.

    Args:
        sources: power sources, not started (see ``registry.resolve_power``).
        out: run directory to save into (claimed at start; samples and windows are journaled
            there while the run goes); ``None`` keeps everything in memory.
        sync: how to wait for the device at window edges: ``"auto"`` (torch CUDA when in
            use), ``None``, or a callable.
        aligner: per-channel time corrections computed after the run: ``"auto"`` aligns the
            channels of unknown timing (wall meters) against the finest GPU or CPU channel;
            ``None`` leaves every timestamp as recorded; or a callable.
        meta: extra run.json fields (workload, config, reporters).
        notes: what resolving the power sources found (kept in run.json).
        idle_s: measure every channel's idle power this long first, for dynamic energy. Units: s.
        workload: the workload whose phases are measured (its derived tables and extra files
            are produced when the run finishes).
        coordinator: how this process measures with others: ``"auto"`` joins the ranks a
            launcher (torchrun, srun) started, or the process group the caller initialised;
            ``None``: alone; or a ``Coordinator``. With several ranks every window edge is agreed
            (a device sync, then every rank), and rank 0 saves the whole run in ``out``.
        dist_timeout_s: with several ranks, how long any exchange waits for a peer before the
            others stop without it (``None``: 1800 s). Units: s.
        listeners: live subscribers (``energyframe.live``), given every reading while the run goes.
    """

    def __init__(
        self,
        sources: Sequence[PowerSource] = (),
        *,
        out: Path | str | None = None,
        sync: str | Callable[[], None] | None = "auto",
        aligner: TimeAligner | str | None = "auto",
        meta: Mapping[str, Any] | None = None,
        notes: Sequence[str] = (),
        idle_s: float = 0.0,
        workload: Workload | None = None,
        coordinator: Coordinator | str | None = "auto",
        dist_timeout_s: float | None = None,
        listeners: Sequence[LiveListener] = (),
    ) -> None:
        self.out = out_path(out)  # "" is refused: it would be the current directory
        self.aligner = aligner
        self.idle_s = idle_s
        self.workload = workload
        self._coordinator_arg = coordinator
        self._dist_timeout_s = dist_timeout_s
        self.acquisition = Acquisition(sources, listeners)
        self.output = RunOutput(self.acquisition, meta, notes, lambda: self.coordinator.is_root)
        #: closed windows' energy while the run goes (``live.py``)
        self.live = LiveWindows(self._live_recording, self.acquisition.wait_for, self.acquisition.primary_channels, self.warn)
        if listeners:  # live subscribers (an exporter's window gauge) hear every window's energy
            self.live.subscribe(self.acquisition.to_listeners)
        self.book = WindowBook(self.live, self.output)
        self.edges = WindowEdges(self.book, sync, lambda: self.acquisition.failure)
        self.finisher = Finisher(self.acquisition, self.book, self.live, self.output, workload, aligner)
        self._ranked: RankedRun | None = None  # with several ranks
        self._result: RunResult | None = None

    # -- what the run holds ----------------------------------------------------------------
    @property
    def coordinator(self) -> Coordinator:
        """This process among the ranks (alone until ``start`` joins them)."""
        return self.edges.coordinator

    @coordinator.setter
    def coordinator(self, coordinator: Coordinator) -> None:
        self.edges.coordinator = coordinator

    @property
    def sources(self) -> list[PowerSource]:
        """The power sources this process runs."""
        return self.acquisition.sources

    @property
    def records(self) -> list[WindowRecord]:
        """Every window closed so far, in order."""
        return self.book.records

    @property
    def clock(self) -> ClockModel | None:
        """The run's clock, once started."""
        return self.acquisition.clock

    @property
    def warnings(self) -> list[str]:
        """Every warning so far (run.json's ``warnings``)."""
        return self.output.warnings

    @property
    def rank_error(self) -> DistributedError | None:
        """The error every rank raises when the run ended because of another rank."""
        return self._ranked.rank_error if self._ranked is not None else None

    @property
    def finished(self) -> bool:
        """Whether ``finish`` ran (``result`` is there)."""
        return self._result is not None

    # -- lifecycle -------------------------------------------------------------------------
    def warn(self, message: str) -> None:
        """Record a problem that does not stop the run (shown now, and kept in run.json; with
        several ranks, rank 0 shows every rank's)."""
        self.output.warn(message)

    def start(self) -> Measurement:
        """Claim the run directory, start the sources, wait until each channel has delivered.

        Any failure here is written to run.json (status ``incomplete`` and the reason) before
        it is raised, so a run directory never keeps saying "running" for a run that ended.
        With several ranks, rank 0 claims the directory; every rank starts its sources (the
        machine-wide ones in local rank 0 only), and the run starts once all have.
        """
        started = time.monotonic()
        coord = self.coordinator = connect(self._coordinator_arg, self._dist_timeout_s)
        self.acquisition.start_clock()
        self.output.note_start()
        if coord.distributed:
            self._ranked = RankedRun(coord, self.output, self.workload)
            self.out, self.acquisition.sources = self._ranked.join(started, self.out, self.sources, self.output.notes)
        elif self.out is not None:
            self.output.claim(self.out)
        try:
            with self.output.span("sources_start"):
                self.acquisition.start(self.out, self.warn, coord)
                self.output.open_journals()
                self.acquisition.wait_for_first_samples()
            if self._ranked is not None:
                self._ranked.started(self.sources, self.out)
            if self.idle_s > 0:
                self.measure_idle(self.idle_s)
        except BaseException as e:
            self._abort(e)
            raise
        return self

    def _abort(self, error: BaseException) -> None:
        """The run could not start: stop what started, and say why in run.json; if the sources
        did not start, nothing was measured and the claim is taken back."""
        acquisition = self.acquisition
        if not self.coordinator.distributed and not acquisition.started:
            acquisition.stop_sources()
            self.output.release()
            return
        reason = acquisition.describe(error)
        if self.coordinator.distributed or acquisition.running:
            try:
                self.finish(INCOMPLETE, reason)
                return
            except Exception as e:  # saving failed too: the status below is the last word
                reason = f"{reason}; saving failed: {e}"
        self.output.failed(reason)

    def __enter__(self) -> Measurement:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._result is not None or self.acquisition.recorder is None:
            return
        if exc is None:
            self.finish()
            if self.rank_error is not None:  # the block ended here, but another rank failed
                raise self.rank_error
        else:
            self.finish(INCOMPLETE, self.acquisition.describe(exc))

    # -- what the orchestrator asks ------------------------------------------------------------
    def span(self, what: str) -> AbstractContextManager[None]:
        """Count the time inside the block towards ``what`` in run.json's ``timings_s``."""
        return self.output.span(what)

    def add_time(self, what: str, seconds: float) -> None:
        self.output.add_time(what, seconds)

    def describe(self, **fields: Any) -> None:
        """Set run.json fields the run knows only now (the workload, its exit code...)."""
        self.output.describe(**fields)

    def describe_config(self, **fields: Any) -> None:
        """Add to run.json's ``config`` what the run decided (the shortest window used...)."""
        self.output.describe_config(**fields)

    def describe_failure(self, error: BaseException) -> str:
        """The reason an ``incomplete`` run gives for ``error`` (a failed source named first)."""
        return self.acquisition.describe(error)

    @property
    def has_sources(self) -> bool:
        """Whether any power source runs here (timing only otherwise)."""
        return bool(self.sources)

    def closed_windows(self) -> Sequence[WindowRecord]:
        """Every window closed so far, in order."""
        return tuple(self.records)

    def workload_context(self) -> WorkloadContext:
        """Where the measured workload runs: this rank, the run directory."""
        c = self.coordinator
        return WorkloadContext(c.rank, c.local_rank, c.world_size, c.world.launched, c.world.launcher, self.out)

    def channels(self) -> dict[str, Channel]:
        """The started sources' channels, by name."""
        return self.acquisition.channels()

    @property
    def source_failure(self) -> PowerSourceError | None:
        """Why a source failed while the run went, if one did."""
        return self.acquisition.failure

    def interrupting_on_source_failure(self) -> AbstractContextManager[None]:
        """Inside the block a source that fails interrupts the main thread (SIGINT), so that
        even a blocking wait for a measured command ends promptly."""
        return self.acquisition.interrupting_on_failure()

    # -- windows ---------------------------------------------------------------------------
    def measure_idle(self, duration_s: float) -> None:
        """Record a window of ``duration_s`` with nothing running; each channel's power in it
        becomes the idle baseline that dynamic energy subtracts. Units: s."""
        self.add_time("idle_baseline", self.edges.idle(duration_s).duration_s)

    def begin_window(
        self, name: str, iterations: int = 1, sync: Callable[[], None] | None = None
    ) -> WindowHandle:
        """Sync the device, then open a window named ``name`` (repeat names for trials).

        ``sync`` overrides the measurement's device sync for this window."""
        self._check_running()
        return self.edges.begin(name, iterations, sync)

    def end_window(
        self,
        name: str,
        iterations: int | None = None,
        sync: Callable[[], None] | None = None,
        interrupted: bool = False,
    ) -> WindowRecord:
        """Sync the device, then close the innermost open window named ``name``.

        ``interrupted``: a Ctrl-C or SIGTERM ends the window before its work did; it is kept
        (hours of a measured program are not thrown away), flagged ``interrupted``."""
        return self.edges.end(name, iterations, sync, interrupted)

    def record_window(self, name: str, start_s: float, end_s: float, iterations: int = 1) -> WindowRecord:
        """Record a window whose edges were seen elsewhere: another process's events (a server's
        requests, a callback's steps), as this host's ``time.monotonic()`` seconds. Nothing is
        synced at its edges (``synced`` is False). Windows are recorded in the order of their
        ends, as ``end_window`` records them.

        Raises:
            UsageError: an edge that is not finite or lies ahead of now, an end before the
                start, or an end before the last recorded window's end.
        """
        self._check_running()
        return self.edges.seen_elsewhere(name, start_s, end_s, iterations)

    def discard_window(self, record: WindowRecord) -> None:
        """Forget the last closed window of its name (the orchestrator redoes one that came out
        too short); its trial number is given to the next window of that name."""
        self.book.discard(record)

    @contextmanager
    def window(self, name: str, iterations: int = 1) -> Iterator[WindowHandle]:
        """``with m.window("step", iterations=100):`` - synced at both edges."""
        handle = self.begin_window(name, iterations)
        try:
            yield handle
        except BaseException:
            self.book.drop(handle)  # a window whose work failed measures nothing
            raise
        self.end_window(name)

    def set_work(self, name: str, work: Mapping[str, float]) -> None:
        """Work per iteration of window ``name`` (e.g. ``{"tokens": 128}``)."""
        self.book.set_work(name, work)

    def on_window_energy(self, callback: Callable[[LiveEnergy], None]) -> None:
        """Call ``callback(LiveEnergy)`` with each window's energy as soon as it is known (on a
        thread of the measurement's own, in the order windows close): for live output."""
        self.live.subscribe(callback)

    def window_energy(
        self, window: WindowRecord | str, wait: bool = True, timeout_s: float | None = None
    ) -> LiveEnergy | None:
        """A closed window's energy while the run goes: ``end_window``'s record, or a window's
        name (its last closed window); ``None`` while it is computed (``wait=False``, or past
        ``timeout_s``).

        Raises:
            UsageError: no window of that name has closed, or ``window`` is neither.
        """
        if isinstance(window, str):
            window = self._last_closed(window)
        if not isinstance(window, WindowRecord):
            raise UsageError(
                f"window_energy takes a closed window's record (end_window's, or a handle's .record) or its "
                f"name, not {window!r}"
            )
        return self.live.submit(window).result(wait, timeout_s)

    def _last_closed(self, name: str) -> WindowRecord:
        for record in reversed(self.records):
            if record.phase == name:
                return record
        closed = sorted({r.phase for r in self.records})
        raise UsageError(
            f"no window named {name!r} has closed"
            + (f"; closed windows: {', '.join(map(repr, closed))}" if closed else "; none has closed yet")
        )

    def _live_recording(self, since_s: float) -> Recording:
        """The recording from ``since_s`` on (monotonic), with the synced starts since then."""
        return self.acquisition.live_recording(since_s, self.book.synced_starts_since(since_s))

    def _check_running(self) -> None:
        if self.acquisition.recorder is None:
            raise UsageError("the measurement has not started; use it as a context manager")
        if self._result is not None:
            raise UsageError("the measurement has finished")

    # -- results ---------------------------------------------------------------------------
    @property
    def result(self) -> RunResult:
        if self._result is None:
            raise UsageError("the measurement is still running; read .result after the with-block")
        return self._result

    def snapshot(self) -> RunResult:
        """The run so far, while it goes: every closed window integrated as ``finish`` would
        (the same pipeline), after waiting (at most the sources' coverage timeout) for a sample
        past the last one; the sources keep running. Its status is ``incomplete``, "running"."""
        self._check_running()
        return self.finisher.snapshot()

    def finish(self, status: str = COMPLETE, reason: str | None = None) -> RunResult:
        """Wait for samples past the last window, stop the sources, integrate, save.

        With several ranks every rank integrates its own part and sends it to rank 0, which
        merges and saves the run (``energyframe.ranks.merge``); rank 0 returns the whole run, the
        others their own part. A run that ended because of another rank sets ``rank_error``."""
        if self._result is None:
            if self._ranked is not None:
                self._result = self._ranked.finish(self.finisher.own_part(status, reason), self.out)
            else:
                self._result = self.finisher.finish(status, reason)
        return self._result
