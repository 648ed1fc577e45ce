"""``ef.measure()``: named windows around the user's own code, with energy from every source.

    with ef.measure(power=["nvml"]) as m:
        with m.window("train-step", iterations=100):
            ...
    print(m.result.table())

The orchestrator (``ef.run``) measures workloads through the same ``Measurement``.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import registry
from .align import MeterAligner
from .clock import ChannelTimeMap, ClockModel
from .errors import PowerSourceError, RunInterrupted, UsageError
from .interfaces import Channel, DerivedTable, PowerSource, Scope, WindowAnnotation
from .options import Spec
from .recorder import Recorder
from .results import COMPLETE, INCOMPLETE, RunResult
from .samples import SampleSeries
from .store import FORMAT_VERSION, RUN_JSON, write_bytes, write_json
from .sync import resolve_sync
from .versions import host_info, library_versions, plugin_distribution
from .windows import IdleBaseline, WindowRecord, compute_windows, idle_baselines, summarize

log = logging.getLogger("energyframe")

#: called after the run with every channel and its samples; returns per-channel time corrections
#: (a wall meter's lag and drift). The wall-meter alignment plugs in here.
TimeAligner = Callable[
    [Mapping[str, Channel], Mapping[str, SampleSeries], Sequence[WindowRecord]], Mapping[str, ChannelTimeMap]
]

PowerArg = str | Spec | PowerSource


def auto_power_sources() -> tuple[list[PowerSource], list[str]]:
    """The sources this machine has: per scope, the available one of highest priority.

    Returns the sources and one note per candidate saying why it was or was not chosen.
    """
    best: dict[str, tuple[int, str, type]] = {}
    notes = []
    for entry in registry.entries(registry.POWER):
        cls = entry.cls
        if cls is None or entry.error or getattr(cls, "AUTO_PRIORITY", None) is None:
            continue
        try:
            found = cls.detect()
        except Exception as e:  # detection must never break a run
            notes.append(f"{entry.name}: detection failed ({e})")
            continue
        notes.append(f"{entry.name}: {'available' if found.available else 'not available'} ({found.reason})")
        if found.available:
            scope = cls.AUTO_SCOPE.value
            if scope not in best or cls.AUTO_PRIORITY > best[scope][0]:
                best[scope] = (cls.AUTO_PRIORITY, entry.name, cls)
    sources = [cls(name=name) for _, name, cls in sorted(best.values(), key=lambda b: b[1])]
    return sources, notes


def resolve_power(power: str | Sequence[PowerArg] | None) -> tuple[list[PowerSource], list[str]]:
    """``"auto"``: detect; ``None`` or ``[]``: timing only; else specs or instances."""
    if power == "auto":
        sources, notes = auto_power_sources()
        chosen = ", ".join(s.name for s in sources) or "none (timing only)"
        return sources, [f"power sources auto-detected: {chosen}", *notes]
    if power is None:
        return [], []
    if isinstance(power, (str, Spec, PowerSource)):
        power = [power]
    return list(registry.create_all(registry.POWER, list(power))), []


@dataclass
class WindowHandle:
    """An open window; set ``iterations`` before it closes if the count is known only then."""

    name: str
    iterations: int
    start_s: float


class Measurement:
    """Power sources running in the background and the windows measured against them.

    Args:
        sources: started power sources (see ``resolve_power``).
        out: run directory to save into (samples are appended there while the run goes);
            ``None`` keeps everything in memory.
        sync: how to wait for the device at window edges: ``"auto"`` (torch CUDA when in
            use), ``None``, or a callable.
        aligner: per-channel time corrections computed after the run: ``"auto"`` aligns wall
            meters against the finest GPU (or CPU) channel (``energyframe.align``); ``None``
            leaves every timestamp as recorded; or a callable.
        meta: extra run.json fields (command line, workload, config).
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
    ) -> None:
        self.sources = list(sources)
        self.out = Path(out) if out is not None else None
        self.sync = resolve_sync(sync)
        self.aligner = aligner
        self.meta: dict[str, Any] = dict(meta or {})
        self.warnings: list[str] = []
        self.notes = list(notes)
        self.clock: ClockModel | None = None
        self.recorder: Recorder | None = None
        self.records: list[WindowRecord] = []
        self.idle_s = idle_s
        self.idle: dict[str, IdleBaseline] = {}
        self._idle_window: WindowRecord | None = None
        self.work: dict[str, dict[str, float]] = {}
        self._open: dict[str, list[WindowHandle]] = {}
        self._trials: dict[str, int] = {}
        self._result: RunResult | None = None
        self._started_at: str | None = None
        #: computes a workload's derived tables (pipeline totals) from the integrated result
        self.deriver: Callable[[RunResult], Sequence[DerivedTable]] | None = None
        #: a workload's extra files for the run directory (reports, plots)
        self.filer: Callable[[RunResult], Mapping[str, bytes]] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
        log.warning(message)

    def start(self) -> Measurement:
        """Start the sources and wait until each channel has delivered a first sample."""
        if self.out is not None:
            if (self.out / RUN_JSON).exists():
                raise UsageError(f"{self.out} already holds a run; choose another --out directory")
            self.out.mkdir(parents=True, exist_ok=True)
        self.clock = ClockModel()
        self._started_at = _utc_now()
        self.recorder = Recorder(self.sources, self.clock, self.out, warn=self.warn)
        if self.out is not None:
            self._write_meta(INCOMPLETE, f"running (pid {os.getpid()}); if this stays, the process died")
        self.recorder.start()
        missing = self.recorder.wait_for_samples(None, self.recorder.coverage_timeout_s() + 2.0)
        if self.recorder.failure is not None:
            self.recorder.stop()
            raise self.recorder.failure
        if missing:
            self.recorder.stop()
            raise PowerSourceError(
                "no samples arrived from channel(s) " + ", ".join(missing) + " after the sources started"
            )
        if self.idle_s > 0:
            try:
                self.measure_idle(self.idle_s)
            except BaseException as e:
                self.finish(INCOMPLETE, describe_exception(e, self.recorder))
                raise
        return self

    def __enter__(self) -> Measurement:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._result is not None:
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
            status, reason = INCOMPLETE, f"power source {recorder.failed_source!r} failed: {recorder.failure}"
        drift = self.clock.wall_drift_s
        if drift is not None and abs(drift) > 0.01:
            self.warn(
                f"the wall clock moved {drift * 1e3:+.1f} ms against the monotonic clock during the "
                "run; wall-stamped samples (NVML, nvidia-smi) may be misplaced by up to that much"
            )
        self._result = self._with_derived(self._build_result(status, reason))
        if self.out is not None:
            self._result.save(self.out)
            recorder.store.discard_partial()
            self._write_extra_files()
        return self._result

    def _build_result(self, status: str, reason: str | None) -> RunResult:
        assert self.recorder is not None and self.clock is not None
        store = self.recorder.store
        channels = store.channels
        series = store.all_series()
        time_maps: dict[str, ChannelTimeMap] = {}
        aligner = self.aligner
        if aligner == "auto":
            aligner = MeterAligner() if any(c.scope == Scope.SYSTEM_WALL for c in channels.values()) else None
        if aligner is not None:
            try:
                time_maps = dict(aligner(channels, series, self.records))
            except Exception as e:  # alignment is a correction; without it the raw times stand
                self.warn(f"time alignment failed, raw timestamps used: {type(e).__name__}: {e}")
            if isinstance(aligner, MeterAligner):
                self.meta["alignment"] = aligner.report()
                for warning in aligner.warnings:
                    self.warn(warning)
        aligned = {n: s.shifted(time_maps.get(n, ChannelTimeMap())) for n, s in series.items()}
        if self._idle_window is not None:
            self.idle = idle_baselines(self._idle_window, channels, aligned)
        annotate = self._annotator(aligned)
        windows = compute_windows(self.records, channels, aligned, self.clock, self.idle, annotate)
        summaries = tuple(summarize(windows, self.work))
        meta = self._meta(status, reason, time_maps, ended=True)
        return RunResult(meta, windows, store.to_frame(), summaries)

    def _write_extra_files(self) -> None:
        if self.filer is None or self._result.windows.empty:
            return
        try:
            files = dict(self.filer(self._result))
        except Exception as e:  # a report that fails must not lose the run
            self.warn(f"extra files could not be written: {type(e).__name__}: {e}")
            return
        for name, data in files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"extra file names are plain file names, not {name!r}")
            write_bytes(self.out / name, data)

    def _with_derived(self, result: RunResult) -> RunResult:
        if self.deriver is None or result.windows.empty:
            return result
        try:
            tables = list(self.deriver(result))
        except Exception as e:  # derived figures must never lose the measured ones
            self.warn(f"derived figures could not be computed: {type(e).__name__}: {e}")
            tables = []
        meta = dict(result.meta)
        meta["derived"] = [t.to_json() for t in tables]
        meta["warnings"] = list(self.warnings)
        return replace(result, meta=meta)

    def _annotator(self, series: Mapping[str, SampleSeries]):
        assert self.recorder is not None
        channels_of = self.recorder.source_channels
        owner = {c.name: s for s in self.sources for c in channels_of.get(s.name, [])}

        def annotate(channel: Channel, start_s: float, end_s: float) -> WindowAnnotation:
            source = owner.get(channel.name)
            if source is None:
                return WindowAnnotation()
            own = {c.name: series[c.name] for c in channels_of[source.name]}
            try:
                return source.annotate(channel, start_s, end_s, own)
            except Exception as e:
                self.warn(f"{source.name!r} could not annotate a window: {e}")
                return WindowAnnotation()

        return annotate

    def _sources_meta(self) -> list[dict]:
        out = []
        channels = self.recorder.source_channels if self.recorder else {}
        for source in self.sources:
            dist, version = plugin_distribution(type(source))
            try:
                info = dict(source.info())
            except Exception as e:
                info = {"error": str(e)}
            out.append(
                {
                    "name": source.name,
                    "class": f"{type(source).__module__}.{type(source).__qualname__}",
                    "distribution": dist,
                    "version": version,
                    "options": source.options,
                    "info": info,
                    "channels": [c.to_json() for c in channels.get(source.name, [])],
                }
            )
        return out

    def _meta(
        self,
        status: str,
        reason: str | None,
        time_maps: Mapping[str, ChannelTimeMap] | None = None,
        ended: bool = False,
    ) -> dict:
        assert self.clock is not None
        channels = self.recorder.store.channels if self.recorder else {}
        meta = {
            "format_version": FORMAT_VERSION,
            "status": status,
            "reason": reason,
            "started_at": self._started_at,
            "ended_at": _utc_now() if ended else None,
            "command_line": list(sys.argv),
            "host": host_info(),
            "versions": library_versions(),
            "clock": self.clock.to_json(),
            "sources": self._sources_meta(),
            "primary_channels": [n for n, c in channels.items() if c.primary and c.integrable],
            "idle_baseline": {
                n: {"power_w": b.power_w, "duration_s": b.duration_s, "flags": list(b.flags)}
                for n, b in self.idle.items()
            },
            "time_maps": {
                n: {"lag_s": m.lag_s, "drift": m.drift, "reference_s": m.reference_s}
                for n, m in (time_maps or {}).items()
            },
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }
        meta.update(self.meta)
        return meta

    def _write_meta(self, status: str, reason: str | None) -> None:
        assert self.out is not None
        write_json(self.out / RUN_JSON, self._meta(status, reason))


def describe_exception(exc: BaseException, recorder: Recorder | None) -> str:
    """The ``reason`` of an incomplete run."""
    if recorder is not None and recorder.failure is not None:
        return f"power source {recorder.failed_source!r} failed: {recorder.failure}"
    if isinstance(exc, RunInterrupted):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT"
    return f"{type(exc).__name__}: {exc}"


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


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
        power: ``"auto"`` (what this machine has), ``None``/``[]`` (timing only), or a list of
            specs (``"nvml:gpus=0"``) or ``PowerSource`` instances.
        out: save the run there when the block ends (samples are logged there while it runs).
        sync: device sync at window edges: ``"auto"``, ``None`` or a callable.
        idle_s: measure every channel's idle power for this long first, for dynamic energy.
        aligner: ``"auto"`` (align wall meters), ``None``, or a callable.
    """
    sources, notes = resolve_power(power)
    return Measurement(sources, out=out, sync=sync, aligner=aligner, notes=notes, idle_s=idle_s)


__all__ = ["Measurement", "WindowHandle", "measure", "auto_power_sources", "resolve_power"]
