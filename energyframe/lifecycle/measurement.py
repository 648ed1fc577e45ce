"""``Measurement``: the live part of a run, the one writer of its run directory.

    with ef.measure(power=["nvml"]) as m:
        with m.window("train-step", iterations=100):
            ...
    print(m.result.table())

The orchestrator (``ef.run``) measures workloads through the same ``Measurement``, through its
methods. A run directory is written three ways, each once: the claim (``run.json`` created with
``O_EXCL``, saying "running"), the journals while the run goes (``windows.partial.csv``,
``samples.partial.csv``, ``sources.partial.json``), and the result at the end (the tables, then
``run.json`` last). Turning what was recorded into a result is ``assemble``'s straight pipeline.

With several ranks (torchrun, srun) the measurement's ``coordinator`` agrees every window edge
with the other ranks, and ``ranked.RankedRun`` gathers every rank's part on rank 0, which merges
and saves the run.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.clock import ClockModel
from ..core.pipeline import Recording, TimeAligner
from ..core.samples import empty_samples_frame
from ..core.windows import WindowRecord
from ..errors import (
    DistributedError,
    EnergyFrameError,
    PowerSourceError,
    RunInterrupted,
    StoreError,
    UsageError,
)
from ..live.listener import LiveListener
from ..model import Channel, WorkloadContext, no_sync
from ..plugin import PowerSource, Workload
from ..ranks.connect import connect
from ..ranks.coordinator import Alone, Coordinator
from ..ranks.world import rank_devices
from ..results.paths import out_path
from ..results.result import COMPLETE, INCOMPLETE, RunResult
from .assemble import assemble, extra_files, run_meta, utc_now
from .live import LiveEnergy, LiveWindows, Pending
from .recorder import Recorder
from .sync import resolve_sync
from .timings import Timings
from .writer import RunWriter

log = logging.getLogger("energyframe")

#: run.json's reason while the run is going; ``energyframe show`` recognises it
RUNNING = "running (pid {pid}); if this stays, the process died"


@dataclass
class WindowHandle:
    """An open window; set ``iterations`` before it closes if the count is known only then.

    Once closed, ``energy_j`` is its energy on the first primary channel as soon as every
    channel has a sample past its end (it waits for that, about one update period), and
    ``energy(wait=False)`` the same without waiting (``None`` until known): ``live.py``.
    """

    name: str
    iterations: int
    start_s: float
    record: WindowRecord | None = None
    #: whether the device was synced as the window opened (``WindowRecord.synced``)
    synced: bool = False
    _submit: Callable[[WindowRecord], Pending] | None = field(default=None, repr=False)
    _pending: Pending | None = field(default=None, repr=False)

    def energy(self, wait: bool = True, timeout_s: float | None = None) -> LiveEnergy | None:
        """The closed window's energy on every channel (``LiveEnergy``); ``None`` while it is not
        known yet and ``wait`` is False (or ``timeout_s`` passed)."""
        if self.record is None or self._submit is None:
            raise UsageError(f"window {self.name!r} is still open: its energy is known once it closes")
        if self._pending is None:
            self._pending = self._submit(self.record)
        return self._pending.result(wait, timeout_s)

    @property
    def energy_j(self) -> float:
        """The closed window's energy on the first primary channel. Units: J."""
        live = self.energy()
        return live.energy_j if live is not None else math.nan


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
        self.sources = list(sources)
        #: live subscribers (``energyframe.live``), handed to the recorder
        self.listeners = list(listeners)
        self.out = out_path(out)  # "" is refused: it would be the current directory
        self._coordinator_arg = coordinator
        self.dist_timeout_s = dist_timeout_s
        #: this process among the ranks (alone until ``start`` joins them)
        self.coordinator: Coordinator = Alone()
        #: the error every rank raises when the run ended because of another rank
        self.rank_error: DistributedError | None = None
        self.sync = resolve_sync(sync)
        self.aligner = aligner
        self.meta: dict[str, Any] = dict(meta or {})
        self.warnings: list[str] = []
        self.notes = list(notes)
        self.idle_s = idle_s
        self.workload = workload
        self.clock: ClockModel | None = None
        self.recorder: Recorder | None = None
        self.records: list[WindowRecord] = []
        self.work: dict[str, dict[str, float]] = {}
        self._idle_window: WindowRecord | None = None
        self._open: dict[str, list[WindowHandle]] = {}
        self._trials: dict[str, int] = {}
        self._interrupted: set[tuple[str, int]] = set()
        self._sources_started = False
        self._result: RunResult | None = None
        self._started_at: str | None = None
        self.writer: RunWriter | None = None
        self._ranked: Any = None  # ranked.RankedRun with several ranks
        #: where the run's time goes (run.json's ``timings_s``)
        self.timings = Timings()
        #: closed windows' energy while the run goes (``live.py``)
        self.live = LiveWindows(self._live_recording, self._live_wait, self._primary_channels, self.warn)
        if self.listeners:  # live subscribers (an exporter's window gauge) hear every window's energy
            self.live.subscribe(self._to_listeners)

    # -- lifecycle -------------------------------------------------------------------------
    def warn(self, message: str) -> None:
        """Record a problem that does not stop the run (shown now, and kept in run.json; with
        several ranks, rank 0 shows every rank's)."""
        if message not in self.warnings:
            self.warnings.append(message)
            if self.coordinator.is_root:
                log.warning("warning: %s", message)

    def start(self) -> Measurement:
        """Claim the run directory, start the sources, wait until each channel has delivered.

        Any failure here is written to run.json (status ``incomplete`` and the reason) before
        it is raised, so a run directory never keeps saying "running" for a run that ended.
        With several ranks, rank 0 claims the directory; every rank starts its sources (the
        machine-wide ones in local rank 0 only), and the run starts once all have.
        """
        started = time.monotonic()
        coord = self.coordinator = connect(self._coordinator_arg, self.dist_timeout_s)
        self.clock = ClockModel()
        self._started_at = utc_now()
        if coord.distributed:
            from .ranked import RankedRun

            self._ranked = RankedRun(self)
            self._ranked.join(started)
        elif self.out is not None:
            self._claim(self.out)
        try:
            with self.timings.span("sources_start"):
                self._start_sources()
            if coord.distributed:
                self._ranked.started()
            if self.idle_s > 0:
                self.measure_idle(self.idle_s)
        except BaseException as e:
            self._abort(e)
            raise
        return self

    def _claim(self, out: Path) -> None:
        """Make ``out`` this run's: run.json, created with O_EXCL, says "running"."""
        self.writer = RunWriter(out)
        self.writer.claim(self._meta(INCOMPLETE, RUNNING.format(pid=os.getpid())))

    def _start_sources(self) -> None:
        assert self.clock is not None
        self.recorder = Recorder(
            self.sources,
            self.clock,
            self.out,
            warn=self.warn,
            devices=rank_devices(self.coordinator.world),
            rank=self.coordinator.rank,
            local_rank=self.coordinator.local_rank,
            listeners=self.listeners,
        )
        self.recorder.start()
        if self.writer is not None:  # the journal: enough to rebuild the run if this process dies
            self.writer.open_journals(self._meta(INCOMPLETE, None)["sources"])
        self._wait_for_first_samples()
        self._sources_started = True

    def _wait_for_first_samples(self) -> None:
        assert self.recorder is not None
        recorder = self.recorder
        missing = recorder.wait_for_samples(None, recorder.coverage_timeout_s() + 2.0)
        if recorder.failure is not None:  # said as run.json says it: the source named
            raise PowerSourceError(describe_exception(recorder.failure, recorder)) from recorder.failure
        if missing:
            raise PowerSourceError(recorder.no_samples_message(missing))

    def _abort(self, error: BaseException) -> None:
        """The run could not start: stop what started, and say why in run.json; if the sources
        did not start, nothing was measured and the claim is taken back."""
        if not self.coordinator.distributed and not self._sources_started:
            if self.recorder is not None:
                self.recorder.stop()
            if self.writer is not None:
                self.writer.release()
            return
        reason = describe_exception(error, self.recorder)
        if self.coordinator.distributed or (self.recorder is not None and self.recorder.running):
            try:
                self.finish(INCOMPLETE, reason)
                return
            except Exception as e:  # saving failed too: the status below is the last word
                reason = f"{reason}; saving failed: {e}"
        if self.writer is not None:
            self.writer.failed(self._meta(INCOMPLETE, reason, ended=True))

    def __enter__(self) -> Measurement:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._result is not None or self.recorder is None:
            return
        if exc is None:
            self.finish()
            if self.rank_error is not None:  # the block ended here, but another rank failed
                raise self.rank_error
        else:
            self.finish(INCOMPLETE, describe_exception(exc, self.recorder))

    # -- what the orchestrator asks ------------------------------------------------------------
    @contextmanager
    def span(self, what: str) -> Iterator[None]:
        """Count the time inside the block towards ``what`` in run.json's ``timings_s``."""
        with self.timings.span(what):
            yield

    def add_time(self, what: str, seconds: float) -> None:
        self.timings.add(what, seconds)

    def describe(self, **fields: Any) -> None:
        """Set run.json fields the run knows only now (the workload, its exit code...)."""
        self.meta.update(fields)

    def describe_config(self, **fields: Any) -> None:
        """Add to run.json's ``config`` what the run decided (the shortest window used...)."""
        self.meta.setdefault("config", {}).update(fields)

    def describe_failure(self, error: BaseException) -> str:
        """The reason an ``incomplete`` run gives for ``error`` (a failed source named first)."""
        return describe_exception(error, self.recorder)

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
        return dict(self.recorder.channels) if self.recorder is not None else {}

    @property
    def source_failure(self) -> PowerSourceError | None:
        """Why a source failed while the run went, if one did."""
        return self.recorder.failure if self.recorder is not None else None

    @contextmanager
    def interrupting_on_source_failure(self) -> Iterator[None]:
        """Inside the block a source that fails interrupts the main thread (SIGINT), so that
        even a blocking wait for a measured command ends promptly."""
        assert self.recorder is not None
        self.recorder.interrupt_on_failure = True
        try:
            yield
        finally:
            self.recorder.interrupt_on_failure = False

    # -- windows ---------------------------------------------------------------------------
    def measure_idle(self, duration_s: float) -> None:
        """Record a window of ``duration_s`` with nothing running; each channel's power in it
        becomes the idle baseline that dynamic energy subtracts. Units: s."""
        self.sync()
        self.coordinator.edge("measure the idle baseline")
        start = time.monotonic()
        time.sleep(duration_s)
        self.coordinator.edge("end the idle baseline")
        self._idle_window = WindowRecord("(idle)", 0, start, time.monotonic(), 1)
        self.timings.add("idle_baseline", self._idle_window.duration_s)

    def begin_window(
        self, name: str, iterations: int = 1, sync: Callable[[], None] | None = None
    ) -> WindowHandle:
        """Sync the device, then open a window named ``name`` (repeat names for trials).

        ``sync`` overrides the measurement's device sync for this window."""
        self._check_running()
        iterations = checked_iterations(iterations)
        sync = sync or self.sync
        sync()
        self.coordinator.edge(f"open window {name!r}")
        handle = WindowHandle(name, iterations, time.monotonic(), synced=sync is not no_sync, _submit=self.live.submit)
        self._open.setdefault(name, []).append(handle)
        return handle

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
        if iterations is not None:
            iterations = checked_iterations(iterations)
        (sync or self.sync)()
        stack = self._open.get(name)
        if not stack:
            raise UsageError(f"no open window named {name!r}")
        # a Ctrl-C, or a failing source's interrupt, held during the exchange comes after the
        # window is recorded: every rank passed the exchange, so every rank keeps the window
        with self.coordinator.holding_signals():
            self.coordinator.edge(f"close window {name!r}")
            end = time.monotonic()
            record = self._record_window(stack.pop(), end, iterations, interrupted)
        if self.recorder is not None and self.recorder.failure is not None:
            raise self.recorder.failure
        return record

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
        iterations = checked_iterations(iterations)
        start_s, end_s = float(start_s), float(end_s)
        if not (math.isfinite(start_s) and math.isfinite(end_s)) or end_s < start_s:
            raise UsageError(f"window {name!r}: edges {start_s!r}..{end_s!r} are not a finite span")
        if end_s > time.monotonic():
            raise UsageError(f"window {name!r} ends at {end_s:.6f} s, ahead of now (time.monotonic())")
        if self.records and end_s < self.records[-1].end_s:
            raise UsageError(
                f"window {name!r} ends at {end_s:.6f} s, before the last recorded window "
                f"({self.records[-1].end_s:.6f} s): record windows in the order of their ends"
            )
        handle = WindowHandle(name, iterations, start_s, synced=False, _submit=self.live.submit)
        with self.coordinator.holding_signals():
            return self._record_window(handle, end_s, None, False)

    def _record_window(
        self, handle: WindowHandle, end: float, iterations: int | None, interrupted: bool
    ) -> WindowRecord:
        """The closed window ``handle``, numbered and journalled (``end``: its closing edge)."""
        name = handle.name
        if iterations is not None:
            handle.iterations = iterations
        trial = self._trials.get(name, 0)
        self._trials[name] = trial + 1
        record = WindowRecord(name, trial, handle.start_s, end, handle.iterations, handle.synced)
        self.records.append(record)
        handle.record = record
        if self.live.watched:  # a subscriber hears of every window
            handle._pending = self.live.submit(record)
        if self.writer is not None and self.clock is not None:
            self.writer.window_closed(
                name, trial, self.clock.to_unix(record.start_s), self.clock.to_unix(end), record.iterations, record.synced
            )
        if interrupted:
            self._interrupted.add((name, trial))
            if self.writer is not None:
                self.writer.window_interrupted(name, trial)
        return record

    def discard_window(self, record: WindowRecord) -> None:
        """Forget the last closed window of its name (the orchestrator redoes one that came out
        too short); its trial number is given to the next window of that name."""
        if not self.records or self.records[-1] is not record:
            raise UsageError("only the last closed window can be discarded")
        self.records.pop()
        self._trials[record.phase] -= 1
        self.live.forget(record)
        if self.writer is not None:
            self.writer.window_discarded(record.phase, record.trial)

    @contextmanager
    def window(self, name: str, iterations: int = 1):
        """``with m.window("step", iterations=100):`` - synced at both edges."""
        handle = self.begin_window(name, iterations)
        try:
            yield handle
        except BaseException:
            self._open[name].remove(handle)  # a window whose work failed measures nothing
            raise
        self.end_window(name)

    def _to_listeners(self, energy: LiveEnergy) -> None:
        if self.recorder is not None:
            self.recorder.live.window_rows(energy.record.phase, energy.record.trial, energy.rows.to_dict("records"))

    def on_window_energy(self, callback: Callable[[LiveEnergy], None]) -> None:
        """Call ``callback(LiveEnergy)`` with each window's energy as soon as it is known (on a
        thread of the measurement's own, in the order windows close): for live output."""
        self.live.subscribe(callback)

    def window_energy(
        self, record: WindowRecord, wait: bool = True, timeout_s: float | None = None
    ) -> LiveEnergy | None:
        """A closed window's energy while the run goes (``end_window``'s record); ``None`` while
        it is computed (``wait=False``, or past ``timeout_s``)."""
        return self.live.submit(record).result(wait, timeout_s)

    def _live_recording(self, since_s: float) -> Recording:
        """The recording from ``since_s`` on (monotonic), without the raw record."""
        assert self.recorder is not None
        store = self.recorder.store
        series = {n: store.series_since(n, since_s) for n in store.channels}
        # not every sample so far, per window; the synced starts since, so that a live window
        # ending just before one reads its end as the final run will
        opened = self._synced_starts_since(since_s)
        return self._recording_of(series, empty_samples_frame(), opened_s=opened)

    def _synced_starts_since(self, since_s: float) -> list[float]:
        """Starts at or after ``since_s`` of windows opened after a device sync, closed or still
        open. Windows are recorded as they close, in the order of their ends, so only the tail
        of the record is read: a live number in a run of many windows costs no more than in a
        short one."""
        starts = []
        records = self.records
        k = len(records)
        while k > 0:
            k -= 1
            try:
                r = records[k]
            except IndexError:  # the last window was discarded meanwhile (discard_window)
                continue
            if r.end_s < since_s:
                break
            if r.synced and r.start_s >= since_s:
                starts.append(r.start_s)
        for stack in list(self._open.values()):
            starts += [h.start_s for h in list(stack) if h.synced and h.start_s >= since_s]
        return starts

    def _live_wait(self, end_s: float) -> list[str]:
        assert self.recorder is not None
        return self.recorder.wait_for_samples(end_s, self.recorder.coverage_timeout_s())

    def _primary_channels(self) -> list[str]:
        if self.recorder is None:
            return []
        return [n for n, c in self.recorder.store.channels.items() if c.primary and c.integrable]

    def _seen(self, record: WindowRecord) -> dict[str, int]:
        assert self.recorder is not None
        return {
            n: len(s.between(record.start_s - 1.0, record.end_s + 1.0))
            for n, s in self.recorder.store.all_series().items()
        }

    def set_work(self, name: str, work: Mapping[str, float]) -> None:
        """Work per iteration of window ``name`` (e.g. ``{"tokens": 128}``)."""
        self.work[name] = dict(work)

    def _check_running(self) -> None:
        if self.recorder is None:
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
        assert self.recorder is not None
        last_end = max((r.end_s for r in self.records), default=None)
        if last_end is not None:
            self.recorder.wait_for_samples(last_end, self.recorder.coverage_timeout_s())
        meta = self._meta(INCOMPLETE, RUNNING.format(pid=os.getpid()))
        return assemble(self.recording(), meta, self.workload, self.aligner, list(self.warnings))

    def finish(self, status: str = COMPLETE, reason: str | None = None) -> RunResult:
        """Wait for samples past the last window, stop the sources, integrate, save.

        With several ranks every rank integrates its own part and sends it to rank 0, which
        merges and saves the run (``energyframe.ranks.merge``); rank 0 returns the whole run, the
        others their own part. A run that ended because of another rank sets ``rank_error``."""
        if self._result is not None:
            return self._result
        if self._ranked is not None:
            self._result = self._ranked.finish(status, reason)
            return self._result
        assert self.recorder is not None and self.clock is not None
        self.live.stop()  # the windows asked for are computed with the sources still running
        with self.timings.span("stop_sources"):
            status, reason = self.stop_recording(status, reason)
        with self.timings.span("integrate"):
            result = assemble(
                self.recording(), self._meta(status, reason, ended=True), self.workload, self.aligner, self.warnings
            )
            if self.live.computed():  # which live numbers the whole run changed, and why
                live = self.live.reconcile(result.windows, self._seen)
                result = replace(result, meta={**result.meta, "live": live})
        self._result = self.save(result, {})
        return self._result

    def save(
        self, result: RunResult, extra: Mapping[str, Mapping[str, bytes]], own_files: bool = True
    ) -> RunResult:
        """Save the run through its writer (in memory only without ``out``): the tables, the
        workload's files (``own_files``; rank 0's merged run has each rank's in ``extra``, by
        folder), run.json last. Returns the result with its final timings."""
        if self.writer is None:
            return self.with_timings(result)
        files = dict(extra)
        if self.workload is not None and own_files:
            files[""] = extra_files(result, self.workload, self.warn)
        started = time.monotonic()

        def final(tables_saved: RunResult) -> RunResult:
            # run.json is written once, last: it carries the time the save took up to it
            self.timings.add("save", time.monotonic() - started)
            return self.with_timings(tables_saved)

        try:
            saved = self.writer.save(result, files, final, self.warn)
        except (StoreError, KeyboardInterrupt) as e:  # a full disk, or Ctrl-C / SIGTERM while saving
            reason = f"{result.reason}; then " if result.reason else ""
            cause = f"the run could not be saved: {e}" if isinstance(e, StoreError) else "interrupted while saving"
            self.writer.failed(self._meta(INCOMPLETE, f"{reason}{cause}", ended=True))
            raise
        if self.recorder is not None:
            self.recorder.store.discard_partial()
        self.writer.done()
        return saved

    def with_timings(self, result: RunResult) -> RunResult:
        return replace(result, meta={**result.meta, "timings_s": self.timings.to_json()})

    def stop_recording(self, status: str, reason: str | None) -> tuple[str, str | None]:
        """Wait until the last window is covered, stop the sources; the status that results."""
        assert self.recorder is not None and self.clock is not None
        recorder = self.recorder
        last_end = max((r.end_s for r in self.records), default=None)
        if last_end is not None:
            try:
                missing = recorder.wait_for_samples(last_end, recorder.coverage_timeout_s())
            except KeyboardInterrupt:
                missing = []
                status, reason = INCOMPLETE, reason or "interrupted by SIGINT while finishing"
            for name in missing:
                self.warn(f"channel {name!r} delivered no sample after the last window closed")
        recorder.stop()
        self.clock.finish()
        if recorder.failure is not None and status == COMPLETE:
            status, reason = INCOMPLETE, describe_exception(recorder.failure, recorder)
        drift = self.clock.wall_drift_s
        if drift is not None and abs(drift) > 0.01:
            self.warn(
                f"the wall clock moved {drift * 1e3:+.1f} ms against the monotonic clock during the "
                "run; wall-stamped samples (NVML, nvidia-smi) may be misplaced by up to that much"
            )
        return status, reason

    def recording(self) -> Recording:
        """Everything the run recorded, for ``assemble``."""
        assert self.recorder is not None
        store = self.recorder.store
        return self._recording_of(
            store.all_series(),
            store.to_frame(),
            rejected=store.rejected_times(),
            rejected_counts=store.rejected_json(),
            records=list(self.records),
            idle_window=self._idle_window,
            work=dict(self.work),
            interrupted=frozenset(self._interrupted),
        )

    def _recording_of(self, series, samples, **more: Any) -> Recording:
        """A recording of these series and samples, with the run's clock, channels and sources."""
        assert self.recorder is not None and self.clock is not None
        store = self.recorder.store
        return Recording(
            clock=self.clock,
            channels=dict(store.channels),
            channel_source=dict(store.channel_source),
            series=series,
            samples=samples,
            sources=list(self.sources),
            **more,
        )

    def _meta(self, status: str, reason: str | None, ended: bool = False) -> dict[str, Any]:
        assert self.clock is not None
        return run_meta(
            status=status,
            reason=reason,
            started_at=self._started_at,
            ended=ended,
            clock=self.clock,
            sources=self.sources,
            source_channels=self.recorder.source_channels if self.recorder else {},
            extra=self.meta,
            notes=self.notes,
            warnings=self.warnings,
        )


def checked_iterations(iterations: object) -> int:
    """A window's iteration count: a whole number of at least 1.

    Raises:
        UsageError: anything else (a negative or fractional count would give wrong figures per
            iteration).
    """
    if isinstance(iterations, bool) or not isinstance(iterations, numbers.Integral) or iterations < 1:
        raise UsageError(f"iterations must be a whole number of at least 1, got {iterations!r}")
    return int(iterations)


def describe_exception(exc: BaseException, recorder: Recorder | None) -> str:
    """The ``reason`` of an incomplete run, said once."""
    if recorder is not None and recorder.failure is not None:
        return f"power source {recorder.failed_source!r} failed: {recorder.failure}"
    if isinstance(exc, (RunInterrupted, EnergyFrameError)):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT"
    return f"{type(exc).__name__}: {exc}"
