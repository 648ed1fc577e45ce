"""Runs the power sources: starts them, drains their samples in the background, stops them.

Draining happens on one thread that wakes once a second, so the measured code is interrupted
rarely and briefly; sources do their own acquisition (threads or processes) and only buffer.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .clock import ClockModel
from .errors import PowerSourceError
from .interfaces import Channel, PowerSource, Scope, SourceContext
from .samples import PARTIAL_NAME, SampleStore

DRAIN_INTERVAL_S = 1.0
#: wall meters report late (their lag is estimated after the run, typically 0.5-5 s): wait this
#: much longer for their samples after the last window, so that it stays covered once moved
WALL_SETTLE_S = 6.0


class Recorder:
    """Owns the sources and the sample store for one run."""

    def __init__(
        self,
        sources: Sequence[PowerSource],
        clock: ClockModel,
        run_dir: Path | None = None,
        warn: Callable[[str], None] = print,
    ) -> None:
        self.sources = list(sources)
        self.clock = clock
        self.run_dir = run_dir
        self.warn = warn
        self.store = SampleStore(clock, run_dir / PARTIAL_NAME if run_dir else None)
        self.source_channels: dict[str, list[Channel]] = {}
        self.failure: PowerSourceError | None = None
        self.failed_source: str | None = None
        #: while True, a source failure interrupts the main thread so the run stops promptly
        self.interrupt_on_failure = False
        self._started: list[PowerSource] = []
        self._stop = threading.Event()
        self._drain_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def channels(self) -> dict[str, Channel]:
        return dict(self.store.channels)

    def start(self) -> None:
        """Start every source; if one fails, stop those already started and re-raise."""
        for source in self.sources:
            raw_dir = self.run_dir / "raw" / source.name if self.run_dir is not None else None
            try:
                channels = list(source.start(SourceContext(raw_dir=raw_dir, warn=self.warn)))
                self._started.append(source)
                self.store.register(source.name, channels)
            except BaseException:
                self._stop_sources()
                raise
            self.source_channels[source.name] = channels
        self._thread = threading.Thread(target=self._drain_loop, name="energyframe-drain", daemon=True)
        self._thread.start()

    def drain(self) -> None:
        """Move every pending sample from the sources into the store (and onto disk)."""
        with self._drain_lock:
            for source in self._started:
                if source.name == self.failed_source:
                    continue
                try:
                    while True:
                        batch = source.read()
                        if not batch:
                            break
                        self.store.add(source.name, batch)
                except PowerSourceError as e:
                    self._fail(source.name, e)
                except Exception as e:  # a plugin bug must not lose the other sources' samples
                    self._fail(source.name, PowerSourceError(f"power source {source.name!r} failed: {e!r}"))

    def _fail(self, name: str, error: PowerSourceError) -> None:
        if self.failure is not None:
            self.warn(f"power source {name!r} also failed: {error}")
            return
        self.failure = error
        self.failed_source = name
        if self.interrupt_on_failure and threading.current_thread() is not threading.main_thread():
            # a real signal, so that a main thread blocked in a system call (waiting for a
            # measured command, sleeping) wakes up too; the run stops and says which source failed
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def _drain_loop(self) -> None:
        while not self._stop.wait(DRAIN_INTERVAL_S):
            self.drain()

    def wait_for_samples(self, after_s: float | None, timeout_s: float) -> list[str]:
        """Wait until every integrable channel has a sample at or after ``after_s`` (monotonic;
        ``None``: any sample); wall meters, whose samples will be moved back by their lag, until
        ``WALL_SETTLE_S`` later. Returns the channels still lacking one when time ran out."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.drain()
            missing = []
            for name, channel in self.store.channels.items():
                if not channel.integrable or self.store.channel_source[name] == self.failed_source:
                    continue
                last = self.store.last_time(name)
                settle = WALL_SETTLE_S if channel.scope == Scope.SYSTEM_WALL else 0.0
                if last is None or (after_s is not None and last < after_s + settle):
                    missing.append(name)
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.02)

    def coverage_timeout_s(self) -> float:
        """How long to wait for a channel's next sample: three update periods, at least 1 s
        (plus the settling time of wall meters)."""
        channels = [c for c in self.store.channels.values() if c.integrable]
        periods = [c.resolution_s for c in channels]
        settle = WALL_SETTLE_S if any(c.scope == Scope.SYSTEM_WALL for c in channels) else 0.0
        return max(1.0, 3.0 * max(periods, default=0.0)) + 0.5 + settle

    def stop(self) -> None:
        """Stop draining and every source; pick up what the sources still hold."""
        self.interrupt_on_failure = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.drain()
        self._stop_sources()
        self.drain()
        self.store.close()

    def _stop_sources(self) -> None:
        for source in reversed(self._started):
            try:
                source.stop()
            except Exception as e:  # stopping one source must not leave the others running
                self.warn(f"power source {source.name!r} did not stop cleanly: {e}")
