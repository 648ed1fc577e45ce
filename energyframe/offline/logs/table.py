"""Reading a log file, bounded, and splitting a CSV into its header and rows.

A power log is read only when it is a regular file (``/dev/zero`` or a pipe would never end),
no larger than ``MAX_LOG_BYTES``, and when reading it is likely to fit in the memory this
process may still use; it is read in chunks, so Ctrl-C stops it at once. Every refusal is one
line naming the file and the cause.
"""

from __future__ import annotations

import csv
import re
import resource
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.samples import ENERGY_UNITS, POWER_UNITS
from ...errors import UsageError
from ...model import Channel, ClockBase, Quantity, Scope
from ..smi_format import header_name

#: the largest log read (about 10 days of a 20-ms nvidia-smi log of 8 GPUs). Units: bytes.
MAX_LOG_BYTES = 8 * 2**30
#: memory a log takes while it is split into rows and read, per byte of the file (measured on
#: nvidia-smi and WattsUp logs of a million rows: 30 to 40)
MEMORY_PER_BYTE = 40
_CHUNK = 16 * 2**20

#: what nvidia-smi and loggers print for a reading they do not have
MISSING_TEXT = {
    "",
    "[n/a]",
    "n/a",
    "[not supported]",
    "not supported",
    "[unknown error]",
    "unknown error",
    "-",
}
KNOWN = (
    "an energyframe samples.parquet or samples.partial.csv, a CSV of time_s and power_w or energy_j, "
    "the earlier tool's time,id,pm1,pm2,sum CSV, or an nvidia-smi CSV log"
)


# -- the file --------------------------------------------------------------------------------------


def read_file(path: Path) -> bytearray:
    """The bytes of a log file, read in chunks.

    Raises:
        UsageError: the file does not exist, is no regular file, is too large for this process's
            memory, or cannot be read (the system's reason).
    """
    try:
        info = path.stat()
    except FileNotFoundError as e:
        raise UsageError(f"power log {path} does not exist") from e
    except OSError as e:
        raise UsageError(f"cannot read power log {path}: {e.strerror or e}") from e
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"power log {path} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(
            f"power log {path} is not a regular file but a {_kind(info.st_mode)}: a log is read whole, and "
            "a device or a pipe may never end; copy what it holds into a file first"
        )
    size = info.st_size
    if size > MAX_LOG_BYTES:
        raise UsageError(
            f"power log {path} holds {size_text(size)}, more than the {size_text(MAX_LOG_BYTES)} read at once; "
            "split it by time and analyse the parts"
        )
    check_memory(path, size)
    return _read_chunks(path, size)


def _read_chunks(path: Path, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    done = 0
    try:
        with open(path, "rb") as f:
            if not size and f.read(1):  # a file of the kernel's (/proc) says 0 bytes, yet has more
                raise UsageError(
                    f"power log {path} gives no size, so it may never end; copy what it holds into a file first"
                )
            while done < size:  # a Python loop between chunks: Ctrl-C is seen at once
                n = f.readinto(view[done : done + _CHUNK])
                if not n:
                    break
                done += n
    except OSError as e:
        raise UsageError(f"cannot read power log {path}: {e.strerror or e}") from e
    finally:
        view.release()
    del data[done:]  # a file that shrank while it was read
    return data


def size_text(n: float) -> str:
    """A size in bytes for a message: ``1.2 GiB``, ``350 MiB``, ``12 KiB``."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "pipe"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def check_memory(path: Path, size: int) -> None:
    """Refuse a log that would not fit in the memory left to this process.

    Raises:
        UsageError: naming the file, its size, what reading it takes and what is left.
    """
    need = size * MEMORY_PER_BYTE
    left = available_memory()
    if left is None or need <= left:
        return
    raise UsageError(
        f"power log {path} holds {size_text(size)}; reading it takes about {size_text(need)} of memory and "
        f"this process has {size_text(left)} left: split the log by time and analyse the parts"
    )


def available_memory() -> int | None:
    """Bytes this process may still allocate: the least of the machine's available memory, the
    address-space limit (``ulimit -v``) less what is mapped, and the cgroup's limit less its use.
    None when none of them can be read."""
    limits = []
    meminfo = _numbers_in("/proc/meminfo", r"MemAvailable:\s+(\d+) kB")
    if meminfo:
        limits.append(meminfo[0] * 1024)
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = _numbers_in("/proc/self/status", r"VmSize:\s+(\d+) kB")
    if soft != resource.RLIM_INFINITY and mapped:
        limits.append(soft - mapped[0] * 1024)
    cap = _numbers_in("/sys/fs/cgroup/memory.max", r"^(\d+)")
    used = _numbers_in("/sys/fs/cgroup/memory.current", r"^(\d+)")
    if cap and used:
        limits.append(cap[0] - used[0])
    return max(0, min(limits)) if limits else None


def _numbers_in(path: str, pattern: str) -> list[int]:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return []
    return [int(m) for m in re.findall(pattern, text, flags=re.MULTILINE)]


# -- a CSV -----------------------------------------------------------------------------------------


@dataclass
class Table:
    """A CSV split into its header and rows; lines that do not fit the header set apart."""

    path: Path
    header: list[str]
    header_text: str
    rows: list[tuple[int, list[str]]]
    bad: list[tuple[int, str]]
    torn: tuple[int, str] | None  # the last line, when it ends mid-row (no newline, short)
    unterminated: int | None = None  # the last row's line number, when no newline ends it

    @classmethod
    def parse(cls, path: Path, data: bytes | bytearray) -> Table:
        lines = _text(path, data).split("\n")
        ends_with_newline = lines[-1] == ""
        if ends_with_newline:
            lines.pop()
        header_text = lines[0].rstrip("\r")
        header = [header_name(c) for c in next(csv.reader([header_text]))]
        rows, bad, torn = _split_lines(lines, len(header), ends_with_newline)
        last = len(lines) - 1
        unterminated = rows[-1][0] if rows and not ends_with_newline and rows[-1][0] == last + 1 else None
        return cls(path, header, header_text, rows, bad, torn, unterminated)

    def refuse_torn(self) -> None:
        if self.torn is not None:
            number, line = self.torn
            raise UsageError(
                f"{self.path} is truncated: its last line ({number}: {shown(line)}) ends in the middle of a "
                "row; remove that line to analyse the rest"
            )

    def column(self, name: str) -> int:
        return self.header.index(name)

    def columns(self) -> list[tuple[str, ...]]:
        """One tuple of texts per column (empty tuples when there is no row)."""
        if not self.rows:
            return [() for _ in self.header]
        return list(zip(*(fields for _n, fields in self.rows)))

    def no_rows(self, what: str, bad: list[tuple[int, str]] | None = None) -> UsageError:
        bad = self.bad if bad is None else bad
        if bad:
            number, line = bad[0]
            return UsageError(f"{self.path} has no {what} (line {number}: {shown(line, 60)} is not one)")
        return UsageError(f"power log {self.path} has a header but no rows")


def _text(path: Path, data: bytes | bytearray) -> str:
    """The file's text (undecodable bytes replaced, no byte-order mark), once its first line
    (or first 64 KiB) shows it is text.

    Raises:
        UsageError: the file is binary.
    """
    first = bytes(data[: data.find(b"\n") if b"\n" in data[:65536] else 65536])
    if b"\x00" in first or _undecodable(first):
        raise UsageError(f"{path} is binary, not a CSV power log ({KNOWN})")
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def _split_lines(
    lines: list[str], width: int, ends_with_newline: bool
) -> tuple[list[tuple[int, list[str]]], list[tuple[int, str]], tuple[int, str] | None]:
    """The lines after the header, by line number: the rows of ``width`` fields, the lines that
    are not rows, and the last line when it ends mid-row (short, with no newline after it)."""
    rows, bad, torn = [], [], None
    last = len(lines) - 1
    for index in range(1, len(lines)):
        line = lines[index].rstrip("\r")
        if not line.strip():
            continue
        fields = _fields(line)
        if fields is None:
            bad.append((index + 1, line))
        elif len(fields) == width:
            rows.append((index + 1, fields))
        elif index == last and not ends_with_newline and len(fields) < width:
            torn = (index + 1, line)
        else:
            bad.append((index + 1, line))
    return rows, bad, torn


def _fields(line: str) -> list[str] | None:
    """A line's fields, or None when it holds what no instrument writes in a row."""
    if "\x00" in line or "\ufffd" in line:
        return None
    try:
        # our logs never quote: split plainly, and leave quotes (which could swallow the lines
        # after a garbage one) to the csv module, one line at a time
        parts = line.split(",") if '"' not in line else next(csv.reader([line]))
    except csv.Error:
        return None
    return [f.strip() for f in parts]


def _undecodable(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError as e:
        return e.start < len(data) - 4  # a character cut by the 64 KiB limit is not binary


def shown(text: str, limit: int = 80) -> str:
    """A piece of a file for a one-line message: control characters escaped, shortened."""
    out = ascii(text[:limit])
    return out + ("..." if len(text) > limit else "")


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__


def skipped_warning(path: Path, bad: list[tuple[int, str]], what: str) -> list[str]:
    if not bad:
        return []
    number, line = bad[0]
    return [
        f"{path.name}: {len(bad)} line(s) that are not {what} were skipped (first: line {number}: {shown(line, 60)})"
    ]


# -- values ----------------------------------------------------------------------------------------


def numbers(texts, hexadecimal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each text's value (as ``number``) and whether it has one; vectorised."""
    import pandas as pd

    raw = np.array([str(t).strip() for t in texts], dtype=object)
    values = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(dtype=float, copy=True)
    has = ~np.isnan(values)
    rest = np.flatnonzero(~has)
    if rest.size > 64:  # values with units ("131.60 W"): the first word, all at once
        first = pd.Series([t.split(" ", 1)[0] for t in raw[rest]], dtype=object)
        found = pd.to_numeric(first, errors="coerce").to_numpy(dtype=float)
        values[rest], has[rest] = found, ~np.isnan(found)
        rest = rest[~has[rest]]
    for i in rest:  # "[N/A]", "nan", "0x4": the few that need a closer look
        value = number(raw[i], hexadecimal)
        if value is not None:
            values[i], has[i] = value, True
    values[~has] = np.nan
    return values, has


def number(text: str, hexadecimal: bool = False) -> float | None:
    """A reading's value: ``131.60``, ``131.60 W``, ``-500.00``, ``nan``; None when there is none."""
    text = text.strip()
    if text.lower() in MISSING_TEXT:
        return None
    if hexadecimal and text.lower().startswith("0x"):
        try:
            return float(int(text, 16))
        except ValueError:
            return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def spacing(t: np.ndarray) -> float:
    """The median interval between samples. Units: s."""
    if t.size < 2:
        return 0.0
    steps = np.diff(t)
    steps = steps[steps > 0]
    return float(np.median(steps)) if steps.size else 0.0


def unit_channel(name: str, unit: str, t: np.ndarray) -> Channel:
    """A channel described by its unit alone: power, energy (in any unit ``si_scale`` knows), else state."""
    quantity = (
        Quantity.POWER if unit in POWER_UNITS else Quantity.ENERGY if unit in ENERGY_UNITS else Quantity.STATE
    )
    return Channel(name, quantity, Scope.OTHER, spacing(t), ClockBase.WALL, unit=unit)
