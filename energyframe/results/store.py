"""The run directory: ``run.json``, ``windows.csv``, ``samples.parquet`` (docs/result-format.md).

Every file is written to a temporary name and renamed into place, so a reader never sees half a
file, with the permissions the user's umask gives (a colleague on a shared cluster can read
it). A run that is still going (or died) has a ``run.json`` with status ``incomplete``, its
samples in ``samples.partial.csv`` and its finished windows in ``windows.partial.csv``, both
flushed as they come, which the readers fall back to.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import pandas as pd

from ..core.samples import PARTIAL_NAME, SAMPLE_COLUMNS
from ..core.windows import TEXT_COLUMNS, WINDOW_COLUMNS
from ..errors import StoreError, UsageError
from .meta import FORMAT_VERSION, FormatVersionError, MetaError, RunMeta, described  # noqa: F401 (FORMAT_VERSION: its old home)
from .paths import out_path

RUN_JSON = "run.json"
WINDOWS_CSV = "windows.csv"
SAMPLES_PARQUET = "samples.parquet"
WINDOWS_PARTIAL = "windows.partial.csv"
#: the journal's description of the started sources and their channels (written once, when
#: they start), so that a run whose process died can be rebuilt
SOURCES_PARTIAL = "sources.partial.json"
JOURNAL_COLUMNS = ["event", "phase", "trial", "start_s", "end_s", "iterations"]
#: the journal's column saying whether a window opened after a device sync ("1") or not ("0");
#: a journal without it (written before it existed) reads as not synced
JOURNAL_SYNCED = "synced"


def _symlink_loop(directory: Path) -> str | None:
    """``a -> b -> a`` when ``directory`` (or a folder above it) is a loop of symbolic links."""
    try:
        os.stat(directory)
    except OSError as e:
        if e.errno != errno.ELOOP:
            return None
    else:
        return None
    current = directory
    while not current.is_symlink() and current.parent != current:
        current = current.parent  # the loop is a folder above
    chain: list[str] = [str(current)]
    while current.is_symlink() and len(chain) <= 8:
        current = current.parent / os.readlink(current)
        chain.append(str(current))
        if str(current) in chain[:-1]:
            break
    return " -> ".join(chain)


def claim_run_dir(directory: Path, meta: Mapping[str, Any] | None = None) -> None:
    """Make ``directory`` this run's, atomically: of two runs started into one directory at the
    same moment, exactly one gets it (``run.json`` is created with O_EXCL, holding ``meta``:
    what the run is and that it is running), the other is refused.

    Raises:
        UsageError: the directory is empty, already holds a run, is not a directory, or is a
            loop of symbolic links.
        StoreError: it cannot be created or written.
    """
    directory = out_path(directory)
    loop = _symlink_loop(directory)
    if loop:
        raise UsageError(
            f"--out {directory} is a loop of symbolic links ({loop}); choose another --out directory"
        )
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--out {directory} is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / RUN_JSON, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    except FileExistsError as e:
        if not directory.is_dir():  # mkdir met something that is not a directory (a dangling link)
            raise UsageError(f"--out {directory} exists and is not a directory") from e
        raise UsageError(f"{directory} already holds a run; choose another --out directory") from e
    except OSError as e:
        raise StoreError(_write_error(directory / RUN_JSON, e)) from e
    try:
        if meta is not None:
            text = json.dumps(json_safe(_current_format(dict(meta))), indent=2, allow_nan=False) + "\n"
            data = memoryview(text.encode())
            while data:  # os.write may write less than it was given (a nearly full disk)
                data = data[os.write(fd, data) :]
    except OSError as e:
        raise StoreError(_write_error(directory / RUN_JSON, e)) from e
    finally:
        os.close(fd)


def write_error(path: Path | str, error: OSError) -> str:
    """One line for a file that could not be written: ``cannot write PATH: no space left on the
    device`` (and what to do, where there is something to do)."""
    return _write_error(Path(path), error)


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
    Only a regular file (or nothing) is ever replaced: a device (``/dev/null``) or a FIFO with a
    reader is written to as it is, and anything else that is not a regular file is refused.

    Raises:
        StoreError: the file cannot be written (disk full, no permission, not a file), naming it.
    """
    kind = _existing_kind(path)
    if kind is not None and kind != "file":
        _write_through(path, kind, write)
        return
    if kind == "file" and path.is_symlink():
        path = Path(os.path.realpath(path))  # replace the file the link names, keep the link
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


def _existing_kind(path: Path) -> str | None:
    """What ``path`` names now (links followed): None, file, directory, device, fifo or other."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(_write_error(path, e)) from e
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISCHR(mode):
        return "device"
    return "fifo" if stat.S_ISFIFO(mode) else "other"


def _write_through(path: Path, kind: str, write: Callable[[Path], None]) -> None:
    """Write into a character device or a FIFO as it is (it is never replaced)."""
    if kind in ("directory", "other"):
        what = (
            "a directory" if kind == "directory" else "neither a regular file, a character device nor a FIFO"
        )
        raise StoreError(f"cannot write {path}: it is {what}; give a file name")
    fd = None
    try:
        if kind == "fifo":  # without a reader, opening would wait for one forever
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        write(path)
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise StoreError(f"cannot write {path}: it is a FIFO that no process reads") from e
        raise StoreError(_write_error(path, e)) from e
    finally:
        if fd is not None:
            os.close(fd)


class WindowJournal:
    """``windows.partial.csv``: every window as it closes, flushed, so a run that dies (a second
    Ctrl-C, SIGKILL, a full disk) keeps the windows it had finished."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file: IO[str] | None = open(path, "w", newline="")  # noqa: SIM115 (closed by close())
        except OSError as e:
            raise StoreError(_write_error(path, e)) from e
        self._writer = csv.writer(self._file)
        self._row([*JOURNAL_COLUMNS, JOURNAL_SYNCED])

    def _row(self, row: list) -> None:
        if self._file is None:
            return
        try:
            self._writer.writerow(row)
            self._file.flush()
        except OSError as e:
            raise StoreError(_write_error(self.path, e)) from e

    def closed(
        self, phase: str, trial: int, start_s: float, end_s: float, iterations: int, synced: bool = False
    ) -> None:
        """A window closed (``synced``: it opened after a device sync). Units: Unix s."""
        self._row(["closed", phase, trial, repr(start_s), repr(end_s), iterations, int(synced)])

    def interrupted(self, phase: str, trial: int) -> None:
        """The window just closed was closed by an interruption before its work ended."""
        self._row(["interrupted", phase, trial, "", "", "", ""])

    def discarded(self, phase: str, trial: int) -> None:
        """The last closed window of ``phase`` was discarded (measured again, longer)."""
        self._row(["discarded", phase, trial, "", "", "", ""])

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
    return _json_leaf(value)


def _json_leaf(value: Any) -> Any:
    """A value that is not a float or a container, as JSON holds it: text, whole numbers, booleans
    and null as they are, a numpy scalar as its Python value, a path or anything else as text."""
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
    (its old blocks are freed first), so a run never keeps saying it is running. It is written in
    the current format, every section present, as ``RunMeta.to_json`` gives it.

    Raises:
        StoreError: it could not be written either way.
    """
    data = _current_format(data)
    try:
        write_json(path, data)
    except StoreError:
        # the whole status, compact (it must fit in the blocks the old run.json frees); if even
        # that does not fit, the fields a reader needs to know what happened (the sources are in
        # the journal)
        essential = {k: data[k] for k in _STATUS_FIELDS if k in data}
        essential["warnings"] = [*data.get("warnings", []), "run.json holds only its status: the disk was full"]
        for version in (data, _current_format(essential)):
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


def _current_format(data: dict) -> dict:
    try:
        return RunMeta.from_json(json_safe({"format_version": FORMAT_VERSION, **data})).to_json()
    except (MetaError, FormatVersionError):  # the status must reach the disk, typed or not
        return data


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    # pandas writes floats with repr(): shortest text that reads back to the same double,
    # which keeps Unix timestamps exact to the microsecond and below
    _atomic_write(path, lambda p: frame.to_csv(p, index=False))


def write_samples(path: Path, samples: pd.DataFrame) -> None:
    _atomic_write(path, lambda p: samples.to_parquet(p, index=False))


#: byte-order marks of the encodings a JSON file could be saved in by another tool
_BOMS = (
    (b"\xef\xbb\xbf", "UTF-8 with a byte-order mark"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def read_json(path: Path) -> Any:
    """The JSON in ``path`` (UTF-8, as energyframe writes it); a ``StoreError`` naming the file and
    the cause when it cannot be read: missing, not text, in another encoding, not JSON, or nested
    deeper than a parser can follow. (Callers check what it holds: ``read_meta`` wants a run
    description.)"""
    path = Path(path)
    value = _parsed_json(path, _json_bytes(path))
    if _depth(value) > MAX_JSON_DEPTH:  # every reader after this one may recurse through it
        raise StoreError(_too_deep(path, f"more than {MAX_JSON_DEPTH}"))
    return value


def _json_bytes(path: Path) -> bytes:
    """The bytes of a run directory's JSON file.

    Raises:
        StoreError: the directory is a file, the file is missing, a directory, or unreadable.
    """
    if path.parent.exists() and not path.parent.is_dir():
        raise StoreError(f"{path.parent} is a file, not a run directory")
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise StoreError(f"{path.parent} is not a run directory: it has no {path.name}") from e
    except IsADirectoryError as e:
        raise StoreError(f"{path} is a directory, not a JSON file") from e
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}") from e


def _parsed_json(path: Path, data: bytes) -> Any:
    """``data`` parsed as UTF-8 JSON.

    Raises:
        StoreError: text in another encoding (a byte-order mark), not text, not JSON, or nested
            deeper than the parser follows.
    """
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), None)
    if encoding is not None:
        raise StoreError(
            f"{path} is {encoding} text; energyframe reads and writes it as UTF-8 (save it as UTF-8 "
            "without a byte-order mark)"
        )
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise StoreError(f"{path} is not text (binary data at byte {e.start}): the file is damaged") from e
    except json.JSONDecodeError as e:
        raise StoreError(f"{path} is not valid JSON ({e})") from e
    except RecursionError as e:
        raise StoreError(_too_deep(path, f"more than {sys.getrecursionlimit()}")) from e


#: the deepest nesting a JSON file of a run may have: energyframe writes a few levels; a
#: workload's own figures a few more
MAX_JSON_DEPTH = 64


def _too_deep(path: Path, levels: str) -> str:
    return f"{path} nests its values {levels} levels deep: the file is damaged or crafted"


def _depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (0 for a plain value), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def read_run_meta(directory: Path) -> RunMeta:
    """run.json, typed: brought up from an earlier format version, every field checked.

    Raises:
        StoreError: unreadable, not a run description, of a newer format version, or a field of
            the wrong type (one line naming the file, the key and what was expected).
    """
    path = Path(directory) / RUN_JSON
    data = read_json(path)
    if not isinstance(data, dict):
        raise StoreError(
            f"{path} should hold a JSON object, but holds {described(data)}: the file is damaged"
        )
    try:
        return RunMeta.from_json(data)
    except FormatVersionError as e:
        raise StoreError(f"{directory} {e}") from e
    except MetaError as e:
        raise StoreError(f"{path}: {e}; the file is damaged (energyframe writes it whole)") from e


def read_meta(directory: Path) -> dict:
    """run.json as a mapping in the current format (``read_run_meta``'s checks)."""
    return read_run_meta(directory).to_json()


def _damaged(path: Path, error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    cause = f"{type(error).__name__}: {lines[0][:160]}" if lines else type(error).__name__
    return f"{path} cannot be read ({cause})"


#: windows.csv columns that hold numbers
#: windows.csv's text columns; every other standard column holds numbers
_TEXT_WINDOW_COLUMNS = TEXT_COLUMNS
_NUMERIC_WINDOW_COLUMNS = tuple(c for c in WINDOW_COLUMNS if c not in _TEXT_WINDOW_COLUMNS)
#: the columns every windows.csv has held since the first format, which the phase summaries
#: are computed from
_FIGURE_COLUMNS = (
    "channel", "start_s", "end_s", "iterations", "time_per_iter_s", "energy_j", "mean_power_w", "energy_per_iter_j",
    "dynamic_energy_per_iter_j", "flags",
)


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
    _check_window_columns(path, frame, ("phase", "trial"), "of a windows.csv", what_to_do)
    _numbers_in_numeric_columns(path, frame, what_to_do)
    # a window without its energy would be summarised as a timing-only one
    _check_window_columns(path, frame, _FIGURE_COLUMNS, "that every windows.csv holds (each window's figures)", what_to_do)
    for column in _TEXT_WINDOW_COLUMNS:
        if column in frame.columns:
            frame[column] = frame[column].fillna("")
    return frame


def _numbers_in_numeric_columns(path: Path, frame: pd.DataFrame, what_to_do: str) -> None:
    """Make each numeric column of ``frame`` that pandas read as text numbers, in place.

    Raises:
        StoreError: a cell of such a column holds text that is not a number.
    """
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


def _check_window_columns(
    path: Path, frame: pd.DataFrame, columns: tuple[str, ...], which: str, what_to_do: str
) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise StoreError(f"{path} lacks the column(s) {missing} {which}: the file is damaged; {what_to_do}")


def read_parquet(source: Path | IO[bytes]) -> pd.DataFrame:
    """``pd.read_parquet``, without what fastparquet prints to stdout about a damaged file
    ("Corrupted thrift data at ..."): the caller's one-line error says it."""
    with contextlib.redirect_stdout(io.StringIO()):
        return pd.read_parquet(source)


def read_samples(directory: Path) -> tuple[pd.DataFrame, str]:
    """The run's samples and where they came from (parquet, or the partial log of a crash)."""
    directory = Path(directory)
    parquet = directory / SAMPLES_PARQUET
    if parquet.exists():
        try:
            with open(parquet, "rb") as f:  # the system's reason first: permission, I/O error
                f.read(4)
        except OSError as e:
            raise StoreError(f"cannot read {parquet}: {e.strerror or e}") from e
        try:
            frame = read_parquet(parquet)
        except Exception as e:  # the parquet engines raise many types for a damaged file
            raise StoreError(
                f"{_damaged(parquet, e)}: it is truncated or corrupt; restore it, or delete it to see the run "
                f"without its samples"
            ) from e
        _check_samples(parquet, frame)
        return frame, SAMPLES_PARQUET
    partial = directory / PARTIAL_NAME
    if partial.exists() and partial.stat().st_size > 0:
        text = _whole_rows(partial)
        if not text.strip():  # the process died before the header was whole: no sample
            return pd.DataFrame(columns=SAMPLE_COLUMNS), PARTIAL_NAME
        try:
            frame = pd.read_csv(io.StringIO(text), on_bad_lines="skip")
        except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as e:
            raise StoreError(f"{_damaged(partial, e)}: the file is damaged; delete it to see the run") from e
        _check_samples(partial, frame)
        for column in ("time_s", "value"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
        frame = frame.dropna(subset=["time_s", "value"])
        return frame.reset_index(drop=True), PARTIAL_NAME
    return pd.DataFrame(columns=SAMPLE_COLUMNS), ""


def _whole_rows(path: Path) -> str:
    """The text of a journal a process appended to until it died: its last row is left out when
    no line end closes it (cut mid-field, mid-character, or zeros of a block the file system
    had not written), and so is any row whose bytes are not text.

    Raises:
        StoreError: the file cannot be read (the system's reason).
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}") from e
    data = data[: data.rfind(b"\n") + 1]
    if b"\0" not in data:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return "".join(text for text in map(_text_line, data.splitlines(keepends=True)) if text)


def _text_line(line: bytes) -> str:
    """The line as text, or ``""`` when it is not (bytes that are not UTF-8, zeros)."""
    if b"\0" in line:
        return ""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def _check_samples(path: Path, frame: pd.DataFrame) -> None:
    missing = [c for c in ("channel", "time_s", "value") if c not in frame.columns]
    if missing:
        raise StoreError(f"{path} lacks the column(s) {missing} of the run's samples: the file is damaged")
    if path.suffix == ".parquet":
        for column in ("time_s", "value"):
            if not pd.api.types.is_numeric_dtype(frame[column]):
                raise StoreError(f"{path} has text in its numeric column {column}: the file is damaged")
