"""A sweep's results: one ``KernelResult`` per configuration, saved as ``benchmark_results.json``
(the earlier kernel benchmarker's file, with energy, spread, correctness and ncu metrics added).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import StoreError, UsageError
from ..model import join_flags
from ..results import store
from .devices import differences, label_devices

RESULTS_JSON = "benchmark_results.json"
REPORT_TXT = "benchmark_report.txt"
# History of benchmark_results.json:
#   1 - first version (2026-11).
#   2 - per configuration ``warnings`` and ``device``; check statuses ``deterministic`` and
#       ``nondeterministic``; ``sweep.devices`` and ``sweep.warnings`` (2026-11). Version 1 reads.
RESULTS_VERSION = 2
READABLE_VERSIONS = (1, 2)

OK, MISMATCH, ERROR, NOT_RUN = "ok", "mismatch", "error", "not run"
#: ncu metric -> our field
NCU_FIELDS = {
    "gpu__time_duration.sum": "ncu_duration_s",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "compute_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
}
#: ncu compares with our latency only from here on (shorter launches: graph vs lone launch)
NCU_COMPARE_MIN_S = 50e-6


def _nan(value: Any) -> float:
    return math.nan if value is None else float(value)


@dataclass(frozen=True)
class KernelResult:
    """One configuration of a sweep. Per launch; units in the names (s, J, W).

    ``latency_s`` and ``energy_j`` are medians over ``trials`` windows; ``*_iqr_*`` their
    interquartile range, ``*_cv`` their coefficient of variation. ``flags`` carry the window
    flags (``short`` when a window was under the power source's resolution, ``noisy``);
    ``warnings`` what looked wrong about the launch before it ran; ``device`` the label (in the
    sweep's ``devices``) of the GPU that measured it.
    """

    index: int
    point_index: int
    kernel: str
    parameters: Mapping[str, Any]
    block: tuple[int, int, int]
    grid: tuple[int, int, int] = (0, 0, 0)
    status: str = NOT_RUN
    error: str = ""
    phase: str = ""
    latency_s: float = math.nan
    latency_iqr_s: float = math.nan
    latency_cv: float = math.nan
    energy_j: float = math.nan
    energy_iqr_j: float = math.nan
    energy_cv: float = math.nan
    power_w: float = math.nan
    trials: int = 0
    launches_per_window: int = 0
    unroll: int = 0
    flags: tuple[str, ...] = ()
    check: Mapping[str, Any] = field(default_factory=dict)
    flop: float = math.nan
    bytes: float = math.nan
    ncu: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    device: str = ""

    # -- derived figures ----------------------------------------------------------------------
    @property
    def gflops(self) -> float:
        return self.flop / self.latency_s / 1e9 if self.latency_s > 0 else math.nan

    @property
    def gbps(self) -> float:
        return self.bytes / self.latency_s / 1e9 if self.latency_s > 0 else math.nan

    @property
    def gflop_per_j(self) -> float:
        return self.flop / self.energy_j / 1e9 if self.energy_j > 0 else math.nan

    @property
    def ncu_duration_s(self) -> float:
        return _nan(self.ncu.get("ncu_duration_s"))

    @property
    def ncu_diff_pct(self) -> float:
        """Our latency against ncu's duration of a lone launch, in %."""
        d = self.ncu_duration_s
        return 100.0 * (self.latency_s - d) / d if d > 0 else math.nan

    @property
    def measured(self) -> bool:
        return self.status in (OK, MISMATCH) and not math.isnan(self.latency_s)

    def config_label(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.parameters.items())
        return f"{params} block={'x'.join(map(str, self.block))}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["block"], data["grid"] = list(self.block), list(self.grid)
        data["flags"] = list(self.flags)
        data["warnings"] = list(self.warnings)
        data["execution_time_ms"] = self.latency_s * 1e3  # the earlier tool's field
        for name in ("gflops", "gbps", "gflop_per_j", "ncu_diff_pct"):
            data[name] = getattr(self, name)
        for ours in NCU_FIELDS.values():  # the earlier tool's flat metric fields
            if ours != "ncu_duration_s":
                data[ours] = self.ncu.get(ours)
        return store.json_safe(data)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelResult:
        names = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in names}
        for key in ("block", "grid"):
            if key in values:
                values[key] = tuple(values[key])
        values["flags"] = tuple(values.get("flags", ()))
        values["warnings"] = tuple(values.get("warnings", ()))
        for key, f in cls.__dataclass_fields__.items():
            if f.type == "float" and key in values:
                values[key] = _nan(values[key])
        return cls(**values)


@dataclass(frozen=True)
class SweepResult:
    """Every configuration of a sweep (or of several merged shards) and what describes it."""

    results: tuple[KernelResult, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def with_ncu(self, metrics: Mapping[int, Mapping[str, Any]], note: str = "") -> SweepResult:
        results = tuple(
            replace(r, ncu=dict(metrics[r.index])) if r.index in metrics else r for r in self.results
        )
        meta = {**self.meta, "ncu": note or self.meta.get("ncu", "")}
        return SweepResult(results, meta)

    def frame(self):
        """One row per configuration, parameters as columns (pandas)."""
        import pandas as pd

        rows = []
        for r in self.results:
            row = r.to_json()
            row.pop("parameters")
            row.pop("check")
            row.pop("ncu")
            row.update({f"param_{k}": v for k, v in r.parameters.items()})
            row["check_status"] = r.check.get("status", "")
            row["rel_error"] = r.check.get("rel_error")
            row["block"] = "x".join(map(str, r.block))
            row["flags"] = join_flags(r.flags)
            rows.append(row)
        return pd.DataFrame(rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": RESULTS_VERSION,
            "sweep": store.json_safe(dict(self.meta)),
            "benchmarks": [r.to_json() for r in self.results],
        }

    def save(self, directory: Path | str) -> Path:
        """``benchmark_results.json`` into ``directory``; returns its path. The report and the
        plots are written by ``energyframe.sweeps.outputs.write`` (which calls this)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / RESULTS_JSON
        store.write_json(path, self.to_json())
        return path

    @classmethod
    def load(cls, path: Path | str) -> SweepResult:
        """Read ``benchmark_results.json`` (or the directory holding it).

        Raises:
            StoreError: missing or unreadable, or of an unknown format version.
            UsageError: not a sweep's results, or parameter names that are not identifiers
                (file names of plots are made from them).
        """
        path = Path(path)
        if path.is_dir():
            path = path / RESULTS_JSON
        data = _read_results(path)
        meta = data.get("sweep", {})
        try:
            results = tuple(KernelResult.from_json(b) for b in data["benchmarks"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UsageError(f"{path} is not a sweep's results ({type(e).__name__}: {e})") from None
        if not isinstance(meta, dict):
            raise UsageError(f"{path} is not a sweep's results ('sweep' is not an object)")
        _check_parameter_names(results, meta, path)
        shard_of(meta, str(path))
        return cls(results, meta)


def _read_results(path: Path) -> dict:
    """A ``benchmark_results.json`` as its JSON object, of a version this code reads.

    Raises:
        StoreError: missing or unreadable, or of an unknown format version.
        UsageError: not JSON, or not an object.
    """
    try:
        data = store.read_json(path)
    except (UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{path} is not a sweep's results ({e})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a sweep's results (a JSON object is expected)")
    version = data.get("format_version")
    if version not in READABLE_VERSIONS:
        raise StoreError(f"{path}: unknown benchmark_results.json format {version!r}")
    return data


def _check_parameter_names(results: Sequence[KernelResult], meta: Mapping[str, Any], path: Path) -> None:
    """Refuse parameter names that are not identifiers: file names of plots are made from them.

    Raises:
        UsageError: naming them.
    """
    names = [str(n) for r in results for n in r.parameters] + [str(n) for n in meta.get("parameters") or {}]
    bad = sorted({n for n in names if not n.isidentifier()})
    if bad:
        raise UsageError(
            f"{path}: parameter names {bad} are not identifiers (letters, digits and _): refused"
        )


#: the most shards a merge accepts (a crafted count must not build a set of 10**12 indices)
MAX_SHARDS = 1_000_000
#: a sweep may be split into more shards than it has points (one per GPU of --devices), up to this
MAX_EMPTY_SHARDS = 1024


def _points(meta: Mapping[str, Any]) -> int | None:
    """The sweep's parameter points as its metadata declares them (before any constraint)."""
    values = meta.get("parameters")
    if not isinstance(values, Mapping) or not all(isinstance(v, list) for v in values.values()):
        return None
    return math.prod(len(v) for v in values.values())


def shard_of(meta: Mapping[str, Any], where: str = "a part") -> tuple[int, int]:
    """The ``(index, count)`` a sweep's metadata claims: ``(0, 1)`` for a whole sweep.

    Raises:
        UsageError: naming ``where``: a shard that is not two integers with 0 <= index < count,
            or a count beyond what the sweep could have been split into.
    """
    shard = meta.get("shard")
    if shard is None:
        return (0, 1)
    what = f"{where}: shard {str(shard)[:60]}"
    if not _two_integers(shard):
        raise UsageError(f"{what}: expected [INDEX, COUNT], two integers")
    index, count = shard
    points = _points(meta)
    limit = min(MAX_SHARDS, max(points or 0, MAX_EMPTY_SHARDS))
    if not 1 <= count <= limit:
        of = f"a sweep of {points} parameter points" if points is not None else "a sweep"
        raise UsageError(f"{what}: {of} is split into 1 to {limit} shards, not {count}")
    if not 0 <= index < count:
        raise UsageError(f"{what}: the index must be from 0 to {count - 1} (0 <= INDEX < COUNT)")
    return (index, count)


def _two_integers(shard: Any) -> bool:
    """A list or tuple of two ints (a bool, though an int to Python, is not one)."""
    if not isinstance(shard, (list, tuple)) or len(shard) != 2:
        return False
    return not any(isinstance(x, bool) or not isinstance(x, int) for x in shard)


def merge(parts: Sequence[SweepResult], labels: Sequence[str | None] | None = None) -> SweepResult:
    """Shards of one sweep as one result, each configuration labelled with the GPU that
    measured it (``sweep.devices``: label -> what was recorded about that GPU).

    Args:
        labels: per part, the label of its GPU (``energyframe sweep --devices`` gives the device
            it chose); default: from each part's recorded device.

    Raises:
        StoreError: the parts come from different sweeps or overlap.
        UsageError: a part's shard is not a valid [INDEX, COUNT].
    """
    _check_one_sweep(parts)
    shards = [shard_of(p.meta) for p in parts]
    seen, missing = _coverage(shards)
    names = label_devices([p.meta.get("device") or {} for p in parts], shards, labels)
    results, devices = _labelled(parts, shards, names)
    return SweepResult(tuple(results), _merged_meta(parts, seen, missing, devices))


def _check_one_sweep(parts: Sequence[SweepResult]) -> None:
    """Refuse no parts, or parts of different sweeps (or of none: a part without a sweep id).

    Raises:
        StoreError: naming the sweep ids.
    """
    if not parts:
        raise StoreError("nothing to merge")
    ids = {p.meta.get("sweep_id") for p in parts}
    if len(ids) != 1 or None in ids:
        raise StoreError(f"these results come from different sweeps (sweep ids {sorted(map(str, ids))})")


def _coverage(shards: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The shard indices given (sorted) and the ones missing from their split.

    Raises:
        StoreError: the shards come from different splits, or one was given twice.
    """
    counts = {s[1] for s in shards}
    if len(counts) != 1:
        raise StoreError(f"shards of different splits: {shards}")
    count = counts.pop()
    seen = sorted(s[0] for s in shards)
    if len(set(seen)) != len(seen):
        raise StoreError(f"a shard was given twice: {seen}")
    return seen, sorted(set(range(count)) - set(seen))


def _labelled(
    parts: Sequence[SweepResult], shards: Sequence[tuple[int, int]], names: Sequence[str | None]
) -> tuple[list[KernelResult], dict[str, Any]]:
    """Every part's configurations in sweep order, each measured one labelled with its part's GPU,
    and per GPU label what was recorded about it with the shards it measured."""
    devices: dict[str, Any] = {}
    results: list[KernelResult] = []
    for part, shard, name in zip(parts, shards, names):
        if name is None:
            results += part.results
            continue
        entry = devices.setdefault(name, {**(part.meta.get("device") or {}), "shards": []})
        entry["shards"].append(list(shard))
        results += [replace(r, device=name) if r.status != NOT_RUN else r for r in part.results]
    results.sort(key=lambda r: r.index)
    return results, devices


def _merged_meta(
    parts: Sequence[SweepResult], seen: list[int], missing: list[int], devices: dict[str, Any]
) -> dict[str, Any]:
    """The first part's metadata as the whole sweep's: the shards merged and missing, the GPUs
    (no one part's device), every part's warnings (and where the GPUs differ) and runs."""
    meta = {**parts[0].meta, "shard": None, "merged_shards": seen, "missing_shards": missing}
    meta.pop("device", None)
    meta["devices"] = devices
    names_seen = [info.get("name") for info in devices.values() if info.get("name")]
    if names_seen:
        meta["gpu"] = ", ".join(dict.fromkeys(names_seen))
    meta["warnings"] = _merged_warnings(parts, devices)
    meta["runs"] = [run for p in parts for run in (p.meta.get("runs") or [])]
    return meta


def _merged_warnings(parts: Sequence[SweepResult], devices: Mapping[str, Any]) -> list[str]:
    """Every part's warnings, then a warning per setting in which the GPUs differ, each once."""
    warnings = [w for p in parts for w in p.meta.get("warnings") or [] if w]
    warnings += differences(devices)
    return list(dict.fromkeys(warnings))
