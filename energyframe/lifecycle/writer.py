"""``RunWriter``: the one writer of a run directory.

A run directory is written three ways, each once: the claim (``run.json`` created with
``O_EXCL``, saying the run is running), the journals while the run goes (``windows.partial.csv``,
``sources.partial.json``; the samples' journal ``samples.partial.csv`` is the sample store's),
and the result at the end: the tables, the workload's files, then ``run.json`` last, so that a
``run.json`` saying ``complete`` means every other file is there. Only a run that ends without
a result (it could not start, or could not be saved) rewrites ``run.json``'s status in place.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..core.samples import PARTIAL_NAME
from ..results.result import RunResult
from ..results.store import (
    RUN_JSON,
    SOURCES_PARTIAL,
    WINDOWS_PARTIAL,
    WindowJournal,
    claim_run_dir,
    write_json,
    write_status_json,
)
from .assemble import save_files

Warn = Callable[[str], None]


class RunWriter:
    """Writes one run directory, ``out``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.journal: WindowJournal | None = None
        self._created = False

    def claim(self, meta: Mapping[str, Any]) -> None:
        """Make ``out`` this run's: run.json, created with O_EXCL, holds ``meta`` ("running")."""
        created = not self.out.exists()
        claim_run_dir(self.out, meta)
        self._created = created

    def release(self) -> None:
        """The sources failed to start, so nothing was measured: take back the claim, leaving
        no run directory of nothing (the directory itself only if the claim made it)."""
        if self.journal is not None:
            self.journal.close()
        for name in (RUN_JSON, WINDOWS_PARTIAL, SOURCES_PARTIAL, PARTIAL_NAME):
            (self.out / name).unlink(missing_ok=True)
        raw = self.out / "raw"
        if raw.is_dir():
            shutil.rmtree(raw, ignore_errors=True)
        if self._created:
            try:
                self.out.rmdir()
            except OSError:  # something else was put there meanwhile: leave it
                pass

    def open_journals(self, sources: list) -> None:
        """The sources started: journal them, and open the windows' journal."""
        self.journal = WindowJournal(self.out / WINDOWS_PARTIAL)
        write_json(self.out / SOURCES_PARTIAL, {"sources": sources})

    def window_closed(
        self, phase: str, trial: int, start_unix: float, end_unix: float, iterations: int, synced: bool = False
    ) -> None:
        if self.journal is not None:
            self.journal.closed(phase, trial, start_unix, end_unix, iterations, synced)

    def window_interrupted(self, phase: str, trial: int) -> None:
        if self.journal is not None:
            self.journal.interrupted(phase, trial)

    def window_discarded(self, phase: str, trial: int) -> None:
        if self.journal is not None:
            self.journal.discarded(phase, trial)

    def save(
        self,
        result: RunResult,
        files: Mapping[str, Mapping[str, bytes]],
        final: Callable[[RunResult], RunResult],
        warn: Warn,
    ) -> RunResult:
        """Write the tables, ``files`` (folder -> name -> bytes; ``""`` is the run directory
        itself), then ``final(result)``'s run.json, last. Returns that final result.

        Raises:
            StoreError: a file could not be written; run.json then says why, and the journals
                stay (what was recorded is still on disk).
        """
        result.save_tables(self.out)
        for folder, named in files.items():
            label = "the workload" if not folder else f"rank {folder.removeprefix('rank')}'s workload"
            save_files(self.out / folder if folder else self.out, named, warn, label=label)
        result = final(result)
        result.save_meta(self.out)
        return result

    def failed(self, meta: Mapping[str, Any]) -> None:
        """The run ended without its result: run.json says why (rewritten in place if it must)."""
        if self.journal is not None:
            self.journal.close()
        if (self.out / RUN_JSON).exists():
            write_status_json(self.out / RUN_JSON, dict(meta))

    def done(self) -> None:
        """The result is saved: drop the journals."""
        if self.journal is not None:
            self.journal.remove()
        (self.out / SOURCES_PARTIAL).unlink(missing_ok=True)
