"""What a run says about itself and where it is written.

``RunOutput`` holds run.json's fields as the run learns them (the caller's metadata, notes,
warnings, where the time went) and the ``RunWriter`` of the run directory, if the run has one:
the claim at the start, each window's journal line as it closes, the result at the end, or why
there is none. A run of several ranks reaches its measurement through this object only
(``ranked.RankHost``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.windows import WindowRecord
from ..errors import StoreError
from ..plugin import Workload
from ..results.provenance import source_record
from ..results.result import INCOMPLETE, RunResult
from .acquisition import Acquisition
from .assemble import extra_files, run_meta, utc_now
from .timings import Timings
from .writer import RunWriter

log = logging.getLogger("energyframe")

#: run.json's reason while the run is going; ``energyframe show`` recognises it
RUNNING = "running (pid {pid}); if this stays, the process died"


class RunOutput:
    """run.json's fields and the run directory's writer, for one run.

    Args:
        acquisition: the run's sources and clock (run.json describes them).
        meta: extra run.json fields (workload, config, reporters).
        notes: what resolving the power sources found.
        shows_warnings: whether this process logs a warning as it comes (rank 0 only).
    """

    def __init__(
        self,
        acquisition: Acquisition,
        meta: Mapping[str, Any] | None,
        notes: Sequence[str],
        shows_warnings: Callable[[], bool],
    ) -> None:
        self.acquisition = acquisition
        self.meta: dict[str, Any] = dict(meta or {})
        self.notes = list(notes)
        self.warnings: list[str] = []
        #: where the run's time goes (run.json's ``timings_s``)
        self.timings = Timings()
        self.writer: RunWriter | None = None
        self._shows_warnings = shows_warnings
        self._started_at: str | None = None

    # -- what the run says -----------------------------------------------------------------
    def warn(self, message: str) -> None:
        """Record a problem that does not stop the run (shown now where this process shows
        warnings, and kept in run.json)."""
        if message not in self.warnings:
            self.warnings.append(message)
            if self._shows_warnings():
                log.warning("warning: %s", message)

    def note_start(self) -> None:
        """The run starts now (run.json's ``started_at``)."""
        self._started_at = utc_now()

    @contextmanager
    def span(self, what: str) -> Iterator[None]:
        """Count the time inside the block towards ``what`` in run.json's ``timings_s``."""
        with self.timings.span(what):
            yield

    def add_time(self, what: str, seconds: float) -> None:
        self.timings.add(what, seconds)

    def describe(self, **fields: Any) -> None:
        """Set run.json fields the run knows only now (the workload, its exit code...)."""
        self.meta.update(fields)

    def describe_config(self, **fields: Any) -> None:
        """Add to run.json's ``config`` what the run decided (the shortest window used...)."""
        self.meta.setdefault("config", {}).update(fields)

    def run_meta(self, status: str, reason: str | None, ended: bool = False) -> dict[str, Any]:
        """run.json as far as the run knows it, with this status and reason."""
        assert self.acquisition.clock is not None
        return run_meta(
            status=status,
            reason=reason,
            started_at=self._started_at,
            ended=ended,
            clock=self.acquisition.clock,
            sources=self.acquisition.sources,
            source_channels=self.acquisition.source_channels(),
            extra=self.meta,
            notes=self.notes,
            warnings=self.warnings,
        )

    def running_meta(self) -> dict[str, Any]:
        """run.json while the run goes: ``incomplete``, "running (pid N)"."""
        return self.run_meta(INCOMPLETE, RUNNING.format(pid=os.getpid()))

    def with_timings(self, result: RunResult) -> RunResult:
        return replace(result, meta={**result.meta, "timings_s": self.timings.to_json()})

    # -- the run directory -----------------------------------------------------------------
    def claim(self, out: Path) -> None:
        """Make ``out`` this run's: run.json, created with O_EXCL, says "running"."""
        self.writer = RunWriter(out)
        self.writer.claim(self.running_meta())

    def open_journals(self) -> None:
        """The sources started: journal them, and open the windows' journal."""
        if self.writer is not None:  # the journal: enough to rebuild the run if this process dies
            acquisition = self.acquisition
            channels = acquisition.source_channels()
            self.writer.open_journals([source_record(s, channels.get(s.name, ())) for s in acquisition.sources])

    def window_closed(self, record: WindowRecord) -> None:
        clock = self.acquisition.clock
        if self.writer is not None and clock is not None:
            self.writer.window_closed(
                record.phase,
                record.trial,
                clock.to_unix(record.start_s),
                clock.to_unix(record.end_s),
                record.iterations,
                record.synced,
            )

    def window_interrupted(self, record: WindowRecord) -> None:
        if self.writer is not None:
            self.writer.window_interrupted(record.phase, record.trial)

    def window_discarded(self, record: WindowRecord) -> None:
        if self.writer is not None:
            self.writer.window_discarded(record.phase, record.trial)

    def release(self) -> None:
        """Nothing was measured: take the claim back."""
        if self.writer is not None:
            self.writer.release()

    def failed(self, reason: str) -> None:
        """The run ended without its result: run.json says why."""
        if self.writer is not None:
            self.writer.failed(self.run_meta(INCOMPLETE, reason, ended=True))

    def save(
        self,
        result: RunResult,
        files: Mapping[str, Mapping[str, bytes]] | None = None,
        workload: Workload | None = None,
    ) -> RunResult:
        """Save the run through its writer (in memory only without a run directory): the tables,
        ``files`` (folder -> name -> bytes: rank 0's merged run has each rank's), ``workload``'s
        own files, run.json last. Returns the result with its final timings."""
        if self.writer is None:
            return self.with_timings(result)
        named = dict(files or {})
        if workload is not None:
            named[""] = extra_files(result, workload, self.warn)
        started = time.monotonic()

        def final(tables_saved: RunResult) -> RunResult:
            # run.json is written once, last: it carries the time the save took up to it
            self.timings.add("save", time.monotonic() - started)
            return self.with_timings(tables_saved)

        try:
            saved = self.writer.save(result, named, final, self.warn)
        except (StoreError, KeyboardInterrupt) as e:  # a full disk, or Ctrl-C / SIGTERM while saving
            reason = f"{result.reason}; then " if result.reason else ""
            cause = f"the run could not be saved: {e}" if isinstance(e, StoreError) else "interrupted while saving"
            self.failed(f"{reason}{cause}")
            raise
        self.acquisition.discard_journal()
        self.writer.done()
        return saved
