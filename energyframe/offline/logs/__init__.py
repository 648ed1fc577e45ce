"""Power logs recorded elsewhere, read into channels and sample series.

The one reader behind ``energyframe analyze`` and the ``replay`` power source. It recognises a
file by its content (a parquet's magic bytes, a CSV's header), one module per kind:

- ``samples_file``: an energyframe ``samples.parquet`` or ``samples.partial.csv`` (channels
  described by the ``run.json`` beside it, else by their units);
- ``power_csv``: a CSV of ``time_s`` (Unix seconds) and ``power_w`` or ``energy_j``;
- ``wattsup_csv``: the earlier tool's WattsUp? CSV (``time,id,pm1,pm2,sum``, whole seconds,
  local time), and the same file as energyframe's ``wattsup`` source writes it;
- ``nvidia_smi_csv``: an ``nvidia-smi --query-gpu=timestamp,index,...,power.draw...`` CSV log,
  with or without units, and energyframe's own ``raw/nvidia-smi/nvidia-smi.csv``.

Shared: ``table`` (reading a file, bounded, and splitting a CSV), ``timestamps``, and ``log``
(``PowerLog``, and one channel's rows put in time order: rows of one instant averaged, rows
where the clock stepped back left out, each with a warning and times the windows are flagged by).

Every value is kept as written, converted to W or J: negative or NaN power is not corrected here
(``plausible`` splits it off for integration, by the core's rule), and rows without a value
(``[N/A]``) are listed apart. Lines that are not rows of the log (garbage an instrument printed)
are skipped with a warning; a file that is empty, binary, truncated in its last row, too large
for memory, no regular file, or of no known kind is a ``UsageError`` that names the file and
the cause.
"""

from __future__ import annotations

from pathlib import Path

from ...core.samples import MISSING
from ...errors import UsageError
from . import nvidia_smi_csv, power_csv, samples_file, wattsup_csv
from .log import NVIDIA_SMI, POWER_CSV, SAMPLES, UNIT, WATTSUP_CSV, PowerLog, plausible
from .table import KNOWN, Table, read_file, shown, size_text
from .timestamps import parse_time, unix_times, zone

__all__ = [
    "MISSING",
    "NVIDIA_SMI",
    "POWER_CSV",
    "SAMPLES",
    "UNIT",
    "WATTSUP_CSV",
    "PowerLog",
    "parse_time",
    "plausible",
    "read_log",
    "unix_times",
    "zone",
]


def read_log(path: Path | str, tz: str | None = None, name: str | None = None) -> PowerLog:
    """Read a power log of any kind this package knows.

    Args:
        tz: zone of date-times written without one (``local``, ``UTC``, ``+01:00``).
        name: the channel name of a ``time_s,power_w`` CSV (default: the file's stem).

    Raises:
        UsageError: the file does not exist, is empty, binary, truncated, too large, no regular
            file, or of no known kind.
    """
    path = Path(path)
    data = read_file(path)
    size = len(data)
    try:
        return _parse(path, data, tz, name)
    except MemoryError:
        del data
        raise UsageError(
            f"power log {path} ({size_text(size)}) does not fit in the memory this process may use: "
            "split it by time and analyse the parts"
        ) from None


def _parse(path: Path, data: bytearray, tz: str | None, name: str | None) -> PowerLog:
    if not data.strip():
        raise UsageError(f"power log {path} is empty: no header and no rows")
    if data[:4] == b"PAR1" or path.suffix == ".parquet":
        return samples_file.read_parquet(path, data)
    table = Table.parse(path, data)
    del data
    kind = _csv_kind(table.header)
    if kind == SAMPLES:
        return samples_file.from_table(path, table)
    if kind == POWER_CSV:
        return power_csv.read(path, table, name or path.stem)
    if kind == WATTSUP_CSV:
        return wattsup_csv.read(path, table, tz)
    if kind == NVIDIA_SMI:
        return nvidia_smi_csv.read(path, table, tz)
    raise _unknown_kind(path, table)


def _has_power(columns: list[str]) -> bool:
    return "power_w" in columns or "energy_j" in columns


def _is_samples(columns: list[str]) -> bool:
    return set(samples_file.COLUMNS) <= set(columns)


def _is_power_csv(columns: list[str]) -> bool:
    return "time_s" in columns and _has_power(columns)


def _is_wattsup(columns: list[str]) -> bool:
    return "time" in columns and any(c.startswith("pm") or c == "sum" for c in columns)


def _is_nvidia_smi(columns: list[str]) -> bool:
    return "timestamp" in columns and any(c.startswith("power.draw") for c in columns)


#: each kind of CSV log and what its header holds, in the order they are recognised
CSV_KINDS = (
    (SAMPLES, _is_samples),
    (POWER_CSV, _is_power_csv),
    (WATTSUP_CSV, _is_wattsup),
    (NVIDIA_SMI, _is_nvidia_smi),
)


def _csv_kind(columns: list[str]) -> str | None:
    """The kind of log a CSV header shows; None for none known."""
    return next((kind for kind, holds in CSV_KINDS if holds(columns)), None)


def _unknown_kind(path: Path, table: Table) -> UsageError:
    """Why a CSV is no power log: the column a ``time_s,power_w`` CSV lacks, or no kind known."""
    columns = table.header
    if _has_power(columns):
        return UsageError(f"{path} needs a time_s column (Unix seconds); it has {columns}")
    if "time_s" in columns:
        return UsageError(f"{path} needs a power_w or energy_j column; it has {columns}")
    return UsageError(
        f"{path} is not a power log energyframe knows ({KNOWN}); its header: {shown(table.header_text)}"
    )
