"""Runs the power sources: starts them, drains their samples in the background, stops them.

Draining happens on one thread that wakes once a second, so the measured code is interrupted
rarely and briefly; sources do their own acquisition (threads or processes) and only buffer.
Each wake-up calls every source's ``read()`` exactly once: a source that always has something
new can never hold the drain thread (or the run's start) in a loop.

The drain thread also watches the sources: a channel that delivers nothing for several of its
update periods has stalled (a child process alive but silent, a sensor answering ``[N/A]``),
and the run stops as incomplete instead of integrating windows the samples never covered.
"""

from __future__ import annotations

import errno
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.clock import ClockModel
from ..core.samples import PARTIAL_NAME, SampleStore
from ..errors import PowerSourceError
from ..model import Channel, SourceContext, Timing
from ..plugin import PowerSource

DRAIN_INTERVAL_S = 1.0
#: channels of unknown timing (wall meters) report late (their lag is estimated after the run,
#: typically 0.5-5 s): wait this much longer for their samples after the last window, so that
#: it stays covered once they are moved
LATE_SETTLE_S = 6.0
#: a channel silent for this many update periods (and at least STALL_MIN_S) has stalled
STALL_PERIODS = 5.0
STALL_MIN_S = 3.0


def settle_s(channel: Channel) -> float:
    """How long after an instant a channel's samples must reach, to cover it once they are
    placed: a reading that averages the period before it moves back by half that period, and
    a late one by an unknown lag (``LATE_SETTLE_S``). Units: s."""
    if channel.timing == Timing.UNKNOWN:
        return LATE_SETTLE_S
    if channel.timing == Timing.PERIOD_END:
        return channel.averaging_s / 2
    return 0.0


def stall_after_s(channel: Channel) -> float:
    """Silence after which a channel counts as stalled. Units: s."""
    return max(STALL_PERIODS * channel.resolution_s, STALL_MIN_S) + settle_s(channel)


class Recorder:
    """Owns the sources and the sample store for one run.

    Args:
        sources: power sources, not started yet.
        clock: the run's clock model (maps wall-stamped samples onto the monotonic timeline).
        run_dir: where ``samples.partial.csv`` and the sources' raw logs go (``None``: memory).
        warn: reports a problem that does not stop the run.
        now: the monotonic clock (injected by tests of the stall watchdog).
        devices, rank, local_rank: what the sources are told about this process under a launcher
            (``SourceContext``): the GPUs it uses and its rank.
    """

    def __init__(
        self,
        sources: Sequence[PowerSource],
        clock: ClockModel,
        run_dir: Path | None = None,
        warn: Callable[[str], None] = print,
        now: Callable[[], float] = time.monotonic,
        devices: Sequence[str] | None = None,
        rank: int = 0,
        local_rank: int = 0,
    ) -> None:
        self.sources = list(sources)
        self.clock = clock
        self.run_dir = run_dir
        self.warn = warn
        self.now = now
        self.devices = list(devices) if devices is not None else None
        self.rank = rank
        self.local_rank = local_rank
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
        self._arrived: dict[str, float] = {}  # channel -> when its last sample was drained
        self._last_drain: float | None = None

    @property
    def channels(self) -> dict[str, Channel]:
        return dict(self.store.channels)

    @property
    def running(self) -> bool:
        """Every source started and the drain thread runs."""
        return self._thread is not None

    def start(self) -> None:
        """Start every source; if one fails, stop those already started and re-raise.

        A source whose own ``start`` raised is not stopped: it must release what it acquired
        before raising (docs/writing-plugins.md)."""
        for source in self.sources:
            raw_dir = self.run_dir / "raw" / source.name if self.run_dir is not None else None
            try:
                try:
                    context = SourceContext(
                        raw_dir=raw_dir, warn=self.warn, devices=self.devices, rank=self.rank,
                        local_rank=self.local_rank,
                    )
                    channels = list(source.start(context))
                except PowerSourceError as e:
                    raise PowerSourceError(f"power source {source.name!r} could not start: {e}") from e
                except Exception as e:  # a plugin bug, said once and clearly
                    raise PowerSourceError(
                        f"power source {source.name!r} could not start: {type(e).__name__}: {e}"
                    ) from e
                self._started.append(source)
                try:
                    self.store.register(source.name, channels)
                except ValueError as e:  # two sources declaring one channel name
                    raise PowerSourceError(f"{e} (give one of them a prefix= option)") from e
            except BaseException:
                self._stop_sources()
                self._started.clear()
                self.store.close()
                raise
            self.source_channels[source.name] = channels
        self._thread = threading.Thread(target=self._drain_loop, name="energyframe-drain", daemon=True)
        self._thread.start()

    def drain(self) -> None:
        """Move the samples each source holds into the store (and onto disk): one ``read()`` each."""
        with self._drain_lock:
            now = self.now()
            for source in self._started:
                if source.name == self.failed_source:
                    continue
                try:
                    batch = source.read()
                    if batch:
                        self.store.add(source.name, batch)
                        for sample in batch:
                            self._arrived[sample.channel] = now
                except PowerSourceError as e:
                    self._fail(source.name, e)
                except OSError as e:  # the partial log could not be written (disk full)
                    self._fail(source.name, PowerSourceError(_disk_message(self.store, e)))
                except Exception as e:  # a plugin bug must not lose the other sources' samples
                    self._fail(source.name, PowerSourceError(f"{type(e).__name__}: {e} (a bug in the plugin)"))

    def watch(self) -> None:
        """Fail the run if a channel stopped delivering (called after each drain)."""
        now = self.now()
        late_drain = self._last_drain is not None and now - self._last_drain > 3 * DRAIN_INTERVAL_S
        self._last_drain = now
        if late_drain:
            # this thread itself was held up (the measured code kept the interpreter busy): the
            # sources' threads may have been too, so silence proves nothing yet
            for name in self._arrived:
                self._arrived[name] = now
            return
        for name, channel in self.store.channels.items():
            source = self.store.channel_source[name]
            if not channel.integrable or source == self.failed_source or name not in self._arrived:
                continue
            silent = now - self._arrived[name]
            if silent > stall_after_s(channel):
                self._fail(
                    source,
                    PowerSourceError(
                        f"channel {name!r} delivered no sample for {silent:.1f} s (it updates every "
                        f"{channel.resolution_s:g} s): the source stalled, and energy after its last sample "
                        "is unknown"
                    ),
                )
                return

    def _fail(self, name: str, error: PowerSourceError) -> None:
        if self.failure is not None:
            self.warn(f"power source {name!r} also failed: {error}")
            return
        self.failure = error
        self.failed_source = name
        if self.interrupt_on_failure and threading.current_thread() is not threading.main_thread():
            # a real signal, so that a main thread blocked in a system call (waiting for a
            # measured command, sleeping) wakes up too; the run stops and says which source failed
            ident = threading.main_thread().ident
            if ident is not None:
                signal.pthread_kill(ident, signal.SIGINT)

    def _drain_loop(self) -> None:
        while not self._stop.wait(DRAIN_INTERVAL_S):
            self.drain()
            self.watch()

    def wait_for_samples(self, after_s: float | None, timeout_s: float) -> list[str]:
        """Wait until every integrable channel has a sample at or after ``after_s`` (monotonic;
        ``None``: any sample); channels of unknown timing, whose samples will be moved back by
        their lag, until ``LATE_SETTLE_S`` later. Returns the channels still lacking one."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.drain()
            missing = []
            for name, channel in self.store.channels.items():
                if not channel.integrable or self.store.channel_source[name] == self.failed_source:
                    continue
                last = self.store.last_time(name)
                if last is None or (after_s is not None and last < after_s + settle_s(channel)):
                    missing.append(name)
            if not missing or time.monotonic() >= deadline or self.failure is not None:
                return missing
            time.sleep(0.02)

    def coverage_timeout_s(self) -> float:
        """How long to wait for a channel's next sample: three update periods, at least 1 s
        (plus the settling time of late channels)."""
        channels = [c for c in self.store.channels.values() if c.integrable]
        periods = [c.resolution_s for c in channels]
        settle = max((settle_s(c) for c in channels), default=0.0)
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


def _disk_message(store: SampleStore, error: OSError) -> str:
    where = store.partial_path or "the run directory"
    if error.errno == errno.ENOSPC:
        return f"cannot write {where}: no space left on the device; the samples read so far are there"
    return f"cannot write {where}: {error.strerror or error}"
