"""The step family in simulation: GPU power with a known truth, read the way NVML reads it.

A load is the board's power on a 0.1-ms grid (piecewise constant), so the true energy of any
window is exact. The loads are the ones the GPU benchmark (``step_family.py``) runs:

- ``square``: bursts of ``on_s`` of work every ``on_s + off_s``, the window of each period
  opening as the host launches the burst's first kernel. The power rises a few ms after the
  host's edge, overshoots at the cap and then wanders as the power limiter regulates it, falls
  with a tail of tens of ms after the work ends.
- ``steady``: the same work back to back, the power wandering around its level.

Three kinds of work: ``cap`` (compute-bound at the 700-W limit: the limiter's overshoot and
dips of ~15 % for ~0.2 s that the H200's counter showed, tests/fixtures/nvml-ticks.json),
``memory`` (~450 W, gentler), ``partial`` (~300 W).

The sensors (PHYSICS.md): the energy counter, exact at its ticks (every 100 ms ± 1.5 ms, 1 mJ
steps), each tick stamped within ±2 ms (the poller stamps a change midway between the starts
of two ~4-ms reads); the driver's 20-ms buffer (each sample the mean power since the previous one, the mean
of its last ``mean_s``, or the power at its time; stamped ``buffer_late_s`` late, ±0.5 ms, with
a little noise); instant power every ~100 ms. They come out as the run's channels and series
(``gpu0``, ``gpu0.power_samples``, ``gpu0.power_instant``), so windows go through the same
``compute_windows`` a run uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from energyframe.core.samples import SampleSeries
from energyframe.core.windows import WindowRecord
from energyframe.model import Channel, ClockBase, Quantity, Scope, Shape

#: the grid of the simulated power. Units: s.
GRID_S = 1e-4

#: (level W, overshoot fraction at the start of a burst, regulation wander (fraction, 1 sigma),
#: its correlation time s, dips per second, dip depth fraction) by kind of work
WORK = {
    "cap": (700.0, 0.10, 0.025, 0.08, 0.6, 0.14),
    "memory": (450.0, 0.02, 0.015, 0.1, 0.0, 0.0),
    "partial": (300.0, 0.0, 0.02, 0.1, 0.0, 0.0),
}
IDLE_W = 120.0


@dataclass(frozen=True)
class Trace:
    """Power on a regular grid from ``t0_s``; ``energy_j`` interpolates its running integral,
    which is exact for power constant over each grid step. Units: s, W, J."""

    t0_s: float
    dt_s: float
    power_w: np.ndarray
    cum_j: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cum_j", np.concatenate(([0.0], np.cumsum(self.power_w) * self.dt_s)))

    @property
    def end_s(self) -> float:
        return self.t0_s + self.power_w.size * self.dt_s

    def energy_j(self, t) -> np.ndarray:
        grid = self.t0_s + self.dt_s * np.arange(self.cum_j.size)
        return np.interp(np.asarray(t, dtype=float), grid, self.cum_j)

    def power_at(self, t) -> np.ndarray:
        i = np.clip(((np.asarray(t, dtype=float) - self.t0_s) / self.dt_s).astype(int), 0, self.power_w.size - 1)
        return self.power_w[i]

    def window_j(self, start_s, end_s) -> np.ndarray:
        return self.energy_j(end_s) - self.energy_j(start_s)


def _wander(rng: np.random.Generator, n: int, sigma: float, tau_s: float) -> np.ndarray:
    """An Ornstein–Uhlenbeck wander of standard deviation ``sigma`` and correlation ``tau_s``,
    on the grid (computed on a 1-ms grid and held)."""
    step = 10
    m = n // step + 2
    a = math.exp(-1e-3 / tau_s)
    noise = rng.normal(0.0, sigma * math.sqrt(1 - a * a), m)
    x = np.empty(m)
    x[0] = rng.normal(0.0, sigma)
    for i in range(1, m):
        x[i] = a * x[i - 1] + noise[i]
    return np.repeat(x, step)[:n]


def _dips(rng: np.random.Generator, n: int, rate_hz: float, depth: float) -> np.ndarray:
    """The limiter's dips: ~0.2 s at ``depth`` below the level, at random times."""
    out = np.zeros(n)
    if rate_hz <= 0:
        return out
    duration = n * GRID_S
    for start in rng.uniform(0.0, duration, rng.poisson(rate_hz * duration)):
        length = rng.uniform(0.1, 0.3)
        i, j = int(start / GRID_S), int(min(start + length, duration) / GRID_S)
        out[i:j] = depth * rng.uniform(0.6, 1.0)
    return out


def _first_order(x: np.ndarray, tau_s: float) -> np.ndarray:
    """``x`` through a first-order lag of time constant ``tau_s`` (0: unchanged)."""
    if tau_s <= 0:
        return x
    kernel = np.exp(-np.arange(int(12 * tau_s / GRID_S)) * GRID_S / tau_s)
    kernel /= kernel.sum()
    padded = np.concatenate((np.full(kernel.size, x[0]), x))
    size = 1 << int(math.ceil(math.log2(padded.size + kernel.size)))
    out = np.fft.irfft(np.fft.rfft(padded, size) * np.fft.rfft(kernel, size), size)
    return out[kernel.size : kernel.size + x.size]


@dataclass(frozen=True)
class Load:
    """A simulated load and the host's windows on it."""

    trace: Trace
    records: tuple[WindowRecord, ...]
    kind: str
    description: str
    #: the host's window of each burst, from its launch to the end of its work (square loads)
    bursts: tuple[WindowRecord, ...] = ()


def square_load(
    rng: np.random.Generator,
    on_s: float,
    off_s: float,
    work: str = "cap",
    periods: int = 40,
    lead_s: float = 1.0,
    delay_s: tuple[float, float] = (0.002, 0.006),
    rise_s: float = 0.002,
    fall_s: float = 0.012,
) -> Load:
    """``periods`` bursts of ``work``, one window per period from one burst's start to the
    next one's (the last period closes at the start of a burst that ends the run)."""
    level, overshoot, wander, tau, dip_rate, dip_depth = WORK[work]
    period = on_s + off_s
    total = lead_s + (periods + 1) * period + 1.0
    n = int(total / GRID_S)
    t = np.arange(n) * GRID_S
    host = lead_s + period * np.arange(periods + 2)
    busy = np.zeros(n)
    since = np.full(n, np.inf)
    bursts = []
    for k, h in enumerate(host):
        start = h + rng.uniform(*delay_s)  # the first kernel reaches the GPU
        end = start + on_s * rng.uniform(0.995, 1.005)
        i, j = int(start / GRID_S), min(int(end / GRID_S), n)
        busy[i:j] = 1.0
        since[i:j] = t[i:j] - start
        bursts.append(WindowRecord("on", k, float(h), float(end)))
    burst = 1.0 + overshoot * np.exp(-since / 0.04) + _wander(rng, n, wander, tau) - _dips(rng, n, dip_rate, dip_depth)
    target = IDLE_W + busy * (level * burst - IDLE_W)
    # the rise follows the work within a few ms, the fall has a longer tail
    rising = _first_order(target, rise_s)
    falling = _first_order(target, fall_s)
    power = np.where(busy > 0, rising, np.maximum(falling, rising)) + rng.normal(0.0, 0.5, n)
    records = tuple(
        WindowRecord("period", k, float(host[k]), float(host[k + 1])) for k in range(periods)
    )
    name = f"{on_s * 1e3:.0f}/{off_s * 1e3:.0f} ms {work}"
    return Load(Trace(0.0, GRID_S, power), records, name, f"square wave {name}", tuple(bursts[:periods]))


def steady_load(
    rng: np.random.Generator, window_s: float, work: str = "cap", windows: int = 40, lead_s: float = 1.0
) -> Load:
    """Back-to-back ``work`` with ``windows`` windows of ``window_s`` ± 10 % inside it, each at
    a random phase of the counter (random gaps up to 0.1 s between them)."""
    level, _, wander, tau, dip_rate, dip_depth = WORK[work]
    spans = []
    t = lead_s
    for _ in range(windows):
        length = window_s * rng.uniform(0.9, 1.1)
        spans.append((t, t + length))
        t += length + rng.uniform(0.0, 0.1)
    n = int((t + 1.0) / GRID_S)
    power = level * (1.0 + _wander(rng, n, wander, tau) - _dips(rng, n, dip_rate, dip_depth))
    power += rng.normal(0.0, 0.5, n)
    records = tuple(WindowRecord("steady", k, a, b) for k, (a, b) in enumerate(spans))
    name = f"steady {window_s * 1e3:.0f} ms {work}"
    return Load(Trace(0.0, GRID_S, power), records, name, name)


@dataclass(frozen=True)
class SensorModel:
    """How the simulated NVML reads the board. Units: s, W.

    Args:
        tick_s: the counter's update period; ``tick_jitter_s`` the spread of each interval.
        stamp_s: each tick is stamped within ± this of its change.
        buffer_s: the 20-ms buffer's spacing; ``buffer_jitter_s`` its stamps' spread.
        buffer_late_s: how late the buffer's stamps are against the counter's timeline.
        mean_s: what a buffer sample is: ``None`` the mean since the previous sample, a number
            the mean over that much before its time (0: the power at its time).
        buffer_noise_w: noise on each buffer sample (1 sigma).
    """

    tick_s: float = 0.1
    tick_jitter_s: float = 0.0015
    stamp_s: float = 0.002
    buffer_s: float = 0.02
    buffer_jitter_s: float = 0.0005
    buffer_late_s: float = -0.004
    mean_s: float | None = None
    buffer_noise_w: float = 2.0


READINGS = {"mean": None, "short mean": 0.005, "instant": 0.0}
#: what shapes the counter between its ticks, as the NVML source declares it
SHAPES = (Shape(channel="gpu0.power_samples", reading="period"), Shape(channel="gpu0.power_instant", reading="point"))


def read(trace: Trace, rng: np.random.Generator, model: SensorModel = SensorModel()):
    """The run's channels and their series, as the NVML source records them."""
    end = trace.end_s - 0.05
    n = int(end / model.tick_s) + 2
    true_ticks = np.cumsum(model.tick_s + rng.uniform(-model.tick_jitter_s, model.tick_jitter_s, n))
    true_ticks = true_ticks[true_ticks < end] - rng.uniform(0.0, model.tick_s)
    true_ticks = true_ticks[true_ticks > 0.01]
    counter = np.round((3.2e6 + trace.energy_j(true_ticks)) * 1e3) / 1e3  # mJ
    ticks = true_ticks + rng.uniform(-model.stamp_s, model.stamp_s, true_ticks.size)
    ticks = np.sort(ticks)
    m = int(end / model.buffer_s)
    u = np.sort(model.buffer_s * np.arange(1, m) + rng.uniform(-model.buffer_jitter_s, model.buffer_jitter_s, m - 1))
    if model.mean_s is None:
        e = trace.energy_j(u)
        u, p = u[1:], np.diff(e) / np.diff(u)
    elif model.mean_s == 0:
        p = trace.power_at(u)
    else:
        u = u[u > model.mean_s]
        p = (trace.energy_j(u) - trace.energy_j(u - model.mean_s)) / model.mean_s
    p = p + rng.normal(0.0, model.buffer_noise_w, p.size)
    inst_t = rng.uniform(0.0, 0.1) + np.arange(0.0, end - 0.1, 0.1)
    mono = ClockBase.MONOTONIC
    channels = {
        "gpu0": Channel("gpu0", Quantity.ENERGY, Scope.GPU, model.tick_s, mono, shaped_by=SHAPES),
        "gpu0.power_samples": Channel("gpu0.power_samples", Quantity.POWER, Scope.GPU, 0.02, mono, primary=False),
        "gpu0.power_instant": Channel("gpu0.power_instant", Quantity.POWER, Scope.GPU, 0.1, mono, primary=False),
    }
    series = {
        "gpu0": SampleSeries(ticks, counter),
        "gpu0.power_samples": SampleSeries(u + model.buffer_late_s, p),
        "gpu0.power_instant": SampleSeries(inst_t, trace.power_at(inst_t)),
    }
    return channels, series
