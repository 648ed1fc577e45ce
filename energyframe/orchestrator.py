"""The run lifecycle behind ``energyframe run`` and ``ef.run``.

start sources -> set up the workload -> optional idle baseline -> for each phase: warm up,
calibrate the iterations per window, measure ``trials`` windows (each opened and closed after a
device sync, on the monotonic clock), optional cool-down between them -> tear down -> stop
sources -> integrate every channel over every window -> save -> report.

Nothing here knows about a vendor: sources, workloads and reporters are plugins.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import registry
from .align import SYNC_PULSE
from .errors import EnergyFrameError, PowerSourceError, RunInterrupted, UsageError, WorkloadError
from .interfaces import Phase, Reporter, Workload
from .measurement import Measurement, PowerArg, describe_exception, resolve_power
from .options import Spec
from .results import COMPLETE, INCOMPLETE, RunResult
from .versions import plugin_distribution

log = logging.getLogger("energyframe")

#: window length when no power source sets one (timing only): long enough that the clock's
#: resolution and one iteration's jitter do not matter
TIMING_ONLY_MIN_WINDOW_S = 0.1


#: used for every RunConfig field that neither the user nor the workload sets
DEFAULTS = {
    "trials": 5,
    "min_window_s": None,  # min_window_periods update periods of the coarsest source
    "min_window_periods": 10.0,
    "warmup": None,  # warm up for warmup_s instead
    "warmup_s": 1.0,
    "cooldown_s": 0.0,
    "idle_s": 0.0,
    "guard_s": 0.0,
    "sync_pulse": False,
    "max_iterations": 1_000_000_000,
    "runs": None,  # no floor on the timed iterations beyond the calibrated windows
}


@dataclass(frozen=True)
class RunConfig:
    """How phases are measured. A field left ``None`` takes the workload's preference
    (``Workload.run_defaults``), else ``DEFAULTS``.

    Args:
        trials: windows per phase (a phase may fix its own). Default 5.
        min_window_s: shortest window; by default ``min_window_periods`` update periods of the
            coarsest primary source (1 s for a counter that ticks every 100 ms). Units: s.
        min_window_periods: the default window in update periods of the coarsest source.
            Default 10; a per-layer pipeline of many phases prefers 2.5.
        warmup: warm-up iterations before calibrating; by default warm up for ``warmup_s``.
        warmup_s: warm-up time when ``warmup`` is not given. Default 1 s. Units: s.
        cooldown_s: pause between a phase's windows. Default 0. Units: s.
        idle_s: measure idle power this long after set-up, for dynamic energy. Default 0. Units: s.
        guard_s: keep a phase running this long before its first window and after its last,
            unmeasured, so that a lagging meter sees a steady load at every window edge. Units: s.
        sync_pulse: run a few bursts of full load before the first phase and after the last, so
            that wall meters can be aligned even when the workload is flat.
        max_iterations: upper bound of the calibrated iterations per window.
        runs: at least this many timed iterations per phase over all its trials (the earlier
            tools' ``--runs``): windows grow beyond the calibrated length when needed.
    """

    trials: int | None = None
    min_window_s: float | None = None
    min_window_periods: float | None = None
    warmup: int | None = None
    warmup_s: float | None = None
    cooldown_s: float | None = None
    idle_s: float | None = None
    guard_s: float | None = None
    sync_pulse: bool | None = None
    max_iterations: int | None = None
    runs: int | None = None

    def __post_init__(self) -> None:
        if self.trials is not None and self.trials < 1:
            raise UsageError(f"trials must be at least 1, got {self.trials}")
        if self.runs is not None and self.runs < 1:
            raise UsageError(f"runs must be at least 1, got {self.runs}")
        for name in ("warmup_s", "cooldown_s", "idle_s", "guard_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise UsageError(f"{name} must not be negative, got {value}")
        for name in ("min_window_s", "min_window_periods"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UsageError(f"{name} must be positive, got {value}")

    def resolved(self, preferred: Mapping[str, Any] | None = None) -> RunConfig:
        """Every field set: the user's value, else the workload's preference, else the default."""
        preferred = dict(preferred or {})
        unknown = set(preferred) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown run settings {sorted(unknown)}")
        values = {}
        for name, default in DEFAULTS.items():
            mine = getattr(self, name)
            values[name] = mine if mine is not None else preferred.get(name, default)
        return RunConfig(**values)


def run_iterations(step: Callable[[], Any], n: int) -> None:
    for _ in range(n):
        step()


#: calibrated windows aim this much above --min-window, because iterations later in a run are
#: often a little faster than during calibration
CALIBRATION_MARGIN = 1.15
#: a calibrated window shorter than this fraction of --min-window is measured again
SHORT_REDO = 0.9


def _timed(phase: Phase, n: int) -> float:
    phase.sync()
    t0 = time.monotonic()
    run_iterations(phase.step, n)
    phase.sync()
    return time.monotonic() - t0


def calibrate(phase: Phase, min_window_s: float, max_iterations: int) -> tuple[int, float]:
    """Steps per window so that a window lasts at least ``min_window_s``.

    Times growing batches (each synced) until one lasts half the target, then scales up with
    a 15 % margin. A window that still comes out a little short stays well above two update
    periods with the default window lengths, so it is not re-checked (that would cost a window
    per phase). Returns the steps and the time per step. Units: s.
    """
    n = 1
    while True:
        dt = _timed(phase, n)
        if dt >= 0.5 * min_window_s or n >= max_iterations:
            break
        grow = 10 if dt < 1e-3 else max(2, math.ceil(0.55 * min_window_s / max(dt, 1e-9)))
        n = min(max_iterations, n * grow)
    per_step = dt / n
    if dt < min_window_s:
        n = math.ceil(CALIBRATION_MARGIN * min_window_s / max(per_step, 1e-12))
    return max(1, min(max_iterations, n)), per_step


def warm_up(phase: Phase, config: RunConfig) -> int:
    """Run the phase before measuring it (clocks ramp up, caches and allocators fill)."""
    if phase.warmup is not None or config.warmup is not None:
        n = phase.warmup if phase.warmup is not None else config.warmup
        if n:
            run_iterations(phase.step, n)
            phase.sync()
        return n
    if phase.iterations is not None:  # fixed-count phases (a command) are not repeated to warm up
        return 0
    n = 0
    deadline = time.monotonic() + config.warmup_s
    while True:
        phase.step()
        n += 1
        if n % 8 == 0 or time.monotonic() >= deadline:
            phase.sync()
            if time.monotonic() >= deadline:
                return n


def measure_phase(m: Measurement, phase: Phase, config: RunConfig, min_window_s: float) -> None:
    if phase.work:
        m.set_work(phase.name, phase.work)
    warmed = warm_up(phase, config)
    if phase.iterations is not None:
        iterations, note = phase.iterations, "fixed"
    else:
        iterations, per_iter = calibrate(phase, min_window_s, config.max_iterations)
        note = f"~{per_iter * 1e3:.4g} ms each, windows >= {min_window_s:g} s"
    trials = phase.trials or config.trials
    if config.runs and phase.iterations is None:
        floor = math.ceil(config.runs / (trials * phase.iterations_per_step))
        if floor > iterations:
            iterations = min(floor, config.max_iterations)
            note += f", grown to {config.runs} runs in all"
    if phase.iterations_per_step != 1:
        note += f", {phase.iterations_per_step} iterations per step"
    if phase.note:
        note += f"; {phase.note}"
    log.info(
        "phase %r: %d warm-up, %d steps per window (%s), %d trials",
        phase.name,
        warmed,
        iterations,
        note,
        trials,
    )
    step = phase.step
    per_window = iterations * phase.iterations_per_step  # e.g. graph replays x unrolled calls
    if config.guard_s:
        run_for(phase, config.guard_s)
    trial = redone = 0
    while trial < trials:
        if trial and config.cooldown_s:
            time.sleep(config.cooldown_s)
        m.begin_window(phase.name, per_window, sync=phase.sync)
        for _ in range(iterations):
            step()
        record = m.end_window(phase.name, sync=phase.sync)
        if phase.iterations is None and record.duration_s < SHORT_REDO * min_window_s and redone < 3:
            # the work ran faster than calibration said (a cold start, a clock boost): a window
            # this short is measured again, longer, instead of being kept
            m.discard_window(record)
            redone += 1
            iterations = math.ceil(
                iterations * CALIBRATION_MARGIN * min_window_s / max(record.duration_s, 1e-9)
            )
            per_window = iterations * phase.iterations_per_step
            log.info(
                "  %s: window of %.4g s was short of %g s; measuring again",
                phase.name,
                record.duration_s,
                min_window_s,
            )
            continue
        trial += 1
        log.info("  %s trial %d/%d: %.4g s", phase.name, trial, trials, record.duration_s)
    if config.guard_s:
        run_for(phase, config.guard_s)


def run_for(phase: Phase, seconds: float) -> None:
    """Keep a phase running, unmeasured, for about ``seconds`` (a guard band)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        phase.step()
        phase.sync()


def sync_pulses(m: Measurement) -> None:
    """Bursts of full load, each recorded as a window named ``SYNC_PULSE``."""
    from .workloads.pulse import OFF_S, ON_S, PULSES, PulseLoad

    load = PulseLoad()
    log.info("sync pulses: %d x %g s of %s load, %g s apart", PULSES, ON_S, load.kind, OFF_S)
    for _ in range(PULSES):
        time.sleep(OFF_S)
        m.begin_window(SYNC_PULSE, sync=load.sync)
        load.run(ON_S)
        m.end_window(SYNC_PULSE, sync=load.sync)
    time.sleep(OFF_S)


def default_min_window(m: Measurement, periods: float) -> float:
    """``periods`` update periods of the coarsest primary energy or power channel."""
    assert m.recorder is not None
    resolutions = [c.resolution_s for c in m.recorder.channels.values() if c.integrable and c.primary]
    longest = max(resolutions, default=0.0)
    return periods * longest if longest > 0 else TIMING_ONLY_MIN_WINDOW_S


def _plugin_meta(plugin: Any) -> dict:
    dist, version = plugin_distribution(type(plugin))
    return {
        "name": plugin.name,
        "class": f"{type(plugin).__module__}.{type(plugin).__qualname__}",
        "distribution": dist,
        "version": version,
        "options": plugin.options,
    }


class _Signals:
    """Turn SIGTERM into ``RunInterrupted`` while a run is going (main thread only)."""

    def __enter__(self) -> _Signals:
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def _on_term(self, signum, frame) -> None:
        raise RunInterrupted("terminated by SIGTERM")

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def run(
    workload: str | Spec | Workload,
    power: str | Sequence[PowerArg] | None = "auto",
    reporters: Sequence[str | Spec | Reporter] = ("console",),
    out: Path | str | None = None,
    config: RunConfig | None = None,
    align: bool = True,
) -> RunResult:
    """Measure a workload: what ``energyframe run`` does.

    Args:
        workload: a spec (``"cpu-matmul:size=256"``) or a ``Workload`` instance.
        power: ``"auto"``, ``None`` (timing only), or specs / ``PowerSource`` instances.
        reporters: reporter specs or instances, called with the finished result.
        out: run directory (``None``: keep the result in memory only).
        config: trials, window length, warm-up, cool-down, idle baseline, guard bands, pulses.
        align: estimate wall meters' lag against the run's GPU or CPU power and correct it.

    Raises:
        UsageError: a bad plugin name or option, before anything starts.
        RunInterrupted: SIGINT or SIGTERM; the run was saved with status ``incomplete``.
        EnergyFrameError: a source or the workload failed; the run was saved as incomplete.
        Each raised error carries the saved ``RunResult`` as ``error.result``.
    """
    # validate every plugin and option before anything starts
    the_workload = registry.create(registry.WORKLOADS, workload)
    config = (config or RunConfig()).resolved(the_workload.run_defaults())
    the_reporters = registry.create_all(registry.REPORTERS, list(reporters))
    sources, notes = resolve_power(power)
    for note in notes[:1]:
        log.info(note)
    meta = {
        "workload": _plugin_meta(the_workload),
        "reporters": [_plugin_meta(r) for r in the_reporters],
        "config": asdict(config),
    }
    m = Measurement(sources, out=out, sync=None, meta=meta, notes=notes, aligner="auto" if align else None)
    m.deriver = the_workload.derive
    m.filer = the_workload.extra_files
    error: BaseException | None = None
    status, reason = COMPLETE, None
    with _Signals():
        m.start()
        assert m.recorder is not None
        try:
            try:
                the_workload.setup()
                if config.idle_s > 0 and m.sources:  # with no power source there is no idle power
                    log.info("measuring idle power for %g s", config.idle_s)
                    m.measure_idle(config.idle_s)
                min_window_s = config.min_window_s or default_min_window(m, config.min_window_periods)
                m.meta["config"]["min_window_s_used"] = min_window_s
                m.recorder.interrupt_on_failure = True
                if config.sync_pulse:
                    sync_pulses(m)
                for phase in the_workload.phases():
                    if phase.setup is not None:
                        phase.setup()
                    try:
                        measure_phase(m, phase, config, min_window_s)
                    finally:
                        if phase.teardown is not None:
                            phase.teardown()
                if config.sync_pulse:
                    sync_pulses(m)
                m.recorder.interrupt_on_failure = False
            finally:
                m.recorder.interrupt_on_failure = False
                try:
                    the_workload.teardown()
                except Exception as e:
                    m.warn(f"workload teardown failed: {e}")
        except (Exception, KeyboardInterrupt) as e:
            error = e
            status, reason = INCOMPLETE, describe_exception(e, m.recorder)
        m.meta["workload"]["info"] = _safe_info(the_workload)
        m.meta["exit_code"] = the_workload.exit_code
        try:
            result = m.finish(status, reason)
        except KeyboardInterrupt:  # a second Ctrl-C while saving: stop trying to be neat
            raise RunInterrupted("interrupted by SIGINT while saving") from None
    for reporter in the_reporters:
        try:
            reporter.report(result, m.out)
        except Exception as e:
            log.warning("reporter %r failed: %s", reporter.name, e)
    if error is not None:
        raise _as_run_error(error, result, m.recorder.failure) from error
    return result


def _safe_info(workload: Workload) -> dict:
    try:
        return dict(workload.info())
    except Exception as e:
        return {"error": str(e)}


def _as_run_error(
    error: BaseException, result: RunResult, source_failure: PowerSourceError | None
) -> EnergyFrameError:
    """The error ``run`` raises, carrying the saved result as ``.result``."""
    if source_failure is not None:
        # a failing source interrupts the main thread; report the source, not the interrupt
        wrapped: EnergyFrameError = PowerSourceError(result.reason or str(source_failure))
    elif isinstance(error, EnergyFrameError):
        wrapped = error
    elif isinstance(error, KeyboardInterrupt):
        wrapped = RunInterrupted(result.reason or "interrupted by SIGINT")
    else:
        wrapped = WorkloadError(f"the workload failed: {type(error).__name__}: {error}")
    wrapped.result = result  # type: ignore[attr-defined]
    return wrapped
