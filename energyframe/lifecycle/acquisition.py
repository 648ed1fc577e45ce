"""The sampling side of a measurement: the run's clock, its power sources and their recorder.

``Acquisition`` starts the sources (through ``Recorder``) on the run's ``ClockModel``, waits
for their first samples and, once the last window closed, for a sample past it before it stops
them; it hands what they recorded over as a ``Recording``: the whole run for the final result,
or the samples from a time on for a live window's energy (``live.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.clock import ClockModel
from ..core.pipeline import Recording
from ..core.samples import empty_samples_frame
from ..core.windows import WindowRecord
from ..errors import EnergyFrameError, PowerSourceError, RunInterrupted
from ..live.listener import LiveListener
from ..model import Channel, Quantity
from ..plugin import PowerSource
from ..ranks.coordinator import Coordinator
from ..ranks.world import rank_devices
from ..results.result import COMPLETE, INCOMPLETE
from .live import LiveEnergy
from .recorder import Recorder
from .windowbook import WindowBook

Warn = Callable[[str], None]


class Acquisition:
    """The power sources of one run and what they recorded.

    Args:
        sources: power sources, not started (see ``registry.resolve_power``).
        listeners: live subscribers (``energyframe.live``), handed to the recorder.
    """

    def __init__(self, sources: Sequence[PowerSource], listeners: Sequence[LiveListener]) -> None:
        self.sources = list(sources)
        self.listeners = list(listeners)
        #: the run's clock, from ``start_clock`` on
        self.clock: ClockModel | None = None
        self.recorder: Recorder | None = None
        #: every channel delivered its first sample
        self.started = False

    # -- starting --------------------------------------------------------------------------
    def start_clock(self) -> None:
        """The run's clock: its first (wall, monotonic) pair."""
        self.clock = ClockModel()

    def start(self, out: Path | None, warn: Warn, coordinator: Coordinator) -> None:
        """Start the sources (those of this rank), their drain thread and their journal."""
        assert self.clock is not None
        self.recorder = Recorder(
            self.sources,
            self.clock,
            out,
            warn=warn,
            devices=rank_devices(coordinator.world),
            rank=coordinator.rank,
            local_rank=coordinator.local_rank,
            listeners=self.listeners,
        )
        self.recorder.start()

    def wait_for_first_samples(self) -> None:
        """Wait until every channel has delivered.

        Raises:
            PowerSourceError: a source failed, or a channel delivered nothing in time.
        """
        assert self.recorder is not None
        recorder = self.recorder
        missing = recorder.wait_for_samples(None, recorder.coverage_timeout_s() + 2.0)
        if recorder.failure is not None:  # said as run.json says it: the source named
            raise PowerSourceError(describe_exception(recorder.failure, recorder)) from recorder.failure
        if missing:
            raise PowerSourceError(recorder.no_samples_message(missing))
        self.started = True

    # -- while the run goes ----------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Every source started and the drain thread runs."""
        return self.recorder is not None and self.recorder.running

    @property
    def failure(self) -> PowerSourceError | None:
        """Why a source failed while the run went, if one did."""
        return self.recorder.failure if self.recorder is not None else None

    def describe(self, error: BaseException) -> str:
        """The reason an ``incomplete`` run gives for ``error`` (a failed source named first)."""
        return describe_exception(error, self.recorder)

    def channels(self) -> dict[str, Channel]:
        """The started sources' channels, by name."""
        return dict(self.recorder.channels) if self.recorder is not None else {}

    def source_channels(self) -> dict[str, list[Channel]]:
        """Each started source's channels, by source name; once the sources stopped, each polled
        counter with the half-width its ticks were stamped within (``stamped``), as the run's
        windows read it, so that run.json says it and a recomputation reads the same."""
        if self.recorder is None:
            return {}
        declared = self.recorder.source_channels
        now = stamped(
            {c.name: c for channels in declared.values() for c in channels}, self.recorder.store.channel_source, self.sources
        )
        return {source: [now.get(c.name, c) for c in channels] for source, channels in declared.items()}

    def primary_channels(self) -> list[str]:
        """The primary integrable channels, in order."""
        if self.recorder is None:
            return []
        return [n for n, c in self.recorder.store.channels.items() if c.primary and c.integrable]

    def device_channels(self) -> list[str]:
        """This process's own-device channels: the primary integrable channels of its first
        per-process source (nvml's ``gpuN``), which a run of several ranks adds up."""
        if self.recorder is None:
            return []
        for source in self.sources:
            if getattr(type(source), "PER_PROCESS", False):
                channels = self.recorder.source_channels.get(source.name, [])
                return [c.name for c in channels if c.primary and c.integrable]
        return []

    @contextmanager
    def interrupting_on_failure(self) -> Iterator[None]:
        """Inside the block a source that fails interrupts the main thread (SIGINT)."""
        assert self.recorder is not None
        self.recorder.interrupt_on_failure = True
        try:
            yield
        finally:
            self.recorder.interrupt_on_failure = False

    def wait_for(self, end_s: float) -> list[str]:
        """Wait (at most the coverage timeout) until every channel has a sample past ``end_s``;
        returns the channels still lacking one."""
        assert self.recorder is not None
        return self.recorder.wait_for_samples(end_s, self.recorder.coverage_timeout_s())

    def seen(self, record: WindowRecord) -> dict[str, int]:
        """Samples of each channel within a second of the window."""
        assert self.recorder is not None
        return {
            n: len(s.between(record.start_s - 1.0, record.end_s + 1.0))
            for n, s in self.recorder.store.all_series().items()
        }

    def to_listeners(self, energy: LiveEnergy) -> None:
        """Hand a window's live energy to the live subscribers (an exporter's window gauge)."""
        if self.recorder is not None:
            self.recorder.live.window_rows(energy.record.phase, energy.record.trial, energy.rows.to_dict("records"))

    # -- what was recorded -----------------------------------------------------------------
    def recording(self, book: WindowBook) -> Recording:
        """Everything the run recorded, with ``book``'s windows, for ``assemble``; each polled
        counter with the half-width its source stamped its ticks within (``stamped``)."""
        assert self.recorder is not None
        store = self.recorder.store
        recording = self._recording_of(
            store.all_series(),
            store.to_frame(),
            rejected=store.rejected_times(),
            rejected_counts=store.rejected_json(),
            records=list(book.records),
            idle_window=book.idle,
            work=dict(book.work),
            interrupted=frozenset(book.interrupted),
        )
        return replace(recording, channels=stamped(recording.channels, store.channel_source, self.sources))

    def live_recording(self, since_s: float, opened_s: list[float]) -> Recording:
        """The recording from ``since_s`` on (monotonic), without the raw record; ``opened_s``:
        the synced starts since then, so that a live window ending just before one reads its
        end as the final run will."""
        assert self.recorder is not None
        store = self.recorder.store
        series = {n: store.series_since(n, since_s) for n in store.channels}
        return self._recording_of(series, empty_samples_frame(), opened_s=opened_s)

    def _recording_of(self, series, samples, **more: Any) -> Recording:
        """A recording of these series and samples, with the run's clock, channels and sources."""
        assert self.recorder is not None and self.clock is not None
        store = self.recorder.store
        return Recording(
            clock=self.clock,
            channels=dict(store.channels),
            channel_source=dict(store.channel_source),
            series=series,
            samples=samples,
            sources=list(self.sources),
            **more,
        )

    # -- stopping --------------------------------------------------------------------------
    def stop(self, status: str, reason: str | None, last_end_s: float | None, warn: Warn) -> tuple[str, str | None]:
        """Wait until the last window is covered, stop the sources, take the clock's second
        pair; the status that results."""
        assert self.recorder is not None and self.clock is not None
        recorder = self.recorder
        if last_end_s is not None:
            try:
                # not for a secondary 1-s average, which settles half a second after the end: every
                # run would wait that long for a channel no figure needs (its last window says so)
                missing = recorder.wait_for_samples(last_end_s, recorder.coverage_timeout_s(), settling=False)
            except KeyboardInterrupt:
                missing = []
                status, reason = INCOMPLETE, reason or "interrupted by SIGINT while finishing"
            for name in missing:
                warn(f"channel {name!r} delivered no sample after the last window closed")
        recorder.stop()
        self.clock.finish()
        if recorder.failure is not None and status == COMPLETE:
            status, reason = INCOMPLETE, describe_exception(recorder.failure, recorder)
        drift = self.clock.wall_drift_s
        if drift is not None and abs(drift) > 0.01:
            warn(
                f"the wall clock moved {drift * 1e3:+.1f} ms against the monotonic clock during the "
                "run; wall-stamped samples (NVML, nvidia-smi) may be misplaced by up to that much"
            )
        return status, reason

    def stop_sources(self) -> None:
        """Stop whatever started, nothing measured (a run that could not start, or a rank's
        part that failed before measuring)."""
        if self.recorder is not None:
            self.recorder.stop()

    def discard_journal(self) -> None:
        """The samples are saved: drop their journal (``samples.partial.csv``)."""
        if self.recorder is not None:
            self.recorder.store.discard_partial()


def describe_exception(exc: BaseException, recorder: Recorder | None) -> str:
    """The ``reason`` of an incomplete run, said once."""
    if recorder is not None and recorder.failure is not None:
        return f"power source {recorder.failed_source!r} failed: {recorder.failure}"
    if isinstance(exc, (RunInterrupted, EnergyFrameError)):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT"
    return f"{type(exc).__name__}: {exc}"


def stamped(
    channels: Mapping[str, Channel], channel_source: Mapping[str, str], sources: Sequence[PowerSource]
) -> dict[str, Channel]:
    """``channels``, each energy counter that a source stamped by polling with the half-width of
    its stamps (``PowerSource.stamp_half_widths_s``, known once the source stopped). The window
    bound takes that, ±2 ms at least (``core/edge/errors.py``): a sampler set to poll less often
    (``nvml:interval_ms=8``) stamps within ±5 ms, and its windows' bounds say so."""
    widths: dict[str, float] = {}
    for source in sources:
        for name, half_width in _half_widths(source).items():
            if channel_source.get(name) == source.name:
                widths[name] = half_width
    return {
        name: replace(channel, stamp_s=widths[name])
        if name in widths and channel.quantity == Quantity.ENERGY
        else channel
        for name, channel in channels.items()
    }


def _half_widths(source: PowerSource) -> dict[str, float]:
    """What ``source`` says of its stamps; a source that cannot say leaves its channels as
    declared. Units: s."""
    try:
        reported = source.stamp_half_widths_s()
    except Exception:
        return {}
    return {str(k): float(v) for k, v in reported.items() if isinstance(v, (int, float)) and v > 0}
