"""The run lifecycle behind ``energyframe run`` and ``ef.run``.

start sources -> set up the workload -> optional idle baseline -> for each phase: warm up,
calibrate the iterations per window, measure ``trials`` windows (each opened and closed after a
device sync, on the monotonic clock), optional cool-down between them -> tear down -> stop
sources -> integrate every channel over every window -> save -> report.

Nothing here knows about a vendor: sources, workloads and reporters are plugins. With several
ranks (torchrun, srun) every decision that sets how many steps run - calibration, time-based
warm-up and guard bands, a window measured again, the phases themselves - is agreed through the
measurement's coordinator, so that every rank runs the same steps.
"""

from __future__ import annotations

import logging
import math
import operator
import signal
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.align import SYNC_PULSE
from ..core.uncertainty import median_ci_j
from ..core.windows import WindowRecord
from ..errors import EnergyFrameError, PowerSourceError, RunInterrupted, WorkloadError
from ..kit import registry
from ..kit.registry import PowerArg, resolve_power
from ..live.listener import LiveListener
from ..model import Phase
from ..options import Spec
from ..plugin import Reporter, Workload
from ..ranks.coordinator import Alone, Coordinator
from ..ranks.world import export_launcher_env
from ..results.provenance import plugin_record, workload_record
from ..results.result import COMPLETE, INCOMPLETE, RunResult
from .config import CALIBRATION_MARGIN, RunConfig, RunSettings
from .measurement import Measurement
from .progress import RunProgress
from .reporting import check_reporter_errors, run_reporters

log = logging.getLogger("energyframe")

#: window length when no power source sets one (timing only): long enough that the clock's
#: resolution and one iteration's jitter do not matter
TIMING_ONLY_MIN_WINDOW_S = 0.1
#: with --precision, no interval of a median from fewer windows than this is trusted
MIN_PRECISION_TRIALS = 3


def run_iterations(step: Callable[[], Any], n: int) -> None:
    for _ in range(n):
        step()


#: calibration times growing batches until one lasts this fraction of --min-window: 30 ms of
#: steps at the default 0.2 s, which times a step to far better than the margin (host clock
#: resolution is a microsecond) and costs a per-layer run 14 x 0.03 s instead of 14 x 0.11 s
CALIBRATION_BATCH = 0.15
#: a calibrated window shorter than this fraction of --min-window is measured again
SHORT_REDO = 0.9
#: with several ranks, time-based loops (warm-up, guard bands) agree how to go on this often. Units: s.
AGREED_CHUNK_S = 0.1
#: the identity: one process, nothing to agree on
ALONE = Alone()


def _timed(phase: Phase, n: int, coord: Coordinator = ALONE) -> float:
    phase.sync()
    coord.edge("time a calibration batch")
    t0 = time.monotonic()
    run_iterations(phase.step, n)
    phase.sync()
    return coord.agree(time.monotonic() - t0, "a calibration batch's time", "max")


def calibrate(
    phase: Phase, min_window_s: float, max_iterations: int, coord: Coordinator = ALONE
) -> tuple[int, float]:
    """Steps per window so that a window lasts at least ``min_window_s``.

    Times growing batches (each synced) until one lasts ``CALIBRATION_BATCH`` of the target,
    then scales up by ``CALIBRATION_MARGIN``. A window that still comes out a little short stays
    well above two update periods with the default window lengths, so it is not re-checked (that
    would cost a window per phase). With several ranks every batch starts together and the slowest
    rank's time decides, so every rank runs the same steps. Returns the steps and the time per
    step. Units: s.
    """
    n = 1
    while True:
        dt = _timed(phase, n, coord)
        if dt >= CALIBRATION_BATCH * min_window_s or n >= max_iterations:
            break
        grow = 10 if dt < 1e-3 else max(2, math.ceil(1.1 * CALIBRATION_BATCH * min_window_s / max(dt, 1e-9)))
        n = min(max_iterations, n * grow)
    per_step = dt / n
    if dt < min_window_s:
        n = math.ceil(CALIBRATION_MARGIN * min_window_s / max(per_step, 1e-12))
    return max(1, min(max_iterations, n)), per_step


def run_agreed(phase: Phase, seconds: float, coord: Coordinator, what: str) -> int:
    """Run the phase, unmeasured, for about ``seconds`` of rank 0's clock, every rank the same
    steps: in chunks, after each of which rank 0 says how many steps the next one has (0:
    stop), aiming at ``AGREED_CHUNK_S`` per chunk. Returns the steps run."""
    deadline = time.monotonic() + seconds
    n, chunk = 0, 1
    while chunk > 0:
        t0 = time.monotonic()
        run_iterations(phase.step, chunk)
        phase.sync()
        n += chunk
        now = time.monotonic()
        left = deadline - now
        proposal = 0
        if left > 0:
            per_step = max((now - t0) / chunk, 1e-9)
            proposal = max(1, min(int(min(left, AGREED_CHUNK_S) / per_step), 2 * chunk))
        chunk = int(coord.agree(proposal, what, "root"))
    return n


def warm_up(phase: Phase, config: RunConfig, coord: Coordinator = ALONE) -> int:
    """Run the phase before measuring it (clocks ramp up, caches and allocators fill)."""
    if phase.warmup is not None or config.warmup is not None:
        n = phase.warmup if phase.warmup is not None else (config.warmup or 0)
        if n:
            run_iterations(phase.step, n)
            phase.sync()
        return n
    if phase.iterations is not None:  # fixed-count phases (a command) are not repeated to warm up
        return 0
    if coord.distributed:
        return run_agreed(phase, config.warmup_s, coord, "warm-up steps")
    n = 0
    deadline = time.monotonic() + config.warmup_s
    while True:
        phase.step()
        n += 1
        if n % 8 == 0 or time.monotonic() >= deadline:
            phase.sync()
            if time.monotonic() >= deadline:
                return n


@dataclass(frozen=True)
class WindowPlan:
    """How a phase is measured: steps per window, windows, and why. ``per_iter_s`` is the
    calibrated time of one step (NaN for fixed-count phases). Units: s."""

    iterations: int
    trials: int
    per_iter_s: float
    note: str


def plan_windows(
    phase: Phase, config: RunConfig, min_window_s: float, coord: Coordinator = ALONE
) -> WindowPlan:
    """Calibrate the steps per window (or take the phase's fixed count) and apply ``--runs``."""
    if phase.iterations is not None:
        iterations, per_iter, note = phase.iterations, math.nan, "fixed"
    else:
        iterations, per_iter = calibrate(phase, min_window_s, config.max_iterations, coord)
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
    return WindowPlan(iterations, trials, per_iter, note)


def measure_phase(
    m: Measurement, phase: Phase, config: RunConfig, min_window_s: float, progress: RunProgress | None = None
) -> None:
    """Warm up, calibrate, then measure the phase's trials (guard bands around them)."""
    progress = progress or RunProgress(show=False)
    if phase.work:
        m.set_work(phase.name, phase.work)
    coord = m.coordinator
    with m.span("warmup"):
        warmed = warm_up(phase, config, coord)
    with m.span("calibration"):
        plan = plan_windows(phase, config, min_window_s, coord)
    log.info("phase %s: %d warm-up, %d steps per window (%s), %d trials",
             progress.label(phase.name), warmed, plan.iterations, plan.note, plan.trials)
    progress.phase(phase.name, plan.trials)
    with m.span("guard"):
        if config.guard_s:
            run_for(phase, config.guard_s, coord)
    started, before = time.monotonic(), len(m.closed_windows())
    target = Precision(config.precision_pct, config.max_time_s) if config.precision_pct else None
    measure_trials(m, phase, plan, min_window_s, config.cooldown_s, progress, target)
    measured = sum(r.duration_s for r in m.closed_windows()[before:])
    m.add_time("windows", measured)
    m.add_time("between_windows", max(0.0, time.monotonic() - started - measured))
    with m.span("guard"):
        if config.guard_s:
            run_for(phase, config.guard_s, coord)


@dataclass(frozen=True)
class Precision:
    """``--precision``: measure until the 95 % interval of the median time and energy per
    iteration is within ± ``pct`` %, for at most ``max_time_s`` of windows. Units: %, s."""

    pct: float
    max_time_s: float

    def reached(self, m: Measurement, records: Sequence[WindowRecord]) -> bool:
        """Whether the phase's windows so far are precise enough (or have taken their time). The
        energies are computed while the next windows run (``live.py``). Those still being computed
        are waited for only where they may decide (the known ones are too few or already precise
        enough), and at most as long as another window would take: waiting for every window's
        samples took up to half a second per 0.23-s window of a per-layer run on an H100."""
        if sum(r.duration_s for r in records) >= self.max_time_s:
            return True
        times = [r.duration_s / r.iterations for r in records if r.iterations]
        if relative_ci_pct(times) > self.pct:
            return False
        if not m.has_sources:
            return True
        energies, pending = _known_energies(m, records)
        if pending and (len(energies) < MIN_PRECISION_TRIALS or relative_ci_pct(energies) <= self.pct):
            # the windows still being computed may decide: wait for them, at most as long as
            # another window would take, then count what is known
            deadline = time.monotonic() + records[-1].duration_s
            for r in pending:
                m.window_energy(r, timeout_s=max(0.0, deadline - time.monotonic()))
            energies, _ = _known_energies(m, records)
        return len(energies) >= MIN_PRECISION_TRIALS and relative_ci_pct(energies) <= self.pct


def _known_energies(m: Measurement, records: Sequence[WindowRecord]) -> tuple[list[float], list[WindowRecord]]:
    """The energies per iteration known so far, and the windows whose energy is not yet."""
    energies, pending = [], []
    for r in records:
        e = m.window_energy(r, wait=False)
        if e is None:
            pending.append(r)
        elif r.iterations:
            energies.append(e.energy_j / r.iterations)
    return energies, pending


def relative_ci_pct(values: Sequence[float]) -> float:
    """The 95 % interval of the median of ``values``, in % of it (inf for fewer than
    ``MIN_PRECISION_TRIALS``)."""
    if len(values) < MIN_PRECISION_TRIALS:
        return math.inf
    median = statistics.median(values)
    half = median_ci_j(values)
    return 100.0 * half / abs(median) if median and math.isfinite(half) else math.inf


def measure_trials(
    m: Measurement,
    phase: Phase,
    plan: WindowPlan,
    min_window_s: float,
    cooldown_s: float,
    progress: RunProgress,
    precision: Precision | None = None,
) -> None:
    """The windows of one phase; a calibrated window that came out short is measured again.
    With a ``precision``, windows go on after ``plan.trials`` until it is reached."""
    iterations = plan.iterations
    trial = redone = 0
    trial_log = log.debug if progress.show else log.info  # the bar says it already
    kept: list[WindowRecord] = []
    while trial < plan.trials or (precision is not None and not _agreed_reached(m, precision, kept)):
        if trial and cooldown_s:
            time.sleep(cooldown_s)
        progress.window_opening(iterations * plan.per_iter_s, f"{trial + 1}/{plan.trials}")
        m.begin_window(phase.name, iterations * phase.iterations_per_step, sync=phase.sync)
        _steps(m, phase, iterations)
        record = m.end_window(phase.name, sync=phase.sync)
        progress.window_closed()
        duration = record.duration_s
        if phase.iterations is None:  # with several ranks, rank 0's window decides for all
            duration = m.coordinator.agree(duration, "the window's length", "root")
        if phase.iterations is None and duration < SHORT_REDO * min_window_s and redone < 3:
            # the work ran faster than calibration said (a cold start, a clock boost): a window
            # this short is measured again, longer, instead of being kept
            m.discard_window(record)
            redone += 1
            iterations = math.ceil(iterations * CALIBRATION_MARGIN * min_window_s / max(duration, 1e-9))
            log.info("  %s: window of %.4g s was short of %g s; measuring again",
                     phase.name, duration, min_window_s)
            continue
        trial += 1
        kept.append(record)
        if precision is not None and m.has_sources:
            m.window_energy(record, wait=False)  # its energy is computed while the next window runs
        progress.trial_done()
        trial_log("  %s trial %d/%d: %.4g s", phase.name, trial, plan.trials, record.duration_s)


def _steps(m: Measurement, phase: Phase, iterations: int) -> None:
    """The window's steps. A Ctrl-C or SIGTERM inside them (a measured program of hours) closes
    the window where it is, flagged ``interrupted``, before the interruption goes on; with
    several ranks the others are not at that edge, so the window is dropped there."""
    done = 0
    try:
        for _ in range(iterations):
            phase.step()
            done += 1
    except KeyboardInterrupt:
        if not m.coordinator.distributed:
            try:
                m.end_window(phase.name, (done + 1) * phase.iterations_per_step, phase.sync, interrupted=True)
            except Exception as e:  # the device or a source failed too: the interruption still stands
                m.warn(f"the interrupted window could not be closed: {type(e).__name__}: {e}")
        raise


def _agreed_reached(m: Measurement, precision: Precision, records: Sequence[WindowRecord]) -> bool:
    """Every rank measures the same number of windows: rank 0's answer decides."""
    reached = precision.reached(m, records)
    return bool(m.coordinator.agree(1.0 if reached else 0.0, "whether the precision is reached", "root"))


def run_for(phase: Phase, seconds: float, coord: Coordinator = ALONE) -> None:
    """Keep a phase running, unmeasured, for about ``seconds`` (a guard band; with several
    ranks, of rank 0's clock, every rank the same steps)."""
    if coord.distributed:
        run_agreed(phase, seconds, coord, "guard-band steps")
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        phase.step()
        phase.sync()


def sync_pulses(m: Measurement) -> None:
    """Bursts of full load, each recorded as a window named ``SYNC_PULSE``."""
    from ..ranks.world import world
    from .pulse import OFF_S, ON_S, PULSES, PulseLoad

    w = world()
    load = PulseLoad(f"cuda:{w.local_rank}" if w.distributed else "cuda")  # the rank's own GPU
    log.info("sync pulses: %d x %g s of %s load, %g s apart", PULSES, ON_S, load.kind, OFF_S)
    for _ in range(PULSES):
        time.sleep(OFF_S)
        m.begin_window(SYNC_PULSE, sync=load.sync)
        load.run(ON_S)
        m.end_window(SYNC_PULSE, sync=load.sync)
    time.sleep(OFF_S)


def default_min_window(m: Measurement, periods: float) -> float:
    """``periods`` update periods of the coarsest primary energy or power channel."""
    resolutions = [c.resolution_s for c in m.channels().values() if c.integrable and c.primary]
    longest = max(resolutions, default=0.0)
    return periods * longest if longest > 0 else TIMING_ONLY_MIN_WINDOW_S


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised as a KeyboardInterrupt so that no ``except Exception`` swallows it (logging's
    ``emit`` does, and a signal can arrive while a progress line is written)."""


class _Signals:
    """Turn SIGTERM into ``RunInterrupted`` while a run is going (main thread only). Once
    ``holding`` (a run of several ranks being saved and reported), a SIGTERM is only noted:
    ``held`` says whether one came."""

    def __enter__(self) -> _Signals:
        self.previous = None
        self.holding = False
        self.held = False
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def _on_term(self, signum, frame) -> None:
        if self.holding:
            self.held = True
            return
        raise _Terminated("terminated by SIGTERM")

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def resolve_config(
    workload: Workload, settings: RunSettings | RunConfig | None, warn: Callable[[str], None]
) -> RunConfig:
    """The config that runs: the user's settings over the workload's preferences over defaults.

    A ``RunConfig`` is already decided and runs as it is; when the workload would have preferred
    other values, say so, since older code passed ``RunConfig`` where ``RunSettings`` is meant.
    """
    preferred = workload.run_defaults()
    if isinstance(settings, RunConfig):
        ignored = {k: v for k, v in preferred.items() if getattr(settings, k) != v}
        if ignored:
            warn(
                f"a resolved RunConfig was given, so workload {workload.name!r}'s preferred settings "
                f"{ignored} were not applied; pass settings=ef.RunSettings(...) to let them apply"
            )
        return settings
    return (settings or RunSettings()).resolve(preferred)


def run(
    workload: str | Spec | Workload,
    power: str | Sequence[PowerArg] | None = "auto",
    reporters: Sequence[str | Spec | Reporter] = ("console",),
    out: Path | str | None = None,
    config: RunSettings | RunConfig | None = None,
    align: bool = True,
    *,
    settings: RunSettings | RunConfig | None = None,
    progress: bool | None = None,
    dist_timeout_s: float | None = None,
    coordinator: Coordinator | str | None = "auto",
    reporter_errors: str = "fail",
    listeners: Sequence[LiveListener] = (),
) -> RunResult:
    """Measure a workload: what ``energyframe run`` does.

    Args:
        workload: a spec (``"cpu-matmul:sizes=256"``) or a ``Workload`` instance.
        power: ``"auto"``, ``"none"`` (timing only), or specs / ``PowerSource`` instances.
        reporters: reporter specs or instances, called with the finished result.
        out: run directory (``None``: keep the result in memory only).
        config: deprecated: the old name of ``settings``.
        align: estimate wall meters' lag against the run's GPU or CPU power and correct it.
        settings: ``RunSettings`` (trials, window length, warm-up, cool-down, idle baseline,
            guard bands, pulses), resolved against the workload's preferences; or a ``RunConfig``
            that runs exactly as given.
        progress: progress bars on stderr; ``None``: when stderr is a terminal and logging is
            not quieter than INFO.
        dist_timeout_s: under torchrun or srun, how long a rank waits for a silent peer before
            the others stop without it (default 1800 s). Units: s.
        coordinator: ``"auto"`` (the ranks a launcher started, else one process), ``None`` (one
            process), or a ``Coordinator``.
        reporter_errors: ``"fail"``: a reporter that raises or hangs fails the run
            (``ReporterError``, after the run was saved); ``"warn"``: it is only warned about.
        listeners: live subscribers (``energyframe.live``: the Prometheus exporter's tracker),
            given every reading while the run goes.

    Under torchrun or srun every rank calls ``run`` with the same arguments: each measures its
    own GPU, the ranks agree every window edge, and rank 0 saves one run directory (its
    ``out``) and runs the reporters; rank 0 returns the whole run, the others their own part.

    Raises:
        UsageError: a bad plugin name or option, before anything starts.
        RunInterrupted: SIGINT or SIGTERM; the run was saved with status ``incomplete``.
        EnergyFrameError: a source or the workload failed; the run was saved as incomplete.
        ReporterError: a reporter failed (``reporter_errors="fail"``); the run was saved.
        Each raised error carries the saved ``RunResult`` as ``error.result``.

    Example::

        result = ef.run("cpu-matmul:sizes=256", power="none", reporters=[], settings=ef.RunSettings(trials=3))
    """
    export_launcher_env()  # under srun, the RANK/WORLD_SIZE environment torch and workloads read
    # validate every plugin and option before anything starts
    the_workload = registry.create(registry.WORKLOADS, workload)
    assert isinstance(the_workload, Workload)
    the_reporters = [r for r in registry.create_all(registry.REPORTERS, list(reporters)) if isinstance(r, Reporter)]
    check_reporter_errors(reporter_errors)
    sources, notes = resolve_power(power)
    early_warnings: list[str] = []
    if config is not None:
        warnings.warn("ef.run(config=...) is deprecated: say settings=...", DeprecationWarning, stacklevel=2)
    resolved = resolve_config(the_workload, settings or config, early_warnings.append)
    meta = {
        "workload": plugin_record(the_workload),
        "reporters": [plugin_record(r) for r in the_reporters],
        "config": resolved.to_json(),
    }
    m = Measurement(
        sources,
        out=out,
        sync=None,
        meta=meta,
        notes=notes,
        aligner="auto" if align else None,
        workload=the_workload,
        coordinator=coordinator,
        dist_timeout_s=dist_timeout_s,
        listeners=listeners,
    )
    for warning in early_warnings:
        m.warn(warning)
    error: BaseException | None = None
    status, reason = COMPLETE, None
    with _Signals() as signals:
        _start(m)
        root = m.coordinator.is_root
        try:
            with RunProgress(progress if root else False) as bars:
                measure_workload(m, the_workload, resolved, bars)
        except (Exception, KeyboardInterrupt, SystemExit) as e:
            # several ranks: a launcher stops every rank once one exits; rank 0 saves regardless
            signals.holding = m.coordinator.distributed
            error = _stopped_by(e)
            status, reason = INCOMPLETE, m.describe_failure(error)
        signals.holding = m.coordinator.distributed
        m.describe(workload=workload_record(the_workload), exit_code=the_workload.exit_code)
        try:
            result = m.finish(status, reason)
        except KeyboardInterrupt:  # a second Ctrl-C while saving: stop trying to be neat
            raise RunInterrupted("interrupted by SIGINT while saving") from None
        reporter_error: EnergyFrameError | None = None
        try:
            run_reporters(the_reporters if root else (), result, m.out, reporter_errors)
        except EnergyFrameError as e:  # the run is saved; the run's own error comes first
            reporter_error = e
    error = error or _late_error(m, signals.held, result)
    if error is not None and reporter_error is not None:
        log.warning("warning: %s", reporter_error)
    error = error or reporter_error
    if error is not None:
        raise _as_run_error(error, result, m.source_failure) from error
    return result


def _timed_iteration(phases: Iterable[Phase], m: Measurement) -> Iterator[Phase]:
    """The workload's phases; the time a generator takes to prepare each (a per-layer unit's
    capture, a sweep configuration's compilation) counts as ``phase_setup``."""
    iterator = iter(phases)
    while True:
        with m.span("phase_setup"):
            phase = next(iterator, None)
        if phase is None:
            return
        yield phase


def measure_workload(
    m: Measurement, workload: Workload, config: RunConfig, progress: RunProgress | None = None
) -> None:
    """Set up, measure every phase, tear down (even when a phase failed)."""
    progress = progress or RunProgress(show=False)
    coord = m.coordinator
    try:
        with m.span("setup"):
            workload.bind(m.workload_context())
            workload.setup()
        # with no power source there is no idle power (with several ranks: on no rank)
        if config.idle_s > 0 and coord.agree(1.0 if m.has_sources else 0.0, "measuring idle power", "max"):
            log.info("measuring idle power for %g s", config.idle_s)
            m.measure_idle(config.idle_s)
        min_window_s = config.min_window_s or default_min_window(m, config.min_window_periods)
        min_window_s = coord.agree(min_window_s, "the shortest window", "max")
        m.describe_config(min_window_s_used=min_window_s)
        with m.interrupting_on_source_failure():
            _measure_phases(m, workload, config, min_window_s, progress)
    finally:
        try:
            with m.span("teardown"):
                workload.teardown()
        except Exception as e:
            m.warn(f"workload teardown failed: {type(e).__name__}: {e}")


def _measure_phases(
    m: Measurement, workload: Workload, config: RunConfig, min_window_s: float, progress: RunProgress
) -> None:
    coord = m.coordinator
    if config.sync_pulse:
        sync_pulses(m)
    phases = workload.phases()
    seen: set[str] = set()
    for phase in progress.phases(_timed_iteration(phases, m), operator.length_hint(phases, 0) or None):
        if phase.name in seen:  # two phases of one name would be summarised as one
            raise WorkloadError(f"the workload has two phases named {phase.name!r}; each phase needs its own name")
        seen.add(phase.name)
        coord.edge(phase_step(phase))
        if phase.setup is not None:
            with m.span("phase_setup"):
                phase.setup()
        try:
            measure_phase(m, phase, config, min_window_s, progress)
        finally:
            if phase.teardown is not None:
                with m.span("phase_setup"):
                    phase.teardown()
    coord.edge("end the phases")
    if config.sync_pulse:
        sync_pulses(m)


def phase_step(phase: Phase) -> str:
    """What every rank must be about to do when a phase starts (ranks that measure other phases,
    or the same in another order, are stopped with both named)."""
    fixed = f", {phase.iterations} steps per window" if phase.iterations is not None else ""
    return f"measure phase {phase.name!r}{fixed}"


def _late_error(m: Measurement, sigterm_held: bool, result: RunResult) -> EnergyFrameError | None:
    """What ended the run after the phases: another rank, a SIGTERM held while saving, or a
    source that stalled or failed after the last window. An incomplete run never exits 0."""
    if m.rank_error is not None:
        return m.rank_error
    if sigterm_held:
        return RunInterrupted("terminated by SIGTERM (after the run was saved)")
    if result.status != COMPLETE:
        return EnergyFrameError(f"run incomplete: {result.reason or 'no reason recorded'}")
    return None


def _start(m: Measurement) -> None:
    """Start the measurement; a Ctrl-C while the sources start is an interruption (exit 130),
    like one later (the measurement has written why into run.json)."""
    try:
        m.start()
    except KeyboardInterrupt as e:
        raise RunInterrupted("interrupted by SIGINT while the run started (joining the ranks, starting the sources)") from e


def _stopped_by(error: BaseException) -> BaseException:
    """What ended the phases, as the run reports it."""
    if isinstance(error, _Terminated):
        return RunInterrupted("terminated by SIGTERM")
    if isinstance(error, SystemExit):  # the workload's own code called sys.exit
        return WorkloadError(f"the workload called sys.exit({error.code!r})")
    return error


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
