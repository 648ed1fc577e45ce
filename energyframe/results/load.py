"""The one way to read a run directory: ``read_run``, behind ``RunResult.load`` and
``ef.load_run``.

Every command that reads a run (``show``, ``compare``, ``report``, ``plot``, ``analyze --run``)
goes through it, so each sees the same run:

- a complete run: run.json, windows.csv, samples.parquet as saved;
- a run whose save was interrupted (a full disk, a Ctrl-C or SIGTERM while saving): the windows
  in windows.csv, the samples in ``samples.partial.csv`` when samples.parquet was not written,
  and, when run.json has no phase summaries, the summaries computed again from the windows;
- a run that died (SIGKILL, a second Ctrl-C, power loss): ``run.json`` still says it is running,
  its samples are in ``samples.partial.csv`` and every window that had closed in
  ``windows.partial.csv``. The windows are integrated from the samples exactly as a live run
  would have (the same pipeline, ``core.pipeline``), and the reason says what happened.

It returns the parts of a ``RunResult`` (``RunParts``), which ``RunResult.load`` assembles: the
result's module does not import this one back.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..core.clock import ClockModel
from ..core.pipeline import Recording, add_fused_power, flag_windows, integrate, place_samples
from ..core.samples import SampleSeries, accept
from ..core.summary import summarize
from ..core.vocabulary import INTERRUPTED
from ..core.windows import WindowRecord
from ..errors import StoreError
from ..model import Channel, primary_channel_names
from . import store
from .meta import INCOMPLETE, MetaError, RunMeta, SourceRecord
from .store import JOURNAL_COLUMNS, JOURNAL_SYNCED, SOURCES_PARTIAL, WINDOWS_PARTIAL

REBUILT = "the windows were rebuilt from the journal of a run that did not finish"
RESUMMARIZED = (
    "run.json has no phase summaries (its save did not finish): they were computed from windows.csv"
)


class RunParts(NamedTuple):
    """What a ``RunResult`` is made of: run.json's fields (without its phases), the windows, the
    samples, and the phase summaries."""

    meta: dict[str, Any]
    windows: pd.DataFrame
    samples: pd.DataFrame
    summaries: tuple


def read_run(directory: Path | str) -> RunParts:
    """A run directory's parts, whatever state the run was left in (see the module).

    Raises:
        StoreError: the directory is not a readable run (one line naming the file and the cause).
    """
    directory = Path(directory)
    meta = _with_true_reason(_with_sources(directory, store.read_run_meta(directory)))
    samples, samples_origin = store.read_samples(directory)
    windows = store.read_windows(directory)
    journal = directory / WINDOWS_PARTIAL
    windows_origin = ""
    if windows.empty and journal.exists():
        meta, windows = _rebuilt(directory, meta, samples, journal)
        windows_origin = WINDOWS_PARTIAL
    elif not meta.phases and not windows.empty:
        meta = meta.with_(phases=tuple(summarize(windows)), warnings=(*meta.warnings, RESUMMARIZED))
    elif not windows.empty:
        meta = _summaries_of_the_windows(meta, windows)
    raw = meta.to_json()
    raw.pop("phases")
    raw["samples_origin"] = samples_origin
    if windows_origin:
        raw["windows_origin"] = windows_origin
    return RunParts(raw, windows, samples, meta.phases)


#: how close a saved summary's figure must be to the one its windows give (windows.csv keeps
#: every float exactly: any real difference is an edited or mismatched file)
_AGREE_REL = 1e-9


def _summaries_of_the_windows(meta: RunMeta, windows: pd.DataFrame) -> RunMeta:
    """run.json's phase summaries, checked against the windows of windows.csv they were computed
    from: a summary that disagrees (a run.json edited, or copied beside another run's windows)
    is replaced by the one the windows give, and a warning names it and both figures."""
    computed = {(s.phase, s.channel): s for s in summarize(windows, {s.phase: s.work for s in meta.phases})}
    phases, differences = [], []
    for saved in meta.phases:
        fresh = computed.get((saved.phase, saved.channel))
        difference = _difference(saved, fresh) if fresh is not None else None
        phases.append(fresh if fresh is not None and difference else saved)
        if difference:
            differences.append(f"{saved.phase}{f' [{saved.channel}]' if saved.channel else ''}: {difference}")
    if not differences:
        return meta
    return meta.with_(phases=tuple(phases), warnings=(*meta.warnings, _disagreement(differences)))


def _disagreement(differences: list[str]) -> str:
    """The warning for summaries that disagree with their windows: the first three named, and
    how many more."""
    more = f"; and {len(differences) - 3} more" if len(differences) > 3 else ""
    return (
        f"run.json's phase summaries disagree with windows.csv ({'; '.join(differences[:3])}{more}): "
        "the figures shown are computed from windows.csv"
    )


def _difference(saved, fresh) -> str:
    """What differs between a saved summary and the one its windows give (``""``: nothing)."""
    figures = (
        ("trials", saved.trials, fresh.trials, ""),
        ("time/iter", saved.time_per_iter_s.median, fresh.time_per_iter_s.median, "s"),
        ("energy/iter", saved.energy_per_iter_j.median, fresh.energy_per_iter_j.median, "J"),
        ("power", saved.mean_power_w.median, fresh.mean_power_w.median, "W"),
    )
    for name, a, b, unit in figures:
        if not _same(float(a), float(b)):
            return f"{name} {a:.4g}{f' {unit}' if unit else ''} in run.json, {b:.4g}{f' {unit}' if unit else ''} from its windows"
    return ""


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=_AGREE_REL, abs_tol=1e-15)


def _with_true_reason(meta: RunMeta) -> RunMeta:
    """A run.json that still says "running" whose process is gone: say that it died."""
    pid = meta.running_pid
    if pid is None or _alive(pid):
        return meta
    return meta.with_(
        status=INCOMPLETE,
        reason=f"the run's process (pid {pid}) died before the run finished; what it had recorded is shown",
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A killed process its parent has not reaped yet: dead, though ``kill(pid, 0)`` finds it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS), or gone meanwhile
        return False
    # the state follows the command's name, which is in parentheses and may hold any character
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "Z"


# -- the window journal -------------------------------------------------------------------------
def journal_records(
    path: Path, clock: ClockModel, warn: Callable[[str], None] | None = None
) -> list[WindowRecord]:
    """The windows a run had closed, in order, without those it discarded (measured again).

    Every whole row is kept: a row torn by a crash (the last, without its line end) is left out,
    and so is a row that cannot be a window (times not finite, an end before its start, text
    where a number belongs), said through ``warn``.

    Raises:
        StoreError: the file cannot be read at all, or is not a window journal.
    """
    rows = _journal_rows(path, warn or (lambda message: None))
    records: list[WindowRecord] = []
    for row in rows:
        if row["event"] == "interrupted":  # a flag on the window before it (journal_interrupted)
            continue
        if row["event"] == "discarded":
            for i in range(len(records) - 1, -1, -1):
                if records[i].phase == row["phase"] and records[i].trial == row["trial"]:
                    del records[i]
                    break
            continue
        start = float(clock.to_monotonic_from_unix(row["start_s"]))
        end = float(clock.to_monotonic_from_unix(row["end_s"]))
        records.append(WindowRecord(row["phase"], row["trial"], start, end, row["iterations"], row["synced"]))
    return records


def _journal_rows(path: Path, warn: Callable[[str], None]) -> list[dict]:
    """Every whole row of the journal as typed values; a row that cannot be a window is left
    out, said through ``warn``.

    Raises:
        StoreError: the file cannot be read, is empty, or is not a window journal.
    """
    lines = _whole_lines(path)
    header = _fields(lines[0])
    if header is None or any(c not in header for c in JOURNAL_COLUMNS):
        raise StoreError(f"{path} lacks column(s) {JOURNAL_COLUMNS}; it is not a window journal")
    out = []
    for number, line in enumerate(lines[1:], start=2):
        fields = _fields(line)
        row = _journal_row(dict(zip(header, fields))) if fields and len(fields) == len(header) else None
        if isinstance(row, dict):
            out.append(row)
        else:
            warn(f"{path.name} row {number} was left out: {row or 'it is not a whole row of the journal'}")
    return out


def _whole_lines(path: Path) -> list[bytes]:
    """The journal's lines, with their line ends, but for a last one torn by a crash.

    Raises:
        StoreError: the file cannot be read, or holds no whole line.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}; the windows of this run are lost") from e
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines.pop()  # the process died while writing this row: it is not whole
    if not lines:
        raise StoreError(f"{path} is empty; the windows of this run are lost")
    return lines


def journal_interrupted(path: Path) -> frozenset[tuple[str, int]]:
    """The windows the journal says an interruption closed: (phase, trial)."""
    try:
        rows = _journal_rows(path, lambda message: None)
    except StoreError:
        return frozenset()
    return frozenset((row["phase"], row["trial"]) for row in rows if row["event"] == "interrupted")


def _fields(line: bytes) -> list[str] | None:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\0" in text:
        return None
    try:
        return next(csv.reader(io.StringIO(text)), None)
    except csv.Error:
        return None


def _journal_row(row: dict[str, str]) -> dict | str:
    """The row as typed values, or why it cannot be a window."""
    if row["event"] in ("discarded", "interrupted"):
        trial = _whole(row["trial"])
        return {"event": row["event"], "phase": row["phase"], "trial": trial} if trial is not None else "no trial"
    if row["event"] != "closed":
        return f"event {row['event']!r} is not closed, discarded or interrupted"
    trial, iterations = _whole(row["trial"]), _whole(row["iterations"])
    start, end = _finite(row["start_s"]), _finite(row["end_s"])
    if trial is None or iterations is None or iterations < 1:
        return f"trial {row['trial']!r} and iterations {row['iterations']!r} should be whole numbers"
    if start is None or end is None:
        return f"start_s {row['start_s']!r} and end_s {row['end_s']!r} should be finite times"
    if end < start:
        return f"its window ends (end_s {row['end_s']}) before it starts (start_s {row['start_s']})"
    return {"event": "closed", "phase": row["phase"], "trial": trial, "start_s": start, "end_s": end,
            "iterations": iterations, "synced": row.get(JOURNAL_SYNCED) == "1"}  # fmt: skip


def _whole(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# -- rebuilding a dead run's windows ------------------------------------------------------------
def _rebuilt(
    directory: Path, meta: RunMeta, samples: pd.DataFrame, journal: Path
) -> tuple[RunMeta, pd.DataFrame]:
    clock = meta.clock.model() if meta.clock is not None else None
    if clock is None:
        raise StoreError(f"{directory / store.RUN_JSON} has no clock anchors; its windows cannot be rebuilt")
    channels = meta.channels
    series, rejected, counts = _series(samples, channels, clock)
    warnings: list[str] = list(meta.warnings)
    records = journal_records(journal, clock, warnings.append)
    recording = Recording(
        clock=clock,
        channels=channels,
        channel_source=meta.channel_sources,
        series=series,
        samples=samples,
        rejected=rejected,
        rejected_counts=counts,
        records=records,
    )
    placement = place_samples(recording, "auto", warnings.append)
    # the fused channel and each counter edge's estimator, as the live run computed them
    recording, placement, _ = add_fused_power(recording, placement, warnings.append)
    windows, _idle = integrate(recording, placement, None)
    windows = flag_windows(windows, journal_interrupted(journal), INTERRUPTED)
    meta = replace(
        meta,
        status=INCOMPLETE,
        phases=tuple(summarize(windows, recording.work)),
        warnings=(*warnings, REBUILT),
    )
    return meta, windows


def _with_sources(directory: Path, meta: RunMeta) -> RunMeta:
    """The sources, their channels and the primary ones: run.json's once the run saved them,
    else the journal's (run.json is written at the claim, before the sources start, and once at
    the end: a run killed while measuring or while saving has only the claim's run.json)."""
    path = directory / SOURCES_PARTIAL
    if any(s.channels for s in meta.sources) or not path.exists():
        return _with_primary(meta)
    try:
        journal = store.read_json(path)
    except StoreError as e:
        raise StoreError(f"{e}; the run cannot be rebuilt") from e
    sources = journal.get("sources") if isinstance(journal, dict) else None
    if not isinstance(sources, list):
        raise StoreError(f"{path} holds no list of sources; the run cannot be rebuilt")
    try:
        records = tuple(SourceRecord.from_json(s, f"sources[{i}]") for i, s in enumerate(sources))
    except MetaError as e:
        raise StoreError(f"{path}: {e}; the run cannot be rebuilt") from e
    return _with_primary(meta.with_(sources=records))


def _with_primary(meta: RunMeta) -> RunMeta:
    """run.json's primary channels, or, where the run never wrote them, its channels' own word."""
    if meta.primary_channels:
        return meta
    return meta.with_(primary_channels=tuple(primary_channel_names(meta.channels.values())))


def _series(samples: pd.DataFrame, channels: dict[str, Channel], clock: ClockModel):
    """Each channel's journaled readings through the rule a live run applies (``samples.accept``:
    non-physical readings kept out, readings of one instant merged and counted)."""
    series: dict[str, SampleSeries] = {}
    rejected: dict[str, dict[str, np.ndarray]] = {}
    counts: dict[str, dict[str, int]] = {}
    for name, channel in channels.items():
        rows = samples[samples["channel"] == name] if not samples.empty else samples
        t = pd.to_numeric(rows.get("time_s", pd.Series(dtype=float)), errors="coerce").to_numpy(float)
        v = pd.to_numeric(rows.get("value", pd.Series(dtype=float)), errors="coerce").to_numpy(float)
        order = np.argsort(t, kind="stable")
        kept, left_out = accept(channel, clock.to_monotonic_from_unix(t[order]), v[order])
        series[name] = kept
        if left_out.counts:
            counts[name] = dict(left_out.counts)
            rejected[name] = {reason: np.sort(np.asarray(times)) for reason, times in left_out.times_s.items()}
    return series, rejected, counts
