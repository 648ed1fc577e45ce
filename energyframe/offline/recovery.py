"""Reading a run back, including one that died: its windows rebuilt from what is on disk.

A run killed hard (SIGKILL, a second Ctrl-C, a full disk) leaves ``run.json`` saying it is
running, its samples in ``samples.partial.csv`` and every window that had closed in
``windows.partial.csv``. ``load_run`` turns that back into a result: the windows are integrated
from the samples exactly as a live run would have (the same pipeline, ``assemble``), and the
status says what happened.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.clock import ClockModel
from ..core.samples import NOT_FINITE, SampleSeries, invalid_reason
from ..core.windows import WindowRecord, summarize
from ..errors import StoreError
from ..lifecycle.assemble import INTERRUPTED, Recording, flag_windows, integrate, place_samples
from ..model import Channel
from ..results.result import INCOMPLETE, RunResult
from ..results.store import JOURNAL_COLUMNS, SOURCES_PARTIAL, WINDOWS_PARTIAL


def load_run(directory: Path | str) -> RunResult:
    """A run directory as a result; a run that did not finish is rebuilt from its journals.

    Raises:
        StoreError: the directory is not a readable run.
    """
    directory = Path(directory)
    result = RunResult.load(directory)
    meta = dict(result.meta)
    reason = str(meta.get("reason") or "")
    pid = _running_pid(reason)
    if pid is not None and not _alive(pid):
        meta["reason"] = (
            f"the run's process (pid {pid}) died before the run finished; what it had recorded is shown"
        )
    journal = directory / WINDOWS_PARTIAL
    if result.windows.empty and journal.exists():
        return _rebuilt(directory, result, meta, journal)
    return RunResult(meta, result.windows, result.samples, result.summaries)


def _running_pid(reason: str) -> int | None:
    if not reason.startswith("running (pid "):
        return None
    digits = reason[len("running (pid ") :].split(")", 1)[0]
    return int(digits) if digits.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def journal_records(path: Path, clock: ClockModel) -> list[WindowRecord]:
    """The windows a run had closed, in order, without those it discarded (measured again)."""
    try:
        frame = pd.read_csv(path, dtype={"phase": str, "event": str}, on_bad_lines="skip")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as e:
        raise StoreError(f"{path} cannot be read ({e}); the windows of this run are lost") from e
    missing = set(JOURNAL_COLUMNS) - set(frame.columns)
    if missing:
        raise StoreError(f"{path} lacks column(s) {sorted(missing)}; it is not a window journal")
    records: list[WindowRecord] = []
    for row in frame.itertuples(index=False):
        if row.event == "interrupted":  # a flag on the window before it (journal_interrupted)
            continue
        if row.event == "discarded":
            for i in range(len(records) - 1, -1, -1):
                if records[i].phase == row.phase and records[i].trial == int(row.trial):
                    del records[i]
                    break
            continue
        try:  # a process killed mid-line leaves a short last row
            start = clock.to_monotonic_from_unix(float(row.start_s))
            end = clock.to_monotonic_from_unix(float(row.end_s))
            records.append(WindowRecord(str(row.phase), int(row.trial), start, end, int(row.iterations)))
        except (TypeError, ValueError):
            continue
    return records


def _sources(directory: Path, meta: dict) -> list:
    """The sources and their channels: run.json's once the run saved them, else the journal's
    (run.json is written at the claim, before the sources start, and once at the end)."""
    described = [s for s in meta.get("sources", []) or [] if s.get("channels")]
    if described or not (directory / SOURCES_PARTIAL).exists():
        return meta.get("sources", []) or []
    try:
        journal = json.loads((directory / SOURCES_PARTIAL).read_text())
    except (OSError, ValueError) as e:
        raise StoreError(f"{directory / SOURCES_PARTIAL} cannot be read ({e}); the run cannot be rebuilt") from e
    sources = journal.get("sources") if isinstance(journal, dict) else None
    if not isinstance(sources, list):
        raise StoreError(f"{directory / SOURCES_PARTIAL} holds no list of sources; the run cannot be rebuilt")
    meta["sources"] = sources
    return sources


def journal_interrupted(path: Path) -> frozenset[tuple[str, int]]:
    """The windows the journal says an interruption closed: (phase, trial)."""
    try:
        frame = pd.read_csv(path, dtype={"phase": str, "event": str}, on_bad_lines="skip")
        rows = frame[frame["event"] == "interrupted"]
        return frozenset((str(p), int(t)) for p, t in zip(rows["phase"], rows["trial"]))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError, KeyError, ValueError):
        return frozenset()


def _rebuilt(directory: Path, result: RunResult, meta: dict, journal: Path) -> RunResult:
    clock = ClockModel.from_json(meta["clock"]) if isinstance(meta.get("clock"), dict) else None
    if clock is None:
        raise StoreError(f"{directory}/run.json has no clock anchors; its windows cannot be rebuilt")
    channels: dict[str, Channel] = {}
    channel_source: dict[str, str] = {}
    for source in _sources(directory, meta):
        for c in source.get("channels", []) or []:
            channel = Channel.from_json(c)
            channels[channel.name] = channel
            channel_source[channel.name] = str(source.get("name"))
    series, rejected, counts = _series(result.samples, channels, clock)
    records = journal_records(journal, clock)
    recording = Recording(
        clock=clock,
        channels=channels,
        channel_source=channel_source,
        series=series,
        samples=result.samples,
        rejected=rejected,
        rejected_counts=counts,
        records=records,
    )
    warnings: list[str] = list(meta.get("warnings", []))
    placement = place_samples(recording, "auto", warnings.append)
    windows, _idle = integrate(recording, placement, None)
    windows = flag_windows(windows, journal_interrupted(journal), INTERRUPTED)
    meta.update(
        status=INCOMPLETE,
        windows_origin=WINDOWS_PARTIAL,
        warnings=[*warnings, "the windows were rebuilt from the journal of a run that did not finish"],
    )
    return RunResult(meta, windows, result.samples, tuple(summarize(windows, recording.work)))


def _series(samples: pd.DataFrame, channels: dict[str, Channel], clock: ClockModel):
    series: dict[str, SampleSeries] = {}
    rejected: dict[str, dict[str, np.ndarray]] = {}
    counts: dict[str, dict[str, int]] = {}
    for name, channel in channels.items():
        rows = samples[samples["channel"] == name] if not samples.empty else samples
        t = pd.to_numeric(rows.get("time_s", pd.Series(dtype=float)), errors="coerce").to_numpy(float)
        v = pd.to_numeric(rows.get("value", pd.Series(dtype=float)), errors="coerce").to_numpy(float)
        t = clock.to_monotonic_from_unix(t)
        reasons = np.array([invalid_reason(channel, float(x)) or "" for x in v], dtype=object)
        bad = (reasons != "") | ~np.isfinite(t)
        for reason in set(reasons[bad]):
            key = reason or NOT_FINITE
            times = t[bad & (reasons == reason) & np.isfinite(t)]
            rejected.setdefault(name, {})[key] = np.sort(times)
            counts.setdefault(name, {})[key] = int((bad & (reasons == reason)).sum())
        order = np.argsort(t[~bad], kind="stable")
        series[name] = SampleSeries(t[~bad][order], v[~bad][order])
    return series, rejected, counts
