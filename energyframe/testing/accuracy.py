"""``check_accuracy``: a power source measured against a known power profile, window by window.

The author supplies the fake device their source reads (a sysfs tree, an HTTP endpoint, a
serial pty) as one function, ``drive(truth)``, which the harness calls every ``update_s`` with
what the device should show: the instant power, the energy since the start, the mean power over
the last update. The harness then runs a real measurement (``ef.measure``) of back-to-back
windows with the source, and compares each window's energy with the profile's exact integral
over the same edges. What the run then reports is what the user will see; the tolerance is the
author's claim, stated in their test.

    report = check_accuracy(HwmonSource, {"root": tree}, drive=fake.set, profile=steps((50, 200), 0.7),
                            tolerance=0.02, update_s=0.05)
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core.clock import ClockModel
from ..core.vocabulary import GAP
from ..lifecycle.measurement import Measurement
from ..model import split_flags
from ..plugin import PowerSource
from ..results.result import RunResult
from .power import declared
from .rules import broken

#: the phase the harness measures
PHASE = "accuracy"


@dataclass(frozen=True)
class Truth:
    """What the fake device shows now. Units: s, W, J.

    Args:
        time_s: ``time.monotonic()``.
        elapsed_s: seconds since the harness started (the profile's time).
        power_w: the instant power.
        energy_j: the energy since the harness started (what a counter holds).
        mean_power_w: the mean power over the last update period (what an averaging sensor shows).
    """

    time_s: float
    elapsed_s: float
    power_w: float
    energy_j: float
    mean_power_w: float


class Profile:
    """A known power profile over the seconds since the harness started.

    Args:
        power: the power at a time. Units: W.
        energy: the exact energy between two times (``None``: integrated numerically). Units: J.
        name: for messages.
    """

    def __init__(
        self, power: Callable[[float], float], energy: Callable[[float, float], float] | None = None, name: str = ""
    ) -> None:
        self._power = power
        self._energy = energy
        self.name = name or "a profile"

    def power_w(self, t_s: float) -> float:
        return float(self._power(t_s))

    def energy_j(self, start_s: float, end_s: float) -> float:
        if self._energy is not None:
            return float(self._energy(start_s, end_s))
        t = np.linspace(start_s, end_s, max(2, int((end_s - start_s) * 10_000)))
        p = np.array([self._power(x) for x in t])
        return float(np.sum((p[1:] + p[:-1]) / 2 * np.diff(t)))


def constant(power_w: float) -> Profile:
    """``power_w`` all the time."""
    return Profile(lambda t: power_w, lambda a, b: power_w * (b - a), f"{power_w:g} W")


def steps(levels_w: Sequence[float] = (100.0, 300.0), step_s: float = 1.0) -> Profile:
    """Clean steps through ``levels_w``, each held ``step_s``, over and over."""
    levels = np.asarray(levels_w, dtype=float)
    cycle_s = step_s * levels.size

    def power(t: float) -> float:
        return float(levels[int((t % cycle_s) // step_s)])

    def integral(t: float) -> float:  # from 0
        cycles, rest = divmod(t, cycle_s)
        whole = int(rest // step_s)
        return float(cycles * levels.sum() * step_s + levels[:whole].sum() * step_s + levels[whole % levels.size]
                     * (rest - whole * step_s))

    return Profile(power, lambda a, b: integral(b) - integral(a), f"steps of {step_s:g} s through {list(levels_w)} W")


def sine(mean_w: float = 200.0, amplitude_w: float = 100.0, period_s: float = 2.0) -> Profile:
    """``mean_w + amplitude_w * sin(2 pi t / period_s)``."""
    w = 2 * math.pi / period_s

    def integral(t: float) -> float:
        return mean_w * t - amplitude_w / w * math.cos(w * t)

    return Profile(lambda t: mean_w + amplitude_w * math.sin(w * t), lambda a, b: integral(b) - integral(a),
                   f"a sine of {mean_w:g} ± {amplitude_w:g} W every {period_s:g} s")


@dataclass(frozen=True)
class WindowError:
    """One window on one channel against the truth. Units: s (monotonic), J; ``error`` relative."""

    channel: str
    start_s: float
    end_s: float
    truth_j: float
    measured_j: float
    error: float
    flags: str


@dataclass(frozen=True)
class AccuracyReport:
    """Every window's error, the tolerance claimed, and the run behind them."""

    tolerance: float
    windows: tuple[WindowError, ...]
    result: RunResult
    #: windows not judged: the fake device updated late near one of their edges (a loaded test
    #: machine delayed the thread that drives it), which no source could have measured
    excused: tuple[WindowError, ...] = ()

    @property
    def max_error(self) -> float:
        """The largest relative error (NaN when a window has no energy)."""
        return max((abs(w.error) for w in self.windows), default=math.nan)

    @property
    def mean_error(self) -> float:
        """The mean relative error (signed: a bias shows)."""
        return float(np.mean([w.error for w in self.windows])) if self.windows else math.nan


#: a fake device update this many update periods behind its schedule excuses the windows with
#: an edge within ``EXCUSE_UPDATES`` periods of it (the device, not the source, was late there)
LATE_UPDATES = 0.5
EXCUSE_UPDATES = 2.0


class _Driver:
    """Calls ``drive(truth)`` every ``update_s`` on a thread, on a fixed schedule."""

    def __init__(self, drive: Callable[[Truth], Any], profile: Profile, update_s: float) -> None:
        self.drive, self.profile, self.update_s = drive, profile, update_s
        self.t0 = time.monotonic()
        self.error: BaseException | None = None
        #: (scheduled, done): updates of the device more than ``LATE_UPDATES`` periods late
        self.late_s: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="energyframe-accuracy-drive", daemon=True)

    def tick(self) -> None:
        now = time.monotonic()
        t = now - self.t0
        mean_since = max(0.0, t - self.update_s)
        mean = self.profile.energy_j(mean_since, t) / (t - mean_since) if t > mean_since else self.profile.power_w(t)
        self.drive(Truth(now, t, self.profile.power_w(t), self.profile.energy_j(0.0, t), mean))

    def _loop(self) -> None:
        k = 1
        while not self._stop.wait(max(0.0, self.t0 + k * self.update_s - time.monotonic())):
            scheduled = self.t0 + k * self.update_s
            try:
                self.tick()
            except BaseException as e:  # the author's fake failed: said by check_accuracy
                self.error = e
                return
            done = time.monotonic()  # the device shows the update from now on
            if done - scheduled > LATE_UPDATES * self.update_s:
                self.late_s.append((scheduled, done))
            k = max(k + 1, int((time.monotonic() - self.t0) / self.update_s) + 1)

    def __enter__(self) -> _Driver:
        self.tick()  # the device shows a value before the source opens it
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def driving(drive: Callable[[Truth], Any], profile: Profile, update_s: float) -> Iterator[float]:
    """Drive a fake device with ``profile`` while the block runs: ``drive(truth)`` now, then every
    ``update_s``. Yields the profile's time zero (``time.monotonic()``). For the conformance checks,
    which need a device whose reading changes::

        with driving(sensor.write, sine(), update_s=0.05):
            check_power_source(MySource, {"path": sensor.path}, run_s=2.0)

    Raises:
        Exception: what ``drive`` raised (the fake device is broken), once the block ends.
    """
    with _Driver(drive, profile, update_s) as driver:
        yield driver.t0
    if driver.error is not None:
        raise driver.error


def check_accuracy(
    cls: type[PowerSource],
    options: Mapping[str, Any] | None,
    drive: Callable[[Truth], Any],
    profile: Profile,
    *,
    tolerance: float,
    update_s: float,
    duration_s: float = 8.0,
    window_s: float = 1.0,
    channels: Sequence[str] | None = None,
) -> AccuracyReport:
    """Drive the author's fake device with ``profile``, measure it with ``cls`` through a real run,
    and compare every window's energy with the truth.

    Args:
        cls, options: the source and the options that point it at the fake device.
        drive: sets the fake device from a ``Truth``, every ``update_s`` (from before the source
            starts until it stopped).
        profile: the known power (``steps``, ``sine``, ``constant``, or a ``Profile``).
        tolerance: the relative error the author claims for one window (0.02: 2 %).
        update_s: how often the fake device updates. Units: s.
        duration_s, window_s: how long to measure, in back-to-back windows of ``window_s``. Units: s.
        channels: the channels to judge (default: every primary energy or power channel).

    Returns:
        every window's error, for the author's own assertions (a bias: ``mean_error``).

    Raises:
        ContractError: a window off by more than ``tolerance``, or without energy (rule ``accuracy``).
        PowerSourceError: the source could not run against the fake device.
    """
    declared(cls, PowerSource)
    source = cls(cls.__name__.lower(), **dict(options or {}))  # the name positionally, as the registry passes it
    m, driver = _measured(source, drive, profile, update_s=update_s, duration_s=duration_s, window_s=window_s)
    errors = _errors(m, profile, driver.t0, channels or _primary_channels(m))
    excuse = _excused(errors, driver.late_s, EXCUSE_UPDATES * update_s)
    fair = tuple(w for w, x in zip(errors, excuse) if not x)
    excused = tuple(w for w, x in zip(errors, excuse) if x)
    report = AccuracyReport(tolerance, fair, m.result, excused)
    _judge(report, profile)
    return report


def _measured(
    source: PowerSource,
    drive: Callable[[Truth], Any],
    profile: Profile,
    *,
    update_s: float,
    duration_s: float,
    window_s: float,
) -> tuple[Measurement, _Driver]:
    """A real run of back-to-back windows with ``source`` while the fake device follows
    ``profile``; the measurement and the driver (its time zero and late updates).

    Raises:
        Exception: what ``drive`` raised (the fake device is broken).
    """
    with _Driver(drive, profile, update_s) as driver:
        m = Measurement([source], sync=None, aligner=None, coordinator=None)
        with m:
            for _ in range(max(1, int(round(duration_s / window_s)))):
                with m.window(PHASE):
                    time.sleep(window_s)
    if driver.error is not None:
        raise driver.error
    return m, driver


def _primary_channels(m: Measurement) -> list[str]:
    """The run's primary energy or power channels (the ones judged by default)."""
    return [c.name for c in m.channels().values() if c.integrable and c.primary]


def _excused(errors: Sequence[WindowError], late_s: Sequence[tuple[float, float]], within_s: float) -> list[bool]:
    """Per window, whether it is not judged: the fake device was behind its schedule near an
    edge, or the run's own sampling was held up (the core flags the window ``gap``; a source
    that goes silent by itself breaks the keep-alive rule instead). Held up everywhere: every
    window is judged rather than none."""
    excuse = [_near_late(w, late_s, within_s) or GAP in split_flags(w.flags) for w in errors]
    if all(excuse):
        return [False] * len(errors)
    return excuse


def _near_late(w: WindowError, late_s: Sequence[tuple[float, float]], within_s: float) -> bool:
    """Whether the fake device was behind its schedule within ``within_s`` of one of the window's
    edges (from an update's scheduled time to when it was done)."""
    return any(a - within_s <= edge <= b + within_s for a, b in late_s for edge in (w.start_s, w.end_s))


def _errors(m: Measurement, profile: Profile, t0: float, channels: Sequence[str]) -> list[WindowError]:
    windows = m.result.windows
    out = []
    for record in m.records:
        truth = profile.energy_j(record.start_s - t0, record.end_s - t0)
        for channel in channels:
            rows = windows[(windows["phase"] == PHASE) & (windows["trial"] == record.trial) & (windows["channel"] == channel)]
            measured = float(rows["energy_j"].iloc[0]) if len(rows) else math.nan
            flags = str(rows["flags"].iloc[0]) if len(rows) else "missing"
            error = measured / truth - 1 if truth else math.nan
            out.append(WindowError(channel, record.start_s, record.end_s, truth, measured, error, flags))
    return out


def _judge(report: AccuracyReport, profile: Profile) -> None:
    for i, w in enumerate(report.windows):
        if not math.isfinite(w.error) or abs(w.error) > report.tolerance:
            raise broken(
                "accuracy",
                f"channel {w.channel!r}: window {i + 1} of {len(report.windows)} ({w.end_s - w.start_s:.3g} s of "
                f"{profile.name}) measured {w.measured_j:.6g} J against a true {w.truth_j:.6g} J ({w.error:+.2%}, "
                f"flags: {w.flags or 'none'}), beyond the {report.tolerance:.2%} claimed",
            )


def monotonic_windows(result: RunResult) -> pd.DataFrame:
    """``result.windows`` with ``start_s`` and ``end_s`` on the samples' monotonic clock
    (``time.monotonic()`` of the run's machine) instead of Unix seconds: to check windows
    against a truth kept on the monotonic clock."""
    clock = ClockModel.from_json(result.meta["clock"])
    windows = result.windows.copy()
    windows["start_s"] = clock.to_monotonic_from_unix(windows["start_s"].to_numpy(float))
    windows["end_s"] = clock.to_monotonic_from_unix(windows["end_s"].to_numpy(float))
    return windows
