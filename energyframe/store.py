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
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pandas as pd

from .errors import StoreError
from .samples import PARTIAL_NAME, SAMPLE_COLUMNS

# History of the run-directory format:
#   1 - first version: run.json, windows.csv, samples.parquet (2026-11).
FORMAT_VERSION = 1

RUN_JSON = "run.json"
WINDOWS_CSV = "windows.csv"
SAMPLES_PARQUET = "samples.parquet"
WINDOWS_PARTIAL = "windows.partial.csv"
JOURNAL_COLUMNS = ["event", "phase", "trial", "start_s", "end_s", "iterations"]


def claim_run_dir(directory: Path) -> None:
    """Make ``directory`` this run's, atomically: of two runs started into one directory at the
    same moment, exactly one gets it (``run.json`` is created with O_EXCL), the other is refused.

    Raises:
        UsageError: the directory already holds a run, or is not a directory.
        StoreError: it cannot be created or written.
    """
    from .errors import UsageError

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
        text = json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"
        try:
            with open(path, "r+" if path.exists() else "w") as f:
                f.truncate(0)
                f.write(text)
        except OSError:
            raise StoreError(_write_error(path, OSError(errno.ENOSPC, "no space left"))) from None


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    # pandas writes floats with repr(): shortest text that reads back to the same double,
    # which keeps Unix timestamps exact to the microsecond and below
    _atomic_write(path, lambda p: frame.to_csv(p, index=False))


def write_samples(path: Path, samples: pd.DataFrame) -> None:
    _atomic_write(path, lambda p: samples.to_parquet(p, index=False))


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise StoreError(f"{path.parent} is not a run directory: it has no {path.name}") from e
    except json.JSONDecodeError as e:
        raise StoreError(f"{path} is not valid JSON ({e})") from e


def read_meta(directory: Path) -> dict:
    meta = read_json(Path(directory) / RUN_JSON)
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise StoreError(
            f"{directory} has run format version {version!r}; this energyframe reads version "
            f"{FORMAT_VERSION}. Upgrade energyframe to read it."
        )
    return meta


def read_windows(directory: Path) -> pd.DataFrame:
    path = Path(directory) / WINDOWS_CSV
    if not path.exists():
        return pd.DataFrame()
    text_columns = ["phase", "channel", "flags"]
    frame = pd.read_csv(path, dtype={c: str for c in text_columns})
    for column in text_columns:
        if column in frame.columns:
            frame[column] = frame[column].fillna("")
    return frame


def read_samples(directory: Path) -> tuple[pd.DataFrame, str]:
    """The run's samples and where they came from (parquet, or the partial log of a crash)."""
    directory = Path(directory)
    parquet = directory / SAMPLES_PARQUET
    if parquet.exists():
        return pd.read_parquet(parquet), SAMPLES_PARQUET
    partial = directory / PARTIAL_NAME
    if partial.exists() and partial.stat().st_size > 0:
        # a process that died mid-line leaves a short last row: skip it
        frame = pd.read_csv(partial, on_bad_lines="skip").dropna(subset=["time_s", "value"])
        return frame.reset_index(drop=True), PARTIAL_NAME
    return pd.DataFrame(columns=SAMPLE_COLUMNS), ""
