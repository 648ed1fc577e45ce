"""Runs the power sources: starts them, drains their samples in the background, stops them.

Draining happens on one thread that wakes once a second, so the measured code is interrupted
rarely and briefly; sources do their own acquisition (threads or processes) and only buffer.
Each wake-up calls every source's ``read()`` exactly once: a source that always has something
new can never hold the drain thread (or the run's start) in a loop.

The drain thread also watches the sources: a channel that delivers nothing for several of its
update periods has stalled (a child process alive but silent, a sensor answering ``[N/A]``), and
so has a counter whose samples keep coming but never change (a frozen ``energy_uj``); the run
stops as incomplete instead of integrating windows the samples never covered.

Every call into a source runs with a time budget (``energyframe.kit.calls``): a ``start()``,
``read()`` or ``stop()`` that blocks fails the source with a message naming the call, after a
bounded wait that Ctrl-C interrupts; one that raises ``SystemExit`` or ``KeyboardInterrupt`` is a
plugin bug, reported as one, and never ends the run's threads.
"""

from __future__ import annotations

import errno
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import plugin
from ..core.clock import ClockModel
from ..core.samples import PARTIAL_NAME
from ..core.samplestore import SampleStore
from ..errors import PowerSourceError
from ..kit.calls import BoundedCall, CallTimeout, PluginCallError, describe
from ..live.listener import Fanout, LiveListener
from ..model import Channel, Quantity, SourceContext, Timing
from ..plugin import PowerSource

DRAIN_INTERVAL_S = 1.0
#: channels of unknown timing (wall meters) report late (their lag is estimated after the run,
#: typically 0.5-5 s): wait this much longer for their samples after the last window, so that
#: it stays covered once they are moved
LATE_SETTLE_S = 6.0
#: a channel silent for this many update periods (and at least STALL_MIN_S) has stalled
STALL_PERIODS = 5.0
STALL_MIN_S = 3.0
#: how long a source's ``start()`` may take (the NVML sampler process alone may take a minute to
#: open the driver), and its ``stop()`` (its threads joined, its processes reaped). Units: s.
START_BUDGET_S = 120.0
STOP_BUDGET_S = 30.0


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
        listeners: told each source's channels and every drained reading (``live.listener``).
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
        listeners: Sequence[LiveListener] = (),
    ) -> None:
        self.sources = list(sources)
        self.live = Fanout(listeners, warn)
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
        self._changed: dict[str, float] = {}  # counter -> when its value last changed
        self._last_value: dict[str, float] = {}
        self._blocked: set[str] = set()  # sources whose read() never returned
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
        before raising (docs/writing-plugins.md). One whose ``start`` outlives ``START_BUDGET_S``
        fails the run, and is stopped if it ever returns."""
        for source in self.sources:
            try:
                channels = self._start_one(source)
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
            self.live.channels(source.name, channels)
        self._thread = threading.Thread(target=self._drain_loop, name="energyframe-drain", daemon=True)
        self._thread.start()

    def _start_one(self, source: PowerSource) -> list[Channel]:
        raw_dir = self.run_dir / "raw" / source.name if self.run_dir is not None else None
        context = SourceContext(
            raw_dir=raw_dir, warn=self.warn, devices=self.devices, rank=self.rank, local_rank=self.local_rank,
        )
        prefix = f"power source {source.name!r} could not start"
        call = BoundedCall(
            lambda: source.start(context), f"{source.name}.start()", name=f"energyframe-start-{source.name}",
            on_late_return=lambda _: source.stop(),
        )
        try:
            returned = call.wait(START_BUDGET_S)
        except CallTimeout as e:
            raise PowerSourceError(f"{prefix}: start() did not return within {START_BUDGET_S:g} s") from e
        except PluginCallError as e:
            raise PowerSourceError(f"{prefix}: start() raised {describe(e.error)} (a bug in the plugin)") from e
        except PowerSourceError as e:
            raise PowerSourceError(f"{prefix}: {e}") from e
        except Exception as e:  # a plugin bug, said once and clearly
            raise PowerSourceError(f"{prefix}: {describe(e)}") from e
        return _channels_of(source, returned)

    def drain(self) -> None:
        """Move the samples each source holds into the store (and onto disk): one ``read()`` each,
        each within ``READ_BUDGET_S``."""
        with self._drain_lock:
            now = self.now()
            for source in self._started:
                if source.name == self.failed_source or source.name in self._blocked:
                    continue
                try:
                    batch = self._read(source)
                    if batch:
                        self.store.add(source.name, batch)
                        self._note_arrivals(batch, now)
                        self.live.samples(source.name, batch, self.store.channels, self.clock)
                except PowerSourceError as e:
                    self._fail(source.name, e)
                except OSError as e:  # the partial log could not be written (disk full)
                    self._fail(source.name, PowerSourceError(_disk_message(self.store, e)))
                except Exception as e:  # a plugin bug must not lose the other sources' samples
                    self._fail(source.name, PowerSourceError(f"{describe(e)} (a bug in the plugin)"))

    def _read(self, source: PowerSource) -> list:
        call = BoundedCall(source.read, f"{source.name}.read()", name=f"energyframe-read-{source.name}")
        try:
            return call.wait(plugin.READ_BUDGET_S)
        except CallTimeout as e:
            self._blocked.add(source.name)  # its read() still runs: never call it again
            raise PowerSourceError(
                f"its read() did not return within {plugin.READ_BUDGET_S:g} s: read() must hand over the "
                "samples the source buffered without waiting for the device (docs/writing-plugins.md)"
            ) from e
        except PluginCallError as e:
            raise PowerSourceError(f"read() raised {describe(e.error)} (a bug in the plugin)") from e

    def _note_arrivals(self, batch: list, now: float) -> None:
        for sample in batch:
            self._arrived[sample.channel] = now
            channel = self.store.channels.get(sample.channel)
            if channel is not None and channel.quantity == Quantity.ENERGY:
                # a counter that keeps sending one value has stalled as surely as a silent one
                if self._last_value.get(sample.channel) != sample.value or sample.channel not in self._changed:
                    self._changed[sample.channel] = now
                self._last_value[sample.channel] = sample.value

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
            for name in self._changed:
                self._changed[name] = now
            return
        for name, channel in self.store.channels.items():
            source = self.store.channel_source[name]
            if not channel.integrable or source == self.failed_source or name not in self._arrived:
                continue
            message = self._stall_message(name, channel, now)
            if message is not None:
                self._fail(source, PowerSourceError(message))
                return

    def _stall_message(self, name: str, channel: Channel, now: float) -> str | None:
        limit = stall_after_s(channel)
        silent = now - self._arrived[name]
        every = f"it updates every {channel.resolution_s:g} s"
        if silent > limit:
            return (
                f"channel {name!r} delivered no sample for {silent:.1f} s ({every}): the source stalled, "
                "and energy after its last sample is unknown"
            )
        unchanged = now - self._changed.get(name, now)
        if unchanged > limit:
            return (
                f"channel {name!r} is a counter whose samples keep arriving but has not changed for "
                f"{unchanged:.1f} s ({every}): the counter is stuck, and energy after its last change is unknown"
            )
        return None

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
        try:
            while not self._stop.wait(DRAIN_INTERVAL_S):
                self.drain()
                self.watch()
        except BaseException as e:  # this thread must never die silently: the run would go on blind
            self._fail("(the drain thread)", PowerSourceError(f"the sample drain failed: {describe(e)}"))

    def wait_for_samples(self, after_s: float | None, timeout_s: float, settling: bool = True) -> list[str]:
        """Wait until every integrable channel has a sample at or after ``after_s`` (monotonic;
        ``None``: any sample); channels of unknown timing, whose samples will be moved back by
        their lag, until ``LATE_SETTLE_S`` later. ``settling=False``: secondary channels whose
        samples settle after the instant (a 1-s average: half a second) are not waited for.
        Returns the channels still lacking one."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.drain()
            missing = []
            for name, channel in self.store.channels.items():
                if not channel.integrable or self.store.channel_source[name] == self.failed_source:
                    continue
                if not settling and not channel.primary and settle_s(channel) > 0:
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
            # one drain reads each source once, within its budget
            self._thread.join(timeout=DRAIN_INTERVAL_S + plugin.READ_BUDGET_S * (1 + len(self._started)))
        self.drain()
        self._stop_sources()
        self.drain()
        self.store.close()

    def _stop_sources(self) -> None:
        for source in reversed(self._started):
            call = BoundedCall(source.stop, f"{source.name}.stop()", name=f"energyframe-stop-{source.name}")
            try:
                call.wait(STOP_BUDGET_S)
            except CallTimeout:
                self._blocked.add(source.name)  # a source that cannot stop is not read again either
                self.warn(
                    f"power source {source.name!r}: stop() did not return within {STOP_BUDGET_S:g} s; the run "
                    "went on without it (samples it still held are lost)"
                )
            except PluginCallError as e:
                self.warn(f"power source {source.name!r} did not stop cleanly: stop() raised {describe(e.error)}")
            except Exception as e:  # stopping one source must not leave the others running
                self.warn(f"power source {source.name!r} did not stop cleanly: {e}")

    def no_samples_message(self, missing: Sequence[str]) -> str:
        """Why channels have no sample yet: none arrived, or all that arrived were rejected."""
        rejected = self.store.rejected_json()
        parts = []
        silent = [name for name in missing if not rejected.get(name)]
        if silent:
            parts.append("no samples arrived from channel(s) " + ", ".join(silent) + " after the sources started")
        for name in missing:
            counts = rejected.get(name)
            if counts:
                total = sum(counts.values())
                why = ", ".join(f"{reason}: {n}" for reason, n in sorted(counts.items()))
                parts.append(
                    f"channel {name!r} sent {total} reading(s) that cannot be physical ({why}), and none "
                    "that can: they are kept in samples.partial.csv, never integrated"
                )
        return "; ".join(parts)


def _channels_of(source: PowerSource, returned: object) -> list[Channel]:
    """What ``start()`` returned, checked: a sequence of ``Channel``."""
    prefix = f"power source {source.name!r} could not start: start() returned"
    if isinstance(returned, (str, bytes)) or not isinstance(returned, Sequence):
        raise PowerSourceError(f"{prefix} {type(returned).__name__} {returned!r:.60}, not a list of Channel")
    for item in returned:
        if not isinstance(item, Channel):
            raise PowerSourceError(f"{prefix} {item!r:.60} ({type(item).__name__}), not a Channel")
    return list(returned)


def _disk_message(store: SampleStore, error: OSError) -> str:
    where = store.partial_path or "the run directory"
    if error.errno == errno.ENOSPC:
        return f"cannot write {where}: no space left on the device; the samples read so far are there"
    return f"cannot write {where}: {error.strerror or error}"
