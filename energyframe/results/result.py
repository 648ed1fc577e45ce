"""The result of a run: metadata, per-window energy, raw samples, per-phase summaries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.windows import PhaseSummary
from ..errors import StoreError
from ..model import DerivedTable
from . import store
from .display import render, summary_table

COMPLETE = "complete"
INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class RunResult:
    """Everything a run produced. ``meta`` is the content of run.json.

    Args:
        meta: status, reason, versions, plugins and their options, clock, warnings.
        windows: one row per window and channel (the columns of windows.csv).
        samples: every raw sample (the columns of samples.parquet), Unix seconds.
        summaries: per phase and channel, median and spread over trials.
    """

    meta: Mapping[str, Any]
    windows: pd.DataFrame
    samples: pd.DataFrame
    summaries: tuple[PhaseSummary, ...] = field(default_factory=tuple)

    @property
    def status(self) -> str:
        return self.meta.get("status", INCOMPLETE)

    @property
    def reason(self) -> str | None:
        return self.meta.get("reason")

    @property
    def complete(self) -> bool:
        return self.status == COMPLETE

    @property
    def warnings(self) -> list[str]:
        return list(self.meta.get("warnings", []))

    @property
    def derived(self) -> list[DerivedTable]:
        """The workload's derived tables (pipeline totals, predictions), if any."""
        return [DerivedTable.from_json(d) for d in self.meta.get("derived", [])]

    def derived_table(self, name: str) -> DerivedTable:
        for table in self.derived:
            if table.name == name:
                return table
        raise KeyError(f"no derived table {name!r}; have {[t.name for t in self.derived]}")

    def summary(self, phase: str, channel: str | None = None) -> PhaseSummary:
        """The summary of ``phase`` on ``channel`` (the first primary channel by default)."""
        matches = [s for s in self.summaries if s.phase == phase]
        if channel is not None:
            matches = [s for s in matches if s.channel == channel]
        if not matches:
            known = sorted({f"{s.phase}/{s.channel}" for s in self.summaries})
            raise KeyError(f"no summary for phase {phase!r} channel {channel!r}; have {known}")
        return matches[0]

    def primary_summaries(self) -> list[PhaseSummary]:
        primary = set(self.meta.get("primary_channels", []))
        return [s for s in self.summaries if not s.channel or s.channel in primary]

    def table(self, width: int = 140, all_channels: bool = False) -> str:
        """The summary table as plain text: the same numbers ``energyframe run`` prints."""
        rows = list(self.summaries) if all_channels else self.primary_summaries()
        return render(summary_table(rows), width=width)

    def to_json(self) -> dict:
        meta = dict(self.meta)
        meta["phases"] = [s.to_json() for s in self.summaries]
        return meta

    def save(self, directory: Path | str) -> Path:
        """Write windows.csv, the derived tables, samples.parquet and run.json into ``directory``,
        each atomically, the smallest and most valuable first (a full disk keeps the windows),
        run.json last.

        Raises:
            StoreError: a file could not be written (naming it).
        """
        self.save_tables(directory)
        return self.save_meta(directory)

    def save_tables(self, directory: Path | str) -> Path:
        """Write everything but run.json (``save`` writes it after them)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        store.write_csv(directory / store.WINDOWS_CSV, self.windows)
        for table in self.derived:
            store.write_csv(
                directory / store.safe_file_name(f"{table.name}.csv"), pd.DataFrame(list(table.rows))
            )
        store.write_samples(directory / store.SAMPLES_PARQUET, self.samples)
        return directory

    def save_meta(self, directory: Path | str) -> Path:
        """Write run.json, which says the run directory is whole."""
        directory = Path(directory)
        store.write_json(directory / store.RUN_JSON, self.to_json())
        return directory

    @classmethod
    def load(cls, directory: Path | str) -> RunResult:
        """Read a run directory written by ``save`` or by a run that did not finish."""
        directory = Path(directory)
        meta = store.read_meta(directory)  # checks every field's type: a damaged file is a StoreError
        samples, origin = store.read_samples(directory)
        meta = dict(meta)
        meta["samples_origin"] = origin
        try:
            summaries = tuple(PhaseSummary.from_json(p) for p in meta.pop("phases", []) or [])
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(
                f"{directory / store.RUN_JSON}: a phase summary cannot be read ({type(e).__name__}: {e}); "
                "the file is damaged"
            ) from e
        return cls(meta, store.read_windows(directory), samples, summaries)
