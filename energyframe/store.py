"""The run directory: ``run.json``, ``windows.csv``, ``samples.parquet`` (docs/result-format.md).

Every file is written to a temporary name and renamed into place, so a reader never sees half a
file. A run that is still going (or died) has a ``run.json`` with status ``incomplete`` and its
samples in ``samples.partial.csv``, which ``read_run`` falls back to.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import StoreError
from .samples import PARTIAL_NAME, SAMPLE_COLUMNS

# History of the run-directory format:
#   1 - first version: run.json, windows.csv, samples.parquet (2026-11).
FORMAT_VERSION = 1

RUN_JSON = "run.json"
WINDOWS_CSV = "windows.csv"
SAMPLES_PARQUET = "samples.parquet"


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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    _atomic_write(path, lambda p: p.write_bytes(data))


def write_json(path: Path, data: dict) -> None:
    text = json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"
    _atomic_write(path, lambda p: p.write_text(text))


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
