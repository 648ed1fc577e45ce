"""The result of a run: metadata, per-window energy, raw samples, per-phase summaries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.summary import PhaseSummary
from ..model import DerivedTable
from . import store
from .display import render, summary_table
from .load import read_run
from .meta import COMPLETE, FORMAT_VERSION, INCOMPLETE, RunMeta

#: what a loader adds to ``meta`` about where the run's files came from; never written to run.json
LOADED_KEYS = ("samples_origin", "windows_origin")


@dataclass(frozen=True)
class RunResult:
    """Everything a run produced. ``run_meta`` is run.json, typed; ``meta`` the same as a
    mapping (for plugins, and for code written before ``RunMeta``).

    Args:
        meta: status, reason, versions, plugins and their options, clock, warnings (run.json's
            keys, without ``phases``: those are ``summaries``).
        windows: one row per window and channel (the columns of windows.csv).
        samples: every raw sample (the columns of samples.parquet), Unix seconds.
        summaries: per phase and channel, median and spread over trials.
    """

    meta: Mapping[str, Any]
    windows: pd.DataFrame
    samples: pd.DataFrame
    summaries: tuple[PhaseSummary, ...] = field(default_factory=tuple)

    @cached_property
    def run_meta(self) -> RunMeta:
        """run.json, typed (``meta`` and ``summaries`` as one ``RunMeta``).

        Raises:
            MetaError: a field of ``meta`` is not of the type run.json keeps it as.
        """
        data = {k: v for k, v in self.meta.items() if k not in LOADED_KEYS}
        data.setdefault("format_version", FORMAT_VERSION)
        data["phases"] = [s.to_json() for s in self.summaries]
        return RunMeta.from_json(store.json_safe(data))

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
    def samples_origin(self) -> str:
        """The file the samples were read from (``samples.partial.csv`` for a run that did not
        finish); empty for a result that was not loaded."""
        return str(self.meta.get("samples_origin") or "")

    @property
    def windows_origin(self) -> str:
        """``windows.partial.csv`` when the windows were rebuilt from a dead run's journal."""
        return str(self.meta.get("windows_origin") or "")

    @property
    def derived(self) -> list[DerivedTable]:
        """The workload's derived tables (pipeline totals, predictions), if any."""
        return list(self.run_meta.derived)

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
        primary = set(self.run_meta.primary_channels)
        return [s for s in self.summaries if not s.channel or s.channel in primary]

    def table(self, width: int = 140, all_channels: bool = False) -> str:
        """The summary table as plain text: the same numbers ``energyframe run`` prints."""
        rows = list(self.summaries) if all_channels else self.primary_summaries()
        return render(summary_table(rows), width=width)

    def to_json(self) -> dict:
        """run.json's content, in the current format."""
        return self.run_meta.to_json()

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
        """A run directory as ``energyframe show`` sees it: a complete run, an incomplete one, one
        that died (its windows rebuilt from its journal) or whose save was interrupted. The same
        as ``ef.load_run``: the one loader (``results/load.py``).

        Raises:
            StoreError: the directory is not a readable run (one line naming the file).
        """
        return cls(*read_run(directory))


def load_run(directory: Path | str) -> RunResult:
    """A run directory as every command sees it (``ef.load_run``; ``RunResult.load``)."""
    return RunResult.load(directory)
