"""A workload's phases measured: set-up, the idle baseline, each phase's warm-up, calibration,
guard bands and trials, the sync pulses, tear-down.

Each trial is a window of the ``Measurement``: ``begin_window``, the steps, ``end_window``. A
calibrated window that came out short is measured again; with ``--precision`` windows go on
until it is reached (``precision.py``). With several ranks every rank must be about to measure
the same phase (``phase_step``), and rank 0's window length decides a redo.
"""

from __future__ import annotations

import logging
import math
import operator
import time
from collections.abc import Iterable, Iterator

from ..core.align import SYNC_PULSE
from ..core.windows import WindowRecord
from ..errors import WorkloadError
from ..model import Phase
from ..plugin import Workload
from .config import CALIBRATION_MARGIN, RunConfig
from .measurement import Measurement
from .planning import WindowPlan, default_min_window, plan_windows, run_for, warm_up
from .precision import Precision, agreed_reached
from .progress import RunProgress

log = logging.getLogger("energyframe")

#: a calibrated window shorter than this fraction of --min-window is measured again
SHORT_REDO = 0.9
#: a window measured again has at most this many times the steps of the one it replaces (a
#: window that read near 0 s would otherwise ask for an unbounded count)
REDO_GROWTH_MAX = 25
#: a calibrated window this many times longer than planned (the steps ran slower than calibration
#: found: a loaded machine) is kept, and the next windows run fewer steps, back to the plan
LONG_REPLAN = 4.0


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
    while trial < plan.trials or (precision is not None and not agreed_reached(m, precision, kept)):
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
            iterations = _redo_steps(m, phase.name, iterations, duration, min_window_s)
            log.info("  %s: window of %.4g s was short of %g s; measuring again",
                     phase.name, duration, min_window_s)
            continue
        if phase.iterations is None and not plan.runs_floor:
            iterations = _replanned_steps(m, phase.name, iterations, duration, min_window_s)
        trial += 1
        kept.append(record)
        if precision is not None and m.has_sources:
            m.window_energy(record, wait=False)  # its energy is computed while the next window runs
        progress.trial_done()
        trial_log("  %s trial %d/%d: %.4g s", phase.name, trial, plan.trials, record.duration_s)


def _redo_steps(m: Measurement, name: str, iterations: int, duration_s: float, min_window_s: float) -> int:
    """The steps of a window measured again after one of ``duration_s`` came out short: scaled
    to the target, at most ``REDO_GROWTH_MAX`` times as many (said when capped)."""
    wanted = math.ceil(iterations * CALIBRATION_MARGIN * min_window_s / max(duration_s, 1e-9))
    if wanted <= REDO_GROWTH_MAX * iterations:
        return wanted
    capped = REDO_GROWTH_MAX * iterations
    m.warn(
        f"phase {name!r}: a window of {iterations} steps lasted {duration_s:.3g} s, far short of "
        f"{min_window_s:g} s; the next one runs {capped} steps ({REDO_GROWTH_MAX} times as many), "
        f"not the {wanted} that would take: the steps' time is uneven (a loaded machine?)"
    )
    return capped


def _replanned_steps(m: Measurement, name: str, iterations: int, duration_s: float, min_window_s: float) -> int:
    """The steps of the next window after one of ``duration_s``: unchanged, or, where that
    window lasted ``LONG_REPLAN`` times the plan or more, scaled back to the plan (said once a
    time: windows do not grow without bound when the machine slows down)."""
    planned_s = CALIBRATION_MARGIN * min_window_s
    if iterations <= 1 or duration_s < LONG_REPLAN * planned_s:
        return iterations
    fewer = max(1, math.ceil(iterations * planned_s / duration_s))
    m.warn(
        f"phase {name!r}: a window of {iterations} steps lasted {duration_s:.3g} s, "
        f"{duration_s / min_window_s:.0f} times the {min_window_s:g} s planned (the steps ran slower "
        f"than calibration found: a loaded machine?); the next windows run {fewer} steps"
    )
    return fewer


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
        min_window_s = config.min_window_s or default_min_window(m.channels(), config.min_window_periods)
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
