"""The plugin kit's acquisition base: a power source written as ``open()`` and ``poll()``.

An author declares the channels in ``open`` and writes ``poll() -> readings``; ``PollingSource``
owns the rest: the sampling loop (a thread, or a child process when the ``mode`` option says
``process``), the buffer and its lock, dedup of repeated readings, error latching (a failure
is raised once, after the samples acquired before it), a watchdog for a loop that stops coming
round, and reaping of the processes a source starts. A source that reads a stream instead of
polling (a child's stdout, a serial port) returns ``Stream`` tasks and gets the same.

    class PDU(PollingSource):
        OPTIONS = (Option("url", required=True), Option("interval_s", "float", 1.0))

        def open(self):
            return [Channel("pdu", Quantity.POWER, Scope.SYSTEM_WALL, 1.0)]

        def poll(self):
            return {"pdu": float(json.load(urlopen(self.options["url"]))["watts"])}

``read()`` never makes a caller spin: each call hands over what accumulated since the last one
(one drain) and returns ``[]`` when nothing is new. In process mode the source is rebuilt in a
child process from its class path and options (``energyframe.kit.sampler``, this module's other
half), which exits when its parent dies and is reaped on ``stop()``.

This module imports only ``errors``, ``model``, ``options``, ``plugin`` and ``sampler`` (no pandas);
plugins import ``PollingSource`` from ``energyframe.plugin``.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import PowerSourceError
from ..model import Channel, ClockBase, Quantity, Sample, SourceContext
from ..options import Option
from .contract import PowerSource
from .sampler import Remote, reap
from .schedule import Schedule

#: what ``poll`` returns: ``{channel: value}``, stamped by the base at the middle of the poll on
#: each channel's clock and deduplicated (``dedup``); or samples the source stamped itself,
#: passed through as they are
Readings = Mapping[str, float] | Iterable[Sample]

MODES = ("thread", "process")
#: how long ``stop`` waits for a loop to end, and a reaped process to exit. Units: s.
JOIN_TIMEOUT_S = 5.0


#: CHANGES repeats an unchanged value every this many update periods, stamped one period before the
#: poll that saw it: often enough that a steady channel is never taken for a gap (3 periods) or a
#: stall (5 periods, at least 3 s), and never just before a late update (which would bend the line)
KEEPALIVE_PERIODS = 2.0
#: CHANGES: a value that stood for longer than this many update periods was seen at more than one
#: update, so the last update that showed it (one period before the change) gets a sample too
HOLD_AFTER_PERIODS = 1.5


class Dedup(str, enum.Enum):
    """What the base does with ``{channel: value}`` readings (``PollingSource.dedup``).

    A poll is stamped where it reads (``Poller.reads_at``: its middle unless the poller knows
    better); a change is stamped midway between the poll that last saw the old value and the
    first that sees the new one, so polling faster than the channel updates
    (``Poller.interval_s < Channel.resolution_s``) stamps each update within half a poll.
    """

    #: the default: a poller faster than the channel's ``resolution_s`` gets TICKS for a counter
    #: and CHANGES for anything else; a slower poller, a stream, or a channel without a
    #: resolution gets KEEP (each reading is a new one)
    AUTO = "auto"
    #: every reading is a sample at the poll's stamp (a counter read at a known instant)
    KEEP = "keep"
    #: only changes are samples (a sensor polled faster than it updates): no repeat of an
    #: unchanged value right before a late update (which would put a step into a ramp), a
    #: keep-alive repeat once a value has stood for ``KEEPALIVE_PERIODS``, and a value that stood
    #: for more than ``HOLD_AFTER_PERIODS`` also sampled one period before the change, so that a
    #: load step is not spread over the flat stretch before it
    CHANGES = "changes"
    #: only changes are samples, and the first value is not one: a counter's tick times, which
    #: an energy window interpolates between. A change seen by polls more than an update period
    #: apart is stamped midway through the period before the later one (the last tick between
    #: them came within it). Never repeated: a counter that stops changing has stalled, and the
    #: run must notice
    TICKS = "ticks"


@dataclass
class _Seen:
    """A deduplicated channel's last value, when it began, and when it was last a sample."""

    value: float
    since_s: float
    sampled_s: float | None


@dataclass(frozen=True)
class Poller:
    """A loop that calls ``poll`` and pauses ``interval_s`` between two calls.

    Args:
        poll: returns ``Readings``; raises ``PowerSourceError`` (with what to do) to fail.
        interval_s: pause between the end of one call and the start of the next. Units: s.
        name: the thread's name, and the loop's name in messages.
        silent_after_s: the loop not coming round for this long (the pause included) fails
            the source: a call that hangs in a driver, a request without a timeout. ``None``:
            never. Units: s.
        on_silence: the failure message, given how long the loop has been quiet.
        reads_at: where inside its call ``poll`` reads the sensor, as a fraction of the call:
            0.0 at its start, 1.0 at its end. Unknown: 0.5, the middle. A call that reads first
            and then sometimes blocks (NVML's field query, ``power/nvml/source.py``) is stamped
            at its start, or a long call moves its reading late by half the call.
        schedule: decides each pause from what the poll read (``schedule.TickSchedule``: densely
            only around a counter's expected ticks, ``interval_s`` apart there); ``None``: a
            pause of ``interval_s`` after every call.
    """

    poll: Callable[[], Readings]
    interval_s: float
    name: str = "poll"
    silent_after_s: float | None = None
    on_silence: Callable[[float], str] | None = None
    reads_at: float = 0.5
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.reads_at <= 1.0:
            raise ValueError(f"Poller.reads_at must lie in [0, 1] (a fraction of the call), not {self.reads_at!r}")


@dataclass(frozen=True)
class Stream:
    """A loop over ``read()``, an iterator that blocks until readings come (a child's stdout).

    The iterator ends when ``PollingSource.stopping`` is set or its input ends; ending while
    the source is not stopping fails the source (raise ``PowerSourceError`` to say why).
    ``silent_after_s``: yielding nothing for this long fails the source (``on_silence`` says
    why); yield an empty list to show the stream is alive when input came that holds no sample.
    """

    read: Callable[[], Iterable[Readings]]
    name: str = "stream"
    silent_after_s: float | None = None
    on_silence: Callable[[float], str] | None = None


Task = Poller | Stream


@dataclass
class LoopStats:
    """What one loop cost: its calls, the time inside them, its thread's CPU time. Units: s."""

    polls: int = 0
    busy_s: float = 0.0
    cpu_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"polls": self.polls, "busy_s": round(self.busy_s, 6), "cpu_s": round(self.cpu_s, 6)}


def _resolve(policy: Dedup, channel: Channel, interval_s: float | None) -> Dedup:
    """AUTO made concrete for one channel read by a loop pausing ``interval_s`` (``None``: a stream)."""
    if policy is not Dedup.AUTO:
        return policy
    if interval_s is None or channel.resolution_s <= 0 or interval_s >= channel.resolution_s:
        return Dedup.KEEP
    return Dedup.TICKS if channel.quantity == Quantity.ENERGY else Dedup.CHANGES


def mode_option(default: str = "thread") -> Option:
    """The ``mode`` option: acquire in a thread of the measured process, or in a child process."""
    return Option(
        "mode",
        "choice",
        default,
        "sample in a separate process, or a thread of this one",
        choices=("process", "thread"),
    )


class PollingSource(PowerSource):
    """A power source that polls (or reads a stream); the base does the acquisition around it.

    Write ``open`` (touch the hardware, return the channels) and ``poll``, or ``tasks`` for
    several loops or streams; optionally ``close``, ``dedup``, ``describe`` and ``prepare``.
    Call ``warn`` for problems that do not stop the run, ``spawn`` to start a process that is
    reaped on ``stop``, and raise ``PowerSourceError`` from ``poll`` to fail.
    """

    #: the pause between polls of the default poller, when the source has no ``interval_s``
    #: or ``interval_ms`` option. Units: s.
    POLL_INTERVAL_S: ClassVar[float] = 0.1
    #: where to acquire when the source has no ``mode`` option (``mode_option()`` adds one)
    DEFAULT_MODE: ClassVar[str] = "thread"
    #: what the child process is called in messages ("the NVML sampler process died")
    PROCESS_LABEL: ClassVar[str] = ""
    #: process mode keeps ``<raw_dir>/<PROCESS_LOG>.log`` (the protocol) and ``.stderr``
    PROCESS_LOG: ClassVar[str] = "sampler"
    #: how long the child may take to open the hardware. Units: s.
    START_TIMEOUT_S: ClassVar[float] = 60.0
    #: samples held but not read beyond this mean the source floods: it fails
    MAX_PENDING: ClassVar[int] = 1_000_000
    #: a source that polls much faster than every ``POLL_INTERVAL_S`` says so here, in a line:
    #: what it polls, how often and why (``energyframe list`` shows it, run.json keeps it in the
    #: source's ``info`` beside what acquisition cost: ``acquisition``). Empty: it does not
    FAST_POLLING: ClassVar[str] = ""

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        # the name positionally, as Plugin takes it: a source may declare an option called 'name'
        super().__init__(name, **options)
        #: what ``prepare`` returned in the measured process, wherever ``open`` runs
        self.prepared: dict[str, Any] = {}
        #: the context ``start`` was given (in the child: its raw_dir, and warn to the parent)
        self.context = SourceContext()
        self._poll_lock = threading.Lock()
        self._poll_pending: list[Sample] = []
        self._poll_error: str | None = None
        self._poll_raised = False
        self._poll_stop = threading.Event()
        self._poll_children: list[subprocess.Popen] = []
        self._poll_threads: list[threading.Thread] = []
        self._poll_alive: dict[str, float] = {}
        self._poll_tasks: list[Task] = []
        self._poll_channels: dict[str, Channel] = {}
        self._poll_policy: dict[str, Dedup] = {}
        self._poll_last: dict[str, _Seen] = {}
        #: channels the base stamped (``{channel: value}`` readings), by the pause of the loop that
        #: read them (``None``: a stream): what ``energyframe.testing`` checks the poll rate against
        self._poll_stamped: dict[str, float | None] = {}
        self._poll_opened = False
        self._poll_remote: Any = None  # a sampler.Remote in process mode
        self._poll_stats: dict[str, LoopStats] = {}
        self._poll_started_s: float | None = None
        self._poll_stopped_s: float | None = None
        self._poll_commands: list[subprocess.Popen] = []  # run_command's, killed on stop
        #: per counter (TICKS), how far apart the two polls that bracketed each tick read
        self._poll_brackets: dict[str, list[float]] = {}

    # -- what an author writes -------------------------------------------------------------
    def open(self) -> Sequence[Channel]:
        """Touch the hardware and return the channels (runs where acquisition runs).

        Raises:
            PowerSourceError: the hardware, driver or permissions are missing, with the fix.
        """
        raise NotImplementedError(f"{type(self).__name__} must define open()")

    def poll(self) -> Readings:
        """One reading of every channel: ``{channel: value}``, or samples stamped here."""
        raise NotImplementedError(f"{type(self).__name__} must define poll() or tasks()")

    def tasks(self) -> Sequence[Task]:
        """The loops to run once ``open`` succeeded: by default one ``Poller`` over ``poll``."""
        return [Poller(self.poll, self.poll_interval_s(), name=self.name)]

    def close(self) -> None:
        """Release what ``open`` took; called once the loops ended, also after ``open`` failed."""

    def dedup(self, channel: Channel) -> Dedup:
        """How ``{channel: value}`` readings of ``channel`` are deduplicated (``Dedup``); the
        default, AUTO, decides from the poll interval and the channel's update period."""
        return Dedup.AUTO

    def describe(self) -> Mapping[str, Any]:
        """What was measured, for run.json; runs where acquisition runs (``info`` returns it)."""
        return {}

    def prepare(self) -> Mapping[str, Any]:
        """State only the measured process knows (JSON values), taken before acquisition starts
        and available as ``self.prepared`` where ``open`` runs, also in a child process."""
        return {}

    # -- what an author calls -----------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.options.get("mode") or self.DEFAULT_MODE

    @property
    def sampler_process(self) -> subprocess.Popen | None:
        """The child process acquiring in process mode (``None`` in thread mode)."""
        return self._poll_remote.proc if self._poll_remote is not None else None

    @property
    def stopping(self) -> bool:
        """True once ``stop`` began or acquisition failed: loops and streams should end."""
        return self._poll_stop.is_set()

    def poll_interval_s(self) -> float:
        """The default poller's pause: the ``interval_s`` or ``interval_ms`` option, if any."""
        if self.options.get("interval_s") is not None:
            return float(self.options["interval_s"])
        if self.options.get("interval_ms") is not None:
            return float(self.options["interval_ms"]) / 1e3
        return self.POLL_INTERVAL_S

    def warn(self, message: str) -> None:
        """Report a problem that does not stop the run (in process mode, sent to the parent)."""
        self.context.warn(message)

    def spawn(self, args: Sequence[str], **popen: Any) -> subprocess.Popen:
        """Start a process that ``stop`` (or a failure) terminates and reaps."""
        proc = subprocess.Popen(list(args), **popen)
        self._poll_children.append(proc)
        return proc

    def run_command(self, args: Sequence[str], timeout_s: float) -> str:
        """Run a command to its end and return what it printed (a source that runs a command on
        every poll). It runs in a session of its own: on a timeout, and when the source stops,
        its whole process group is killed, so that a shell's children, which would keep its
        output open and the poll waiting, go with it.

        Raises:
            PowerSourceError: it did not end within ``timeout_s``, or it exited with an error.
        """
        proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        with self._poll_lock:
            self._poll_commands.append(proc)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.communicate()
            raise PowerSourceError(
                f"power source {self.name!r}: {args[0]} did not finish within {timeout_s:g} s (killed)"
            ) from None
        finally:
            with self._poll_lock:
                self._poll_commands.remove(proc)
        if proc.returncode != 0 and not self.stopping:
            lines = [line for line in (err or "").splitlines() if line.strip()]
            why = f": {lines[-1].strip()}" if lines else ""
            raise PowerSourceError(
                f"power source {self.name!r}: {args[0]} exited with code {proc.returncode}{why}"
            )
        return out

    def fail(self, message: str) -> None:
        """Latch a failure from any thread: acquisition stops, ``read`` raises it once, after
        the samples acquired before it."""
        with self._poll_lock:
            if self._poll_error is not None:
                return
            self._poll_error = message
        self._poll_stop.set()
        self._reap_children()

    # -- the PowerSource contract ---------------------------------------------------------------
    def start(self, context: SourceContext) -> Sequence[Channel]:
        self.context = context
        self.prepared = json.loads(json.dumps(dict(self.prepare())))  # what a child would get
        if self.mode == "process":
            self._poll_remote = Remote(self)
            return self._poll_remote.start(context)
        channels = self._open_here()
        self._run_here(self._take)
        return channels

    def read(self) -> list[Sample]:
        if self._poll_remote is not None:
            self._poll_remote.pull()
        else:
            self._watch()
        with self._poll_lock:
            out, self._poll_pending = self._poll_pending, []
            if out:
                return out
            if self._poll_error is not None and not self._poll_raised:
                self._poll_raised = True
                raise PowerSourceError(self._poll_error)
        return []

    def stop(self) -> None:
        if self._poll_remote is not None:
            self._poll_remote.stop()
        else:
            self._stop_here()

    def info(self) -> Mapping[str, Any]:
        if self._poll_remote is not None:
            info = dict(self._poll_remote.info)  # the child's: its acquisition once it stopped
        else:
            info = dict(self.describe())
            if self._poll_started_s is not None:
                info["acquisition"] = self.acquisition()
        if "mode" in self.options:
            info["mode"] = self.mode
        if self.FAST_POLLING:
            info["fast_polling"] = self.FAST_POLLING
        return info

    def stamp_half_widths_s(self) -> dict[str, float]:
        """Half the median time between the two polls around each counter's ticks (``Dedup.TICKS``),
        as this source's report says it (``info()["acquisition"]["tick_brackets_s"]``: the child's
        in process mode). Units: s."""
        acquisition = self.info().get("acquisition")
        reported = acquisition.get("tick_brackets_s") if isinstance(acquisition, Mapping) else None
        if not isinstance(reported, Mapping):
            return {}
        medians = {name: q.get("median") if isinstance(q, Mapping) else None for name, q in reported.items()}
        return {name: float(m) / 2.0 for name, m in medians.items() if isinstance(m, (int, float)) and m > 0}

    def acquisition(self, cpu_s: float | None = None, wall_s: float | None = None) -> dict[str, Any]:
        """What acquiring cost where it runs: CPU seconds over wall seconds (``cpu_share``, a
        fraction of one core) and, per loop, its polls, the time inside them, its thread's CPU
        time and what its schedule did. ``cpu_s``, ``wall_s``: the whole sampler process's (in
        process mode); by default the loops' threads' CPU time over the time they ran."""
        end = self._poll_stopped_s if self._poll_stopped_s is not None else time.monotonic()
        loops = self._loop_costs()
        if cpu_s is None:
            cpu_s = sum(s.cpu_s for s in self._poll_stats.values())
        if wall_s is None:
            wall_s = end - self._poll_started_s if self._poll_started_s is not None else 0.0
        return {
            "cpu_s": round(cpu_s, 6),
            "wall_s": round(wall_s, 6),
            "cpu_share": round(cpu_s / wall_s, 5) if wall_s > 0 else None,
            "loops": loops,
            # each tick's stamp lies within half its bracket of the change
            "tick_brackets_s": {name: _quantiles(b) for name, b in list(self._poll_brackets.items()) if b},
        }

    def _loop_costs(self) -> dict[str, Any]:
        """Per loop, by name: its polls, the time inside them, its thread's CPU time, and what
        its schedule did (a loop that has one)."""
        loops: dict[str, Any] = {}
        for task in self._poll_tasks:
            stats = self._poll_stats.get(task.name, LoopStats())
            entry = stats.to_json()
            schedule = getattr(task, "schedule", None)
            if schedule is not None:
                entry.update(schedule.stats())
            loops[task.name] = entry
        return loops

    # -- acquisition where it runs (this process, or the child) ---------------------------------
    def _open_here(self) -> list[Channel]:
        self._poll_stop.clear()
        try:
            channels = list(self.open())
            self._poll_opened = True
            self._poll_channels = {c.name: c for c in channels}
            self._poll_policy = {c.name: Dedup(self.dedup(c)) for c in channels}
            self._poll_tasks = list(self.tasks())
        except BaseException:
            self._reap_children()
            self._close_once(force=True)
            raise
        return channels

    def _run_here(self, sink: Callable[[list[Sample]], None]) -> None:
        now = time.monotonic()
        self._poll_started_s = now
        for task in self._poll_tasks:
            self._poll_alive[task.name] = now
            self._poll_stats[task.name] = LoopStats()
            target = self._poll_loop if isinstance(task, Poller) else self._stream_loop
            thread = threading.Thread(
                target=self._guard, args=(target, task, sink), name=f"energyframe-{task.name}", daemon=True
            )
            self._poll_threads.append(thread)
        for thread in self._poll_threads:
            thread.start()

    def _stop_here(self) -> None:
        if self._poll_stopped_s is not None:
            return  # a second stop does nothing (a loop stuck in a call was waited for once)
        self._poll_stop.set()
        self._reap_children()
        for thread in self._poll_threads:
            thread.join(timeout=JOIN_TIMEOUT_S)
        self._poll_stopped_s = time.monotonic()
        self._close_once()

    def _close_once(self, force: bool = False) -> None:
        if self._poll_opened or force:
            self._poll_opened = False
            try:
                self.close()
            except Exception as e:  # releasing hardware must not hide the first error
                if not force:
                    self.warn(f"power source {self.name!r} did not close cleanly: {e}")

    def _guard(self, loop, task: Task, sink) -> None:
        try:
            loop(task, sink)
        except Exception as e:
            if self.stopping:
                return  # a call cut short by the stop (its command killed): nothing went wrong
            if isinstance(e, PowerSourceError):
                self.fail(str(e))
            else:  # a bug must stop the run visibly, not silently stop sampling
                self.fail(f"{task.name} failed: {e!r}")

    def _poll_loop(self, task: Poller, sink) -> None:
        prev_at: float | None = None
        stats = self._poll_stats.setdefault(task.name, LoopStats())
        cpu_start = time.thread_time()
        while not self._poll_stop.is_set():
            m0 = time.monotonic()
            readings = task.poll()
            m1 = time.monotonic()
            self._poll_alive[task.name] = m1
            stats.polls += 1
            stats.busy_s += m1 - m0
            at = m0 + task.reads_at * (m1 - m0)
            batch = self._stamp(readings, at, prev_at, task.interval_s)
            prev_at = at
            if batch:
                sink(batch)
            pause = task.interval_s
            if task.schedule is not None:
                pause = task.schedule.pause_s(at, readings, time.monotonic())
            stats.cpu_s = time.thread_time() - cpu_start
            if pause > 0:
                self._poll_stop.wait(pause)

    def _stream_loop(self, task: Stream, sink) -> None:
        stats = self._poll_stats.setdefault(task.name, LoopStats())
        cpu_start = time.thread_time()
        for readings in task.read():
            now = time.monotonic()
            self._poll_alive[task.name] = now
            stats.polls += 1
            stats.cpu_s = time.thread_time() - cpu_start
            batch = self._stamp(readings, now, None, None)
            if batch:
                sink(batch)
        if not self._poll_stop.is_set():
            raise PowerSourceError(f"{task.name} ended unexpectedly")

    def _stamp(
        self, readings: Readings, at: float, prev_at: float | None, interval_s: float | None
    ) -> list[Sample]:
        """Samples from one poll read at ``at`` (the previous one at ``prev_at``; ``interval_s``:
        the poller's pause; ``None`` for a stream)."""
        if not isinstance(readings, Mapping):
            return self._declared_samples(readings)
        out: list[Sample] = []
        offset = None
        for name, value in readings.items():
            channel = self._poll_channels.get(name)
            if channel is None:
                raise PowerSourceError(self._undeclared(name))
            if channel.clock == ClockBase.WALL and offset is None:
                offset = time.time() - time.monotonic()
            t, before = _on_channel_clock(channel, at, prev_at, offset)
            out.extend(self._samples_of(channel, value, t, before, interval_s))
        return out

    def _declared_samples(self, readings: Readings) -> list[Sample]:
        """Readings the source stamped itself, as samples; each must be of a declared channel.

        Raises:
            PowerSourceError: a sample of a channel ``open()`` did not declare.
        """
        stamped = [Sample(*s) for s in readings]
        for s in stamped:
            if s.channel not in self._poll_channels:
                raise PowerSourceError(self._undeclared(s.channel))
        return stamped

    def _samples_of(
        self, channel: Channel, value: Any, t: float, before: float | None, interval_s: float | None
    ) -> list[Sample]:
        """One reading of ``channel``, read at ``t`` (the previous poll at ``before``), as the
        samples its dedup policy keeps."""
        name = channel.name
        self._poll_stamped[name] = interval_s
        policy = _resolve(self._poll_policy[name], channel, interval_s)
        if policy is Dedup.KEEP:
            return [Sample(name, t, float(value))]
        return self._changes(channel, policy, float(value), t, before)

    def _changes(
        self, channel: Channel, policy: Dedup, value: float, t: float, before: float | None
    ) -> list[Sample]:
        """CHANGES and TICKS: the samples one reading of ``channel`` adds."""
        seen = self._poll_last.get(channel.name)
        if seen is None:
            first = policy is Dedup.CHANGES
            self._poll_last[channel.name] = _Seen(value, t, t if first else None)
            return [Sample(channel.name, t, value)] if first else []
        if value == seen.value:
            return _still(channel, policy, seen, value, t)
        return self._changed(channel, policy, seen, value, t, before)

    def _changed(
        self, channel: Channel, policy: Dedup, seen: _Seen, value: float, t: float, before: float | None
    ) -> list[Sample]:
        """A new value: stamped between the previous poll and this one, after a sample of the
        old value where it was held long after its last sample (CHANGES)."""
        name, period = channel.name, channel.resolution_s
        # the change happened between the previous poll and this one
        changed = (before + t) / 2 if before is not None else t
        if policy is Dedup.TICKS and before is not None:
            self._poll_brackets.setdefault(name, []).append(t - before)
            if period > 0 and t - before > period:
                # polls more than an update period apart (a poller held up): the counter may
                # have ticked several times between them, and the value this poll shows is the
                # last tick's, which lies within one period before it
                changed = t - period / 2
        out = []
        held = changed - period
        if (
            policy is Dedup.CHANGES
            and changed - seen.since_s > HOLD_AFTER_PERIODS * period
            and (seen.sampled_s is None or held > seen.sampled_s)
        ):
            out.append(Sample(name, held, seen.value))  # the last update that still showed it
        out.append(Sample(name, changed, value))
        self._poll_last[name] = _Seen(value, changed, changed)
        return out

    def _undeclared(self, name: str) -> str:
        return (
            f"power source {self.name!r} produced a sample for channel {name!r}, which open() did not declare"
        )

    def _take(self, batch: list[Sample]) -> None:
        with self._poll_lock:
            self._poll_pending.extend(batch)
            flooded = len(self._poll_pending) > self.MAX_PENDING
        if flooded:
            self.fail(
                f"power source {self.name!r} holds more than {self.MAX_PENDING} samples nobody read: "
                "it produces far more than its channels' update periods allow"
            )

    def _watch(self) -> None:
        """Fail the source when a loop has not come round for longer than it may."""
        if self._poll_stop.is_set():
            return
        now = time.monotonic()
        for task in self._poll_tasks:
            if task.silent_after_s is None:
                continue
            quiet = now - self._poll_alive.get(task.name, now)
            if quiet > task.silent_after_s:
                message = (
                    task.on_silence(quiet)
                    if task.on_silence is not None
                    else f"{task.name} delivered nothing for {quiet:.1f} s"
                )
                self.fail(message)
                return

    def _reap_children(self) -> None:
        with self._poll_lock:
            commands = list(self._poll_commands)
        for proc in commands:
            kill_group(proc)
        for proc in self._poll_children:
            reap(proc)


def _on_channel_clock(
    channel: Channel, at: float, prev_at: float | None, offset: float | None
) -> tuple[float, float | None]:
    """A poll's read time and the previous one's (monotonic) on ``channel``'s clock: moved by
    ``offset`` (wall minus monotonic) for a wall-clock channel."""
    if channel.clock != ClockBase.WALL or offset is None:
        return at, prev_at
    return at + offset, None if prev_at is None else prev_at + offset


def _still(channel: Channel, policy: Dedup, seen: _Seen, value: float, t: float) -> list[Sample]:
    """An unchanged reading: with CHANGES, say every ``KEEPALIVE_PERIODS`` that the value still
    holds, or it looks like a gap. Stamped one period back: the update behind this reading is up
    to a period old, and the one after that instant surely showed the same value, so a change
    right after cannot bend the line."""
    period = channel.resolution_s
    alive = t - period
    due = seen.sampled_s is None or alive - seen.sampled_s >= KEEPALIVE_PERIODS * period
    if policy is Dedup.CHANGES and due and alive > seen.since_s:
        seen.sampled_s = alive
        return [Sample(channel.name, alive, value)]
    return []


def _quantiles(values: list[float]) -> dict[str, Any]:
    """The median, 95th percentile and largest of ``values``, and how many (nearest rank)."""
    ordered = sorted(values)
    n = len(ordered)
    return {
        "n": n,
        "median": round(ordered[n // 2], 6),
        "p95": round(ordered[min(n - 1, int(0.95 * n))], 6),
        "max": round(ordered[-1], 6),
    }


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a process started in a session of its own, and everything in its process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
