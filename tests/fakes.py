"""Test doubles at the plugin seam: a power source with a known signal that can be told to fail."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from energyframe.errors import PowerSourceError
from energyframe.kit.polling import PollingSource, mode_option
from energyframe.kit.sampler import LineReader
from energyframe.options import Option
from energyframe.plugin import (
    Channel,
    ClockBase,
    Phase,
    PowerSource,
    Quantity,
    Sample,
    Scope,
    WindowAnnotation,
    Workload,
)


class SignalSource(PollingSource):
    """Emits a constant power as a counter (``<name>``) and as power samples (``<name>.power``),
    every ``period_s``, from a thread (or a process with ``mode=process``); fails after
    ``fail_after_s`` if set, goes quiet after ``silent_after_s``."""

    DESCRIPTION = "test source"
    OPTIONS = (
        Option("watts", "float", 100.0),
        Option("period_s", "float", 0.01),
        Option("fail_after_s", "float", None),
        Option("silent_after_s", "float", None),
        Option("fail_on_start", "bool", False),
        mode_option("thread"),
    )

    def open(self):
        if self.options["fail_on_start"]:
            raise PowerSourceError("no such meter (test)")
        self._t0 = time.monotonic()
        self.stopped = False
        self.failed = None  # when the poll raised (a test waits for it)
        self.polls = 0  # polls that returned samples (in thread mode; process mode logs them)
        period = self.options["period_s"]
        return [
            Channel(self.name, Quantity.ENERGY, Scope.GPU, period, ClockBase.MONOTONIC),
            Channel(f"{self.name}.power", Quantity.POWER, Scope.GPU, period, ClockBase.WALL, primary=False),
            Channel(f"{self.name}.clock", Quantity.STATE, Scope.GPU, period, unit="MHz", primary=False),
        ]

    def poll_interval_s(self):
        return self.options["period_s"]

    def poll(self):
        now = time.monotonic()
        elapsed = now - self._t0
        if self.options["fail_after_s"] is not None and elapsed > self.options["fail_after_s"]:
            self.failed = now
            raise PowerSourceError("meter unplugged (test)")
        if self.options["silent_after_s"] is not None and elapsed > self.options["silent_after_s"]:
            return {}
        self.polls += 1
        return [
            Sample(self.name, now, self.options["watts"] * elapsed),
            Sample(f"{self.name}.power", time.time(), self.options["watts"]),
            Sample(f"{self.name}.clock", now, 1980.0),
        ]

    def stop(self):
        super().stop()
        self.stopped = True

    def annotate(self, channel, start_s, end_s, series):
        if channel.name != self.name:
            return WindowAnnotation()
        clock = series[f"{self.name}.clock"].between(start_s, end_s)
        mean = float(clock.values.mean()) if len(clock) else float("nan")
        return WindowAnnotation({"sm_clock_mhz": mean}, ("throttled",) if mean < 1000 else ())


class ListWorkload(Workload):
    """Phases given in Python, for tests."""

    def __init__(self, phases, name="list", fail_in_setup=False):
        super().__init__(name)
        self._phases = phases
        self.torn_down = False
        self.fail_in_setup = fail_in_setup

    def setup(self):
        if self.fail_in_setup:
            raise RuntimeError("no GPU here (test)")

    def phases(self):
        return self._phases

    def teardown(self):
        self.torn_down = True


class StepClock:
    """A monotonic clock that moves only when told to, for the orchestrator's calibration and
    warm-up (``monkeypatch.setattr(planning, "time", clock.module())``): a step that calls
    ``advance(s)`` lasts exactly ``s`` there, however loaded the machine is."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s

    def monotonic(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds

    def module(self) -> SimpleNamespace:
        """A stand-in for the ``time`` module: this clock's ``monotonic``, the real rest."""
        return SimpleNamespace(
            monotonic=self.monotonic, sleep=time.sleep, perf_counter=time.perf_counter, time=time.time
        )


def spin(seconds: float) -> None:
    """Keep the CPU busy for at least ``seconds`` of real time."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def busy_phase(name="busy", seconds=0.001, **kw):
    def step():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    return Phase(name=name, step=step, **kw)


# a reference channel with a known truth (also used by the alignment benchmark)
from energyframe.offline.simulate import ProfilePowerSource as ProfileSource  # noqa: E402,F401


def wait_until(condition, what: str, timeout_s: float = 60.0) -> None:
    """Check ``condition()`` every 10 ms until it holds. The timeout only stops a hung test; it
    is no timing assertion: on a loaded machine the wait is merely longer."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.01)


def read_until(source, enough, timeout_s: float = 60.0) -> list:
    """Read ``source`` until ``enough(samples)`` holds for all it handed over; the timeout only
    stops a hung test."""
    samples: list = []

    def enough_now() -> bool:
        if enough(samples):
            return True
        samples.extend(source.read())
        return False

    wait_until(enough_now, f"enough samples from {source.name!r}", timeout_s)
    return samples


def logged_samples(log: Path) -> Counter:
    """How many samples a sampler child's line log holds per channel, read by the parent's own
    parser (``sampler.LineReader``; complete lines only): what a test can watch in process mode
    without reading the source."""
    counts: Counter = Counter()
    if log.exists():
        reader = LineReader(log)
        while reader.parse_pending():
            counts.update(s.channel for s in reader.parse())
    return counts


def read_until_error(source, timeout_s: float = 15.0):
    """Every sample ``source.read()`` hands over until it raises ``PowerSourceError``:
    (samples, the error, the wall time it was raised)."""
    samples: list = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            samples += source.read()
        except PowerSourceError as e:
            return samples, e, time.time()
        time.sleep(0.02)
    raise AssertionError(f"no error within {timeout_s} s")


def one_line(error: BaseException) -> str:
    """The error's message, checked to be one line with no traceback in it."""
    text = str(error)
    assert "\n" not in text and "Traceback" not in text
    return text


class ScriptedSource(PowerSource):
    """Readings every 10 ms from a thread; ``value(t)`` gives the reading t seconds after the start
    (``t0``), so a test can plant negative, NaN or infinite powers, or a counter's jump or freeze."""

    DESCRIPTION = "test"

    def __init__(self, value, name="scripted", quantity=Quantity.POWER, scope=Scope.GPU, unit=None):
        super().__init__(name)
        self.value, self.quantity, self.scope, self.unit = value, quantity, scope, unit

    def readings(self, t: float) -> list[float]:
        """The readings stamped at ``t`` s after the start (one, unless a test plants more)."""
        return [self.value(t)]

    def start(self, context):
        self.t0 = time.monotonic()
        self._pending: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        unit = {"unit": self.unit} if self.unit else {}
        return [Channel(self.name, self.quantity, self.scope, 0.01, ClockBase.MONOTONIC, **unit)]

    def _loop(self):
        while not self._stop.wait(0.01):
            now = time.monotonic()
            with self._lock:
                self._pending += [Sample(self.name, now, v) for v in self.readings(now - self.t0)]

    def read(self):
        with self._lock:
            out, self._pending = self._pending, []
        return out

    def stop(self):
        self._stop.set()
        self._thread.join()


def invoke_within(argv: list[str], seconds: int, hang_message: str):
    """``energyframe ARGV`` through click's runner, failing with ``TimeoutError(hang_message)`` if it
    has not answered within ``seconds`` (SIGALRM: a hang ends the test, not the suite)."""
    import signal

    from click.testing import CliRunner

    from energyframe.cli import main

    def alarm(signum, frame):
        raise TimeoutError(hang_message)

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        return CliRunner().invoke(main, argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
