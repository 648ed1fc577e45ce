"""``ef.measure()``: named windows around the user's own code, with energy from every source.

    with ef.measure(power=["nvml"]) as m:
        with m.window("train-step", iterations=100):
            ...
    print(m.result.table())

The orchestrator (``ef.run``) measures workloads through the same ``Measurement``. This module
owns the live part of a run: the run directory's claim and status, the sources (through the
``Recorder``), the windows and their journal. Turning what was recorded into a result is
``assemble``'s straight pipeline.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .assemble import Recording, TimeAligner, assemble, run_meta, save, utc_now
from .clock import ClockModel
from .errors import EnergyFrameError, PowerSourceError, RunInterrupted, StoreError, UsageError
from .plugin import PowerSource, Workload
from .recorder import Recorder
from .registry import PowerArg, resolve_power
from .results import COMPLETE, INCOMPLETE, RunResult
from .store import RUN_JSON, WINDOWS_PARTIAL, WindowJournal, claim_run_dir, write_json, write_status_json
from .sync import resolve_sync
from .timings import Timings
from .windows import WindowRecord

log = logging.getLogger("energyframe")

#: run.json's reason while the run is going; ``energyframe show`` recognises it
RUNNING = "running (pid {pid}); if this stays, the process died"


@dataclass
class WindowHandle:
    """An open window; set ``iterations`` before it closes if the count is known only then."""

    name: str
    iterations: int
    start_s: float


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
    ) -> None:
        self.sources = list(sources)
        self.out = Path(out) if out is not None else None
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
        self._result: RunResult | None = None
        self._started_at: str | None = None
        self._journal: WindowJournal | None = None
        #: where the run's time goes (run.json's ``timings_s``)
        self.timings = Timings()

    # -- lifecycle -------------------------------------------------------------------------
    def warn(self, message: str) -> None:
        """Record a problem that does not stop the run (shown now, and kept in run.json)."""
        if message not in self.warnings:
            self.warnings.append(message)
            log.warning("warning: %s", message)

    def start(self) -> Measurement:
        """Claim the run directory, start the sources, wait until each channel has delivered.

        Any failure here is written to run.json (status ``incomplete`` and the reason) before
        it is raised, so a run directory never keeps saying "running" for a run that ended.
        """
        if self.out is not None:
            claim_run_dir(self.out)
        self.clock = ClockModel()
        self._started_at = utc_now()
        if self.out is not None:
            self._write_status(INCOMPLETE, RUNNING.format(pid=os.getpid()))
        try:
            with self.timings.span("sources_start"):
                self.recorder = Recorder(self.sources, self.clock, self.out, warn=self.warn)
                self.recorder.start()
                if self.out is not None:  # now with the channels, so that a dead run can be rebuilt
                    self._journal = WindowJournal(self.out / WINDOWS_PARTIAL)
                    self._write_status(INCOMPLETE, RUNNING.format(pid=os.getpid()))
                self._wait_for_first_samples()
            if self.idle_s > 0:
                self.measure_idle(self.idle_s)
        except BaseException as e:
            self._abort(e)
            raise
        return self

    def _wait_for_first_samples(self) -> None:
        assert self.recorder is not None
        recorder = self.recorder
        missing = recorder.wait_for_samples(None, recorder.coverage_timeout_s() + 2.0)
        if recorder.failure is not None:
            raise recorder.failure
        if missing:
            raise PowerSourceError(
                "no samples arrived from channel(s) " + ", ".join(missing) + " after the sources started"
            )

    def _abort(self, error: BaseException) -> None:
        """The run could not start: stop what started, and say why in run.json."""
        reason = describe_exception(error, self.recorder)
        if self.recorder is not None and self.recorder.running:
            try:
                self.finish(INCOMPLETE, reason)
                return
            except Exception as e:  # saving failed too: the status below is the last word
                reason = f"{reason}; saving failed: {e}"
        if self.out is not None:
            self._write_status(INCOMPLETE, reason, ended=True)

    def __enter__(self) -> Measurement:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._result is not None or self.recorder is None:
            return
        if exc is None:
            self.finish()
        else:
            self.finish(INCOMPLETE, describe_exception(exc, self.recorder))

    # -- windows ---------------------------------------------------------------------------
    def measure_idle(self, duration_s: float) -> None:
        """Record a window of ``duration_s`` with nothing running; each channel's power in it
        becomes the idle baseline that dynamic energy subtracts. Units: s."""
        self.sync()
        start = time.monotonic()
        time.sleep(duration_s)
        self._idle_window = WindowRecord("(idle)", 0, start, time.monotonic(), 1)
        self.timings.add("idle_baseline", self._idle_window.duration_s)

    def begin_window(
        self, name: str, iterations: int = 1, sync: Callable[[], None] | None = None
    ) -> WindowHandle:
        """Sync the device, then open a window named ``name`` (repeat names for trials).

        ``sync`` overrides the measurement's device sync for this window."""
        self._check_running()
        (sync or self.sync)()
        handle = WindowHandle(name, iterations, time.monotonic())
        self._open.setdefault(name, []).append(handle)
        return handle

    def end_window(
        self, name: str, iterations: int | None = None, sync: Callable[[], None] | None = None
    ) -> WindowRecord:
        """Sync the device, then close the innermost open window named ``name``."""
        (sync or self.sync)()
        end = time.monotonic()
        stack = self._open.get(name)
        if not stack:
            raise UsageError(f"no open window named {name!r}")
        handle = stack.pop()
        if iterations is not None:
            handle.iterations = iterations
        trial = self._trials.get(name, 0)
        self._trials[name] = trial + 1
        record = WindowRecord(name, trial, handle.start_s, end, handle.iterations)
        self.records.append(record)
        if self._journal is not None and self.clock is not None:
            self._journal.closed(
                name, trial, self.clock.to_unix(record.start_s), self.clock.to_unix(end), record.iterations
            )
        if self.recorder is not None and self.recorder.failure is not None:
            raise self.recorder.failure
        return record

    def discard_window(self, record: WindowRecord) -> None:
        """Forget the last closed window of its name (the orchestrator redoes one that came out
        too short); its trial number is given to the next window of that name."""
        if not self.records or self.records[-1] is not record:
            raise UsageError("only the last closed window can be discarded")
        self.records.pop()
        self._trials[record.phase] -= 1
        if self._journal is not None:
            self._journal.discarded(record.phase, record.trial)

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

    def finish(self, status: str = COMPLETE, reason: str | None = None) -> RunResult:
        """Wait for samples past the last window, stop the sources, integrate, save."""
        if self._result is not None:
            return self._result
        assert self.recorder is not None and self.clock is not None
        with self.timings.span("stop_sources"):
            status, reason = self._stop_recording(status, reason)
        with self.timings.span("integrate"):
            recording = self._recording()
            meta = self._meta(status, reason, ended=True)
            self._result = assemble(recording, meta, self.workload, self.aligner, self.warnings)
        if self.out is None:
            self._result = replace(self._result, meta={**self._result.meta, "timings_s": self.timings.to_json()})
        if self.out is not None:
            try:
                with self.timings.span("save"):
                    save(self._result, self.out, self.workload, self.warn)
                self._result = replace(self._result, meta={**self._result.meta, "timings_s": self.timings.to_json()})
                write_json(self.out / RUN_JSON, self._result.to_json())
            except StoreError as e:
                # the journals stay: what was recorded is still on disk, and run.json says so
                if self._journal is not None:
                    self._journal.close()
                reason = f"{reason}; then " if reason else ""
                self._write_status(INCOMPLETE, f"{reason}the run could not be saved: {e}", ended=True)
                raise
            self.recorder.store.discard_partial()
            if self._journal is not None:
                self._journal.remove()
        return self._result

    def _stop_recording(self, status: str, reason: str | None) -> tuple[str, str | None]:
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

    def _recording(self) -> Recording:
        assert self.recorder is not None and self.clock is not None
        store = self.recorder.store
        return Recording(
            clock=self.clock,
            channels=dict(store.channels),
            channel_source=dict(store.channel_source),
            series=store.all_series(),
            samples=store.to_frame(),
            rejected=store.rejected_times(),
            rejected_counts=store.rejected_json(),
            records=list(self.records),
            idle_window=self._idle_window,
            work=dict(self.work),
            sources=list(self.sources),
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

    def _write_status(self, status: str, reason: str | None, ended: bool = False) -> None:
        assert self.out is not None
        write_status_json(self.out / RUN_JSON, self._meta(status, reason, ended))


def describe_exception(exc: BaseException, recorder: Recorder | None) -> str:
    """The ``reason`` of an incomplete run, said once."""
    if recorder is not None and recorder.failure is not None:
        return f"power source {recorder.failed_source!r} failed: {recorder.failure}"
    if isinstance(exc, (RunInterrupted, EnergyFrameError)):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT"
    return f"{type(exc).__name__}: {exc}"


def measure(
    power: str | Sequence[PowerArg] | None = "auto",
    *,
    out: Path | str | None = None,
    sync: str | Callable[[], None] | None = "auto",
    idle_s: float = 0.0,
    aligner: TimeAligner | str | None = "auto",
) -> Measurement:
    """Start measuring: ``with ef.measure(power=["nvml"]) as m: ...``.

    Args:
        power: ``"auto"`` (what this machine has), ``"none"``/``None``/``[]`` (timing only),
            or a list of specs (``"nvml:gpus=0"``) or ``PowerSource`` instances.
        out: save the run there when the block ends (samples are logged there while it runs).
        sync: device sync at window edges: ``"auto"``, ``None`` or a callable.
        idle_s: measure every channel's idle power for this long first, for dynamic energy.
        aligner: ``"auto"`` (align wall meters), ``None``, or a callable.
    """
    sources, notes = resolve_power(power)
    return Measurement(sources, out=out, sync=sync, aligner=aligner, notes=notes, idle_s=idle_s)




def _fresh(power: str | Sequence[PowerArg] | None) -> str | list[PowerArg] | None:
    """Power for one more measurement: a source instance (which starts only once) is rebuilt
    from its class and options; specs are used as they are."""
    if power is None or isinstance(power, str):
        return power
    fresh: list[PowerArg] = []
    for item in power:
        if isinstance(item, PowerSource):
            try:
                item = type(item)(name=item.name, **item.options)
            except TypeError as e:
                raise UsageError(
                    f"power source {item.name!r} cannot be rebuilt for another call ({e}); give "
                    "ef.measured a spec such as 'nvml' instead of an instance"
                ) from e
        fresh.append(item)
    return fresh


def measured(
    func: Callable[..., Any] | None = None,
    *,
    power: str | Sequence[PowerArg] | None = "auto",
    out: Path | str | None = None,
    name: str | None = None,
    iterations: int = 1,
    sync: str | Callable[[], None] | None = "auto",
) -> Any:
    """Measure every call of a function as one window (CodeCarbon's ``@track_emissions``).

        @ef.measured(power="auto", out="runs")
        def train_epoch(): ...

        train_epoch()                        # measured; its run saved under runs/
        print(train_epoch.last_result.table())

    Args:
        power: as for ``measure``; resolved at each call. Specs are best: a source instance runs
            once, so it is rebuilt from its options for each call.
        out: a folder; each call is saved in its own run directory inside it
            (``<UTC time>-<name>``). ``None`` keeps results in memory only.
        name: the window's name (the function's name by default).
        iterations: iterations one call runs, for per-iteration figures.
        sync: device sync at the window's edges.

    The function's return value and exceptions pass through; a call that raised is saved as
    ``incomplete``. The last call's ``RunResult`` is the wrapper's ``last_result``.
    """
    import functools

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        label = str(name or getattr(fn, "__name__", "call"))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from .store import default_run_dir

            run_dir = default_run_dir(label, root=out) if out is not None else None
            m = measure(_fresh(power), out=run_dir, sync=sync)
            try:
                with m:
                    with m.window(label, iterations=iterations):
                        value = fn(*args, **kwargs)
            finally:
                if m._result is not None:
                    wrapper.last_result = m._result  # type: ignore[attr-defined]
            return value

        wrapper.last_result = None  # type: ignore[attr-defined]
        return wrapper

    return decorate(func) if func is not None else decorate


__all__ = ["Measurement", "WindowHandle", "describe_exception", "measure", "measured"]
