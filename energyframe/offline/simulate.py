"""Synthetic runs for checking the alignment: a load profile, a reference channel that samples it
every 20 ms, and a wall meter that reports it late, averaged, drifting, quantised and noisy —
the records the emulator would send, computed without waiting for them in real time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..kit.polling import PollingSource
from ..model import Channel, ClockBase, Quantity, Sample, Scope


def record_window(
    now_s: float, elapsed_s: float, interval_s: float, lag_s: float, drift: float
) -> tuple[float, float]:
    """The host-clock interval a record sent at ``now_s`` reports the average power of: the
    interval that ended ``lag_s`` ago, plus the delay a drifting meter clock has built up over
    ``elapsed_s`` of logging. Units: s."""
    end = now_s - lag_s - drift * elapsed_s
    return end - interval_s, end


def pulses(
    start_s: float,
    count: int = 3,
    on_s: float = 2.0,
    off_s: float = 2.0,
    low_w: float = 150.0,
    high_w: float = 650.0,
) -> Callable[[float], float]:
    """Bursts of load (what ``--sync-pulse`` runs), as a function of time."""

    def profile(t: float) -> float:
        k, phase = divmod(t - start_s, on_s + off_s)
        return high_w if 0 <= k < count and phase < on_s else low_w

    return profile


def random_steps(
    start_s: float,
    duration_s: float,
    seed: int = 0,
    low_w: float = 150.0,
    high_w: float = 650.0,
    mean_step_s: float = 6.0,
) -> Callable[[float], float]:
    """A workload whose power changes at random times to random levels (aperiodic)."""
    rng = random.Random(seed)
    times, levels = [start_s], [rng.uniform(low_w, high_w)]
    while times[-1] < start_s + duration_s:
        times.append(times[-1] + rng.expovariate(1.0 / mean_step_s))
        levels.append(rng.uniform(low_w, high_w))
    t = np.array(times)
    v = np.array(levels)

    def profile(x: float) -> float:
        return float(v[max(0, int(np.searchsorted(t, x, side="right")) - 1)])

    return profile


def combined(
    *parts: tuple[float, float, Callable[[float], float]], default_w: float = 150.0
) -> Callable[[float], float]:
    """Pieces of profiles, each on its own time span ``(from, to, profile)``."""

    def profile(t: float) -> float:
        for lo, hi, part in parts:
            if lo <= t < hi:
                return part(t)
        return default_w

    return profile


@dataclass(frozen=True)
class SyntheticRun:
    reference_t: np.ndarray
    reference_w: np.ndarray
    meter_t: np.ndarray
    meter_w: np.ndarray
    profile: Callable[[float], float]

    def true_energy_j(self, start_s: float, end_s: float) -> float:
        t = np.linspace(start_s, end_s, max(2, int((end_s - start_s) * 200)))
        p = np.array([self.profile(x) for x in t])
        return float(np.sum((p[1:] + p[:-1]) / 2 * np.diff(t)))


def synthesize(
    profile: Callable[[float], float],
    start_s: float,
    duration_s: float,
    lag_s: float,
    drift: float = 0.0,
    interval_s: float = 1.0,
    noise_w: float = 0.0,
    quantum_w: float = 0.1,
    reference_step_s: float = 0.02,
    seed: int = 0,
) -> SyntheticRun:
    rng = np.random.default_rng(seed)
    ref_t = np.arange(start_s, start_s + duration_s, reference_step_s)
    ref_w = np.array([profile(t) for t in ref_t])
    meter_t = np.arange(start_s + interval_s, start_s + duration_s, interval_s)
    values = []
    for t in meter_t:
        lo, hi = record_window(t, t - start_s, interval_s, lag_s, drift)
        grid = np.linspace(lo, hi, 50)
        watts = float(np.mean([profile(x) for x in grid])) + (rng.normal(0.0, noise_w) if noise_w else 0.0)
        values.append(max(0.0, round(watts / quantum_w) * quantum_w))
    return SyntheticRun(ref_t, ref_w, meter_t, np.array(values), profile)


class ProfilePowerSource(PollingSource):
    """A GPU-scoped channel ``<name>0`` reporting ``profile(time.monotonic())`` every 20 ms: a
    reference with a known truth, for emulated wall meters to be aligned against (demos, tests,
    benchmarks). Not registered as a plugin: build it in Python (it runs in a thread only, as its
    profile is a Python function)."""

    DESCRIPTION = "a known power profile as a live GPU-scoped channel"

    def __init__(
        self, name: str = "gpu", *, profile: Callable[[float], float], period_s: float = 0.02
    ) -> None:
        super().__init__(name)
        self.profile = profile
        self.period_s = period_s

    def open(self):
        return [
            Channel(
                f"{self.name}0",
                Quantity.POWER,
                Scope.GPU,
                self.period_s,
                ClockBase.MONOTONIC,
                description="a known power profile",
            )
        ]

    def poll_interval_s(self) -> float:
        return self.period_s

    def poll(self) -> list[Sample]:
        now = time.monotonic()
        return [Sample(f"{self.name}0", now, float(self.profile(now)))]
