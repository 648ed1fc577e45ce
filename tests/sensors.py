"""Closed-form GPU loads, read the way NVML's sensors read them (for the fusion tests).

A load is a train of trapezoidal pulses above an idle level: it rises linearly over ``rise_s``,
holds, and falls linearly over ``fall_s`` (0 for a clean step). Its energy is known exactly at
any time, so every sensor reading and every window's true energy comes from one formula:

- the energy counter: the exact energy at tick times ~100 ms apart, with jitter;
- the 20-ms buffer: the mean power since the previous sample, stamped late by a fixed offset;
- instant power: the power at a time, every ~100 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PulseLoad:
    """Idle power plus pulses of ``on_w - idle_w`` starting at ``starts_s``, lasting
    ``lengths_s`` (from the start of the rise to the start of the fall). Units: W, s."""

    idle_w: float
    on_w: float
    starts_s: np.ndarray
    lengths_s: np.ndarray
    rise_s: float = 0.0
    fall_s: float = 0.0

    def _shape_integral(self, x: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Integral over [0, x] of one pulse of unit height (x relative to its start)."""
        r, f = self.rise_s, self.fall_s
        x = np.asarray(x, dtype=float)
        out = np.zeros(np.broadcast(x, length).shape)
        rising = np.clip(x, 0.0, r)
        out += rising**2 / (2 * r) if r > 0 else 0.0
        out += np.clip(x - r, 0.0, np.maximum(length - r, 0.0))
        if f > 0:
            y = np.clip(x - length, 0.0, f)
            out += y - y**2 / (2 * f)
        return out

    def energy_j(self, t) -> np.ndarray:
        """Energy from time 0 to ``t``. Units: J."""
        t = np.atleast_1d(np.asarray(t, dtype=float))
        x = t[:, None] - self.starts_s[None, :]
        pulses = self._shape_integral(x, self.lengths_s[None, :]).sum(axis=1)
        return self.idle_w * t + (self.on_w - self.idle_w) * pulses

    def power_w(self, t) -> np.ndarray:
        """Power at ``t`` (the right-hand value at a clean step). Units: W."""
        t = np.atleast_1d(np.asarray(t, dtype=float))
        x = t[:, None] - self.starts_s[None, :]
        length = self.lengths_s[None, :]
        r, f = self.rise_s, self.fall_s
        up = np.where(x < 0, 0.0, np.minimum(x / r, 1.0) if r > 0 else 1.0)
        down = np.where(x < length, 1.0, np.maximum(1.0 - (x - length) / f, 0.0) if f > 0 else 0.0)
        return self.idle_w + (self.on_w - self.idle_w) * (up * down).sum(axis=1)

    def window_j(self, start_s, end_s) -> np.ndarray:
        return self.energy_j(end_s) - self.energy_j(start_s)


def square_wave(
    rng: np.random.Generator,
    cycles: int,
    on_s: float = 0.5,
    off_s: float = 0.5,
    gap_s: float = 0.1,
    first_s: float = 1.0,
    idle_w: float = 110.0,
    on_w: float = 680.0,
    rise_s: float = 0.0,
    fall_s: float = 0.0,
) -> tuple[PulseLoad, np.ndarray]:
    """``cycles`` of ``on_s`` of load then ``off_s`` idle, then a random idle gap of up to
    ``gap_s`` (so that the counter's ticks fall at every phase). Returns the load and the
    (on start, off start, off end) of each cycle."""
    edges = []
    t = first_s
    for _ in range(cycles):
        edges.append((t, t + on_s, t + on_s + off_s))
        t += on_s + off_s + rng.uniform(0.0, gap_s)
    edges = np.array(edges)
    load = PulseLoad(idle_w, on_w, edges[:, 0], np.full(cycles, on_s), rise_s, fall_s)
    return load, edges


def tick_times(rng: np.random.Generator, end_s: float, period_s: float = 0.1, jitter_s: float = 0.002):
    """Counter ticks every ``period_s`` ± ``jitter_s`` from a random phase, up to ``end_s``."""
    n = int(end_s / period_s) + 1
    t = rng.uniform(0.0, period_s) + period_s * np.arange(n) + rng.uniform(-jitter_s, jitter_s, n)
    return np.sort(t[(t > 0) & (t < end_s)])


def buffer_samples(
    load: PulseLoad,
    rng: np.random.Generator,
    end_s: float,
    period_s: float = 0.02,
    jitter_s: float = 0.0005,
    late_s: float = 0.0,
    mean_s: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The driver's buffer, stamped ``late_s`` late: each sample the mean power since the
    previous one (``mean_s=None``), over the last ``mean_s`` before its time, or the power at
    its time (``mean_s=0``). Which of these the driver does is not documented."""
    n = int(end_s / period_s)
    u = np.sort(period_s * np.arange(1, n) + rng.uniform(-jitter_s, jitter_s, n - 1))
    if mean_s is None:
        e = load.energy_j(u)
        return u[1:] + late_s, np.diff(e) / np.diff(u)
    u = u[1:]
    if mean_s == 0:
        return u + late_s, load.power_w(u)
    return u + late_s, (load.energy_j(u) - load.energy_j(u - mean_s)) / mean_s


def instant_samples(
    load: PulseLoad, rng: np.random.Generator, end_s: float, period_s: float = 0.1
) -> tuple[np.ndarray, np.ndarray]:
    """Instant power every ``period_s`` from a random phase."""
    t = rng.uniform(0.0, period_s) + np.arange(0.0, end_s - period_s, period_s)
    return t, load.power_w(t)
