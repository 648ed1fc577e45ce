"""How a phase is run before and between its measured windows, and how its windows are planned.

Warm-up (a count, or seconds), the calibration of the steps per window (growing timed batches),
the window plan (``--runs``, fixed-count phases), guard bands, and the shortest window a run's
channels allow. With several ranks every decision that sets how many steps run is agreed through
the coordinator (the slowest rank's batch, rank 0's chunks), so that every rank runs the same
steps. Nothing here opens a window: ``phases.py`` does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model import Channel, Phase
from ..ranks.coordinator import Alone, Coordinator
from .config import CALIBRATION_MARGIN, RunConfig

#: window length when no power source sets one (timing only): long enough that the clock's
#: resolution and one iteration's jitter do not matter
TIMING_ONLY_MIN_WINDOW_S = 0.1


def run_iterations(step: Callable[[], Any], n: int) -> None:
    for _ in range(n):
        step()


#: calibration times growing batches until one lasts this fraction of --min-window: 30 ms of
#: steps at the default 0.2 s, which times a step to far better than the margin (host clock
#: resolution is a microsecond) and costs a per-layer run 14 x 0.03 s instead of 14 x 0.11 s
CALIBRATION_BATCH = 0.15
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
    calibrated time of one step (NaN for fixed-count phases). ``runs_floor``: ``--runs`` set the
    steps per window (they are kept whatever the windows' length). Units: s."""

    iterations: int
    trials: int
    per_iter_s: float
    note: str
    runs_floor: bool = False


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
    runs_floor = False
    if config.runs and phase.iterations is None:
        floor = math.ceil(config.runs / (trials * phase.iterations_per_step))
        if floor > iterations:
            iterations, runs_floor = min(floor, config.max_iterations), True
            note += f", grown to {config.runs} runs in all"
    if phase.iterations_per_step != 1:
        note += f", {phase.iterations_per_step} iterations per step"
    if phase.note:
        note += f"; {phase.note}"
    return WindowPlan(iterations, trials, per_iter, note, runs_floor)


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


def default_min_window(channels: Mapping[str, Channel], periods: float) -> float:
    """``periods`` update periods of the coarsest primary energy or power channel."""
    resolutions = [c.resolution_s for c in channels.values() if c.integrable and c.primary]
    longest = max(resolutions, default=0.0)
    return periods * longest if longest > 0 else TIMING_ONLY_MIN_WINDOW_S
