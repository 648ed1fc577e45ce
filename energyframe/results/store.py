"""The run directory: ``run.json``, ``windows.csv``, ``samples.parquet`` (docs/result-format.md).

Every file is written to a temporary name and renamed into place, so a reader never sees half a
file, with the permissions the user's umask gives (a colleague on a shared cluster can read
it). A run that is still going (or died) has a ``run.json`` with status ``incomplete``, its
samples in ``samples.partial.csv`` and its finished windows in ``windows.partial.csv``, both
flushed as they come, which the readers fall back to.
"""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import pandas as pd

from ..core.samples import PARTIAL_NAME, SAMPLE_COLUMNS
from ..core.windows import WINDOW_COLUMNS
from ..errors import StoreError

# History of the run-directory format:
#   1 - first version: run.json, windows.csv, samples.parquet (2026-11).
FORMAT_VERSION = 1

RUN_JSON = "run.json"
WINDOWS_CSV = "windows.csv"
SAMPLES_PARQUET = "samples.parquet"
WINDOWS_PARTIAL = "windows.partial.csv"
#: the journal's description of the started sources and their channels (written once, when
#: they start), so that a run whose process died can be rebuilt
SOURCES_PARTIAL = "sources.partial.json"
JOURNAL_COLUMNS = ["event", "phase", "trial", "start_s", "end_s", "iterations"]


def claim_run_dir(directory: Path, meta: Mapping[str, Any] | None = None) -> None:
    """Make ``directory`` this run's, atomically: of two runs started into one directory at the
    same moment, exactly one gets it (``run.json`` is created with O_EXCL, holding ``meta``:
    what the run is and that it is running), the other is refused.

    Raises:
        UsageError: the directory already holds a run, or is not a directory.
        StoreError: it cannot be created or written.
    """
    from ..errors import UsageError

    if str(directory).strip() == "":
        raise UsageError("--out is empty; give a directory for the run")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--out {directory} is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / RUN_JSON, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    except FileExistsError as e:
        raise UsageError(f"{directory} already holds a run; choose another --out directory") from e
    except OSError as e:
        raise StoreError(_write_error(directory / RUN_JSON, e)) from e
    try:
        data = memoryview((json.dumps(json_safe(meta), indent=2, allow_nan=False) + "\n").encode() if meta else b"")
        while data:  # os.write may write less than it was given (a nearly full disk)
            data = data[os.write(fd, data) :]
    except OSError as e:
        raise StoreError(_write_error(directory / RUN_JSON, e)) from e
    finally:
        os.close(fd)


def _write_error(path: Path, error: OSError) -> str:
    if error.errno == errno.ENOSPC:
        return f"cannot write {path}: no space left on the device"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {path}: {error.strerror} (choose a writable --out)"
    return f"cannot write {path}: {error.strerror or error}"


_umask_lock = threading.Lock()


def _default_mode() -> int:
    """The mode a new file gets here: 0666 less the umask (read once per write; os.umask can
    only be read by setting it, hence the lock)."""
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


def safe_file_name(name: str) -> str:
    """A file name derived from data (a table's, a parameter's), reduced to one plain name: no
    directory parts, no leading dot, only letters, digits and ``-_.``; it can never leave the
    directory it is written into."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in base).lstrip(".")
    return safe or "unnamed"


def default_run_dir(workload: str, root: Path | str = "runs") -> Path:
    """``runs/<UTC time>-<workload>``; a suffix keeps two runs started in one second apart."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in workload) or "run"
    base = Path(root) / f"{stamp}-{safe}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file renamed into place; a failure leaves the old file intact.

    Raises:
        StoreError: the file cannot be written (disk full, no permission), naming it.
    """
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, _default_mode())  # mkstemp makes 0600 files; results are meant to be shared
        os.close(fd)
        write(Path(tmp))
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise StoreError(_write_error(path, e)) from e
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


class WindowJournal:
    """``windows.partial.csv``: every window as it closes, flushed, so a run that dies (a second
    Ctrl-C, SIGKILL, a full disk) keeps the windows it had finished."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = open(path, "w", newline="")  # noqa: SIM115 (closed by close())
        self._writer = csv.writer(self._file)
        self._row(JOURNAL_COLUMNS)

    def _row(self, row: list) -> None:
        if self._file is None:
            return
        try:
            self._writer.writerow(row)
            self._file.flush()
        except OSError as e:
            raise StoreError(_write_error(self.path, e)) from e

    def closed(self, phase: str, trial: int, start_s: float, end_s: float, iterations: int) -> None:
        """A window closed. Units: Unix s."""
        self._row(["closed", phase, trial, repr(start_s), repr(end_s), iterations])

    def interrupted(self, phase: str, trial: int) -> None:
        """The window just closed was closed by an interruption before its work ended."""
        self._row(["interrupted", phase, trial, "", "", ""])

    def discarded(self, phase: str, trial: int) -> None:
        """The last closed window of ``phase`` was discarded (measured again, longer)."""
        self._row(["discarded", phase, trial, "", "", ""])

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:  # a full disk: reported when the row could not be written
                pass
            self._file = None

    def remove(self) -> None:
        """The windows are safely in windows.csv: the journal is no longer needed."""
        self.close()
        self.path.unlink(missing_ok=True)


def json_safe(value: Any) -> Any:
    """NaN and infinities become null (JSON has neither); paths and tuples become plain types."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return json_safe(value.item())
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return str(value)


def write_bytes(path: Path, data: bytes) -> None:
    def write(p: Path) -> None:
        p.write_bytes(data)

    _atomic_write(path, write)


def write_json(path: Path, data: dict) -> None:
    text = json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"

    def write(p: Path) -> None:
        p.write_text(text)

    _atomic_write(path, write)


def write_status_json(path: Path, data: dict) -> None:
    """run.json, even on a full disk: when no temporary copy fits, the file is rewritten in place
    (its old blocks are freed first), so a run never keeps saying it is running.

    Raises:
        StoreError: it could not be written either way.
    """
    try:
        write_json(path, data)
    except StoreError:
        # the whole status, compact; if even that does not fit where the old file was, the
        # fields a reader needs to know what happened (the sources are in the journal)
        essential = {k: data[k] for k in _STATUS_FIELDS if k in data}
        essential["warnings"] = [*data.get("warnings", []), "run.json holds only its status: the disk was full"]
        for version in (data, essential):
            text = json.dumps(json_safe(version), separators=(",", ":"), allow_nan=False) + "\n"
            try:
                with open(path, "r+" if path.exists() else "w") as f:
                    f.truncate(0)
                    f.write(text)
                return
            except OSError:
                continue
        raise StoreError(_write_error(path, OSError(errno.ENOSPC, "no space left"))) from None


#: what run.json keeps when the disk has room for nothing more
_STATUS_FIELDS = ("format_version", "status", "reason", "started_at", "ended_at", "clock", "primary_channels")


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    # pandas writes floats with repr(): shortest text that reads back to the same double,
    # which keeps Unix timestamps exact to the microsecond and below
    _atomic_write(path, lambda p: frame.to_csv(p, index=False))


def write_samples(path: Path, samples: pd.DataFrame) -> None:
    _atomic_write(path, lambda p: samples.to_parquet(p, index=False))


def read_json(path: Path) -> Any:
    """The JSON in ``path``; a ``StoreError`` naming the file and the cause when it cannot be read.
    (Callers check what it holds: ``read_meta`` wants a run description.)"""
    path = Path(path)
    if path.parent.exists() and not path.parent.is_dir():
        raise StoreError(f"{path.parent} is a file, not a run directory")
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise StoreError(f"{path.parent} is not a run directory: it has no {path.name}") from e
    except IsADirectoryError as e:
        raise StoreError(f"{path} is a directory, not a JSON file") from e
    except UnicodeDecodeError as e:
        raise StoreError(f"{path} is not text (binary data at byte {e.start}): the file is damaged") from e
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise StoreError(f"{path} is not valid JSON ({e})") from e


def read_meta(directory: Path) -> dict:
    """run.json, checked: the format version, and every field energyframe reads of the type it writes."""
    path = Path(directory) / RUN_JSON
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise StoreError(
            f"{path} should hold a JSON object, but holds {_described(meta)}: the file is damaged"
        )
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise StoreError(
            f"{directory} has run format version {version!r}; this energyframe reads version "
            f"{FORMAT_VERSION}. Upgrade energyframe to read it."
        )
    problem = _meta_problem(meta)
    if problem:
        raise StoreError(f"{path}: {problem}; the file is damaged (energyframe writes it whole)")
    return meta


_NONE = type(None)
_NUMBER = (int, float)
#: run.json's fields and the JSON types energyframe writes them as
_META_TYPES: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "reason": (str, _NONE),
    "started_at": (str, _NONE),
    "ended_at": (str, _NONE),
    "command_line": (list,),
    "host": (dict,),
    "versions": (dict,),
    "clock": (dict,),
    "sources": (list,),
    "primary_channels": (list,),
    "workload": (dict,),
    "reporters": (list,),
    "config": (dict,),
    "idle_baseline": (dict,),
    "time_maps": (dict,),
    "alignment": (dict,),
    "exit_code": (int, _NONE),
    "phases": (list,),
    "notes": (list,),
    "warnings": (list,),
    "derived": (list,),
}
_QUANTITIES = ("energy", "power", "state")
_SPREADS = ("time_per_iter_s", "energy_per_iter_j", "mean_power_w", "dynamic_energy_per_iter_j")


def _described(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    kind = {str: "a string", bool: "a boolean"}.get(type(value), "a number")
    return f"{kind} ({json.dumps(value)[:40]})"


def _wrong(where: str, value: Any, expected: str) -> str:
    return f"{where} should be {expected}, not {_described(value)}"


def _meta_problem(meta: dict) -> str | None:  # noqa: C901 (validator: run.json's fields one after another, the first problem wins)
    """What in run.json is not of the type energyframe writes, or None."""
    for key, types in _META_TYPES.items():
        if key in meta and (
            not isinstance(meta[key], types) or isinstance(meta[key], bool) and bool not in types
        ):
            expected = " or ".join(
                {str: "a string", list: "a list", dict: "an object", int: "a whole number", _NONE: "null"}[t]
                for t in types
            )
            return _wrong(f"{key!r}", meta[key], expected)
    for i, source in enumerate(meta.get("sources", [])):
        if not isinstance(source, dict) or not isinstance(source.get("name"), str):
            return _wrong(f"sources[{i}]", source, "an object with a name")
        channels = source.get("channels", [])
        if not isinstance(channels, list):
            return _wrong(f"sources[{i}].channels", channels, "a list")
        for j, channel in enumerate(channels):
            where = f"sources[{i}].channels[{j}]"
            if not isinstance(channel, dict) or not isinstance(channel.get("name"), str):
                return _wrong(where, channel, "an object with a name")
            if channel.get("quantity") not in _QUANTITIES:
                return _wrong(f"{where}.quantity", channel.get("quantity"), "energy, power or state")
            if not isinstance(channel.get("resolution_s", 0.0), _NUMBER + (_NONE,)):
                return _wrong(f"{where}.resolution_s", channel.get("resolution_s"), "a number")
    for key in ("primary_channels", "notes", "warnings"):
        for i, item in enumerate(meta.get(key, [])):
            if not isinstance(item, str):
                return _wrong(f"{key}[{i}]", item, "a string")
    for key, value in meta.get("clock", {}).items():
        if not isinstance(value, _NUMBER + (_NONE,)) or isinstance(value, bool):
            return _wrong(f"clock.{key}", value, "a number")
    for name, time_map in meta.get("time_maps", {}).items():
        if not isinstance(time_map, dict) or not all(
            isinstance(time_map.get(k, 0.0), _NUMBER + (_NONE,)) for k in ("lag_s", "drift", "reference_s")
        ):
            return _wrong(f"time_maps[{name!r}]", time_map, "an object of lag_s, drift and reference_s")
    for i, phase in enumerate(meta.get("phases", [])):
        problem = _phase_problem(phase)
        if problem:
            return f"phases[{i}]{problem}"
    for i, table in enumerate(meta.get("derived", [])):
        if (
            not isinstance(table, dict)
            or not isinstance(table.get("name"), str)
            or not isinstance(table.get("rows", []), list)
            or not all(isinstance(r, dict) for r in table.get("rows", []))
        ):
            return _wrong(f"derived[{i}]", table, "an object with a name and a list of rows")
    return None


def _phase_problem(phase: Any) -> str | None:
    if not isinstance(phase, dict):
        return " " + _wrong("", phase, "an object").strip()
    for key in ("phase", "channel"):
        if not isinstance(phase.get(key), str):
            return _wrong(f".{key}", phase.get(key), "a string")
    for key in ("trials", "iterations"):
        if not isinstance(phase.get(key), int) or isinstance(phase.get(key), bool):
            return _wrong(f".{key}", phase.get(key), "a whole number")
    for key in _SPREADS:
        spread = phase.get(key)
        if spread is None and key == "dynamic_energy_per_iter_j":
            continue
        if not isinstance(spread, dict) or not all(
            isinstance(v, _NUMBER + (_NONE,)) and not isinstance(v, bool) for v in spread.values()
        ):
            return _wrong(f".{key}", spread, "an object of numbers (n, median, q1, q3, ...)")
    if not isinstance(phase.get("flags", []), list) or not isinstance(phase.get("work", {}), dict):
        return " flags should be a list and work an object"
    return None


def _damaged(path: Path, error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    cause = f"{type(error).__name__}: {lines[0][:160]}" if lines else type(error).__name__
    return f"{path} cannot be read ({cause})"


#: windows.csv columns that hold numbers
#: windows.csv's text columns; every other standard column holds numbers
_TEXT_WINDOW_COLUMNS = ("phase", "channel", "flags")
_NUMERIC_WINDOW_COLUMNS = tuple(c for c in WINDOW_COLUMNS if c not in _TEXT_WINDOW_COLUMNS)


def read_windows(directory: Path) -> pd.DataFrame:
    """windows.csv (an empty table when the run has none); a damaged file is a ``StoreError``."""
    path = Path(directory) / WINDOWS_CSV
    if not path.exists():
        return pd.DataFrame()
    what_to_do = f"restore it, or delete it to see the run from {RUN_JSON} alone"
    try:
        frame = pd.read_csv(path, dtype={c: str for c in _TEXT_WINDOW_COLUMNS})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
        raise StoreError(f"{_damaged(path, e)}: the file is damaged; {what_to_do}") from e
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}") from e
    missing = [c for c in ("phase", "trial") if c not in frame.columns]
    if missing:
        raise StoreError(
            f"{path} lacks the column(s) {missing} of a windows.csv: the file is damaged; {what_to_do}"
        )
    for column in _NUMERIC_WINDOW_COLUMNS:
        if column not in frame.columns or pd.api.types.is_numeric_dtype(frame[column]):
            continue
        numbers = pd.to_numeric(frame[column], errors="coerce")
        bad = frame[column][numbers.isna() & frame[column].notna()]
        if len(bad):
            raise StoreError(
                f"{path} has text in its numeric column {column} (row {int(bad.index[0]) + 2}: "
                f"{str(bad.iloc[0])[:40]!r}): the file is damaged; {what_to_do}"
            )
        frame[column] = numbers  # a header with no rows reads as text: no number is wrong there
    for column in _TEXT_WINDOW_COLUMNS:
        if column in frame.columns:
            frame[column] = frame[column].fillna("")
    return frame


def read_samples(directory: Path) -> tuple[pd.DataFrame, str]:
    """The run's samples and where they came from (parquet, or the partial log of a crash)."""
    directory = Path(directory)
    parquet = directory / SAMPLES_PARQUET
    if parquet.exists():
        try:
            frame = pd.read_parquet(parquet)
        except Exception as e:  # pyarrow raises many types for a damaged file
            raise StoreError(
                f"{_damaged(parquet, e)}: it is truncated or corrupt; restore it, or delete it to see the run "
                f"without its samples"
            ) from e
        _check_samples(parquet, frame)
        return frame, SAMPLES_PARQUET
    partial = directory / PARTIAL_NAME
    if partial.exists() and partial.stat().st_size > 0:
        # a process that died mid-line leaves a short last row: skip it
        try:
            frame = pd.read_csv(partial, on_bad_lines="skip")
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
            raise StoreError(f"{_damaged(partial, e)}: the file is damaged; delete it to see the run") from e
        _check_samples(partial, frame)
        for column in ("time_s", "value"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
        frame = frame.dropna(subset=["time_s", "value"])
        return frame.reset_index(drop=True), PARTIAL_NAME
    return pd.DataFrame(columns=SAMPLE_COLUMNS), ""


def _check_samples(path: Path, frame: pd.DataFrame) -> None:
    missing = [c for c in ("channel", "time_s", "value") if c not in frame.columns]
    if missing:
        raise StoreError(f"{path} lacks the column(s) {missing} of the run's samples: the file is damaged")
    if path.suffix == ".parquet":
        for column in ("time_s", "value"):
            if not pd.api.types.is_numeric_dtype(frame[column]):
                raise StoreError(f"{path} has text in its numeric column {column}: the file is damaged")
