"""Why two runs may not compare: different GPUs, drivers, power limits, clocks, throttling,
workload or power-source options, library versions, window flags (docs/comparing.md).

Each check looks at run.json and windows.csv only, and returns sentences naming the runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..model import split_flags
from ..results.meta import RunMeta
from ..results.result import RunResult

#: SM clocks whose medians differ by more than this fraction are reported
CLOCK_TOLERANCE = 0.05
#: window flags that make a figure less certain; a flag in one run and not another is reported
QUALITY_FLAGS = ("short_window", "uncovered", "gap", "counter_reset", "meter_window_under_60s")
#: at most this many phases are named in one warning
MAX_NAMED = 5
#: library versions that change what is measured
VERSION_KEYS = ("energyframe", "torch", "cupy", "nvidia-ml-py", "transformers")


def _names(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= MAX_NAMED:
        return ", ".join(items)
    return ", ".join(items[:MAX_NAMED]) + f" and {len(items) - MAX_NAMED} more"


def _per_run(labels: Sequence[str], values: Sequence[Any], show: Callable[[Any], str] = str) -> str:
    return "; ".join(f"{label}: {show(v)}" for label, v in zip(labels, values))


def _differ(values: Sequence[Any]) -> bool:
    return any(v != values[0] for v in values[1:])


def gpus(meta: RunMeta) -> list[Mapping[str, Any]]:
    """The GPUs a run's power sources describe (NVML's ``gpus`` entries with a name)."""
    return meta.gpus


def same_board(metas: Sequence[RunMeta]) -> bool:
    """Whether every run measured the same GPUs (by UUID), so that their sensors' systematic
    errors are the same and cancel in a difference."""
    boards = [tuple(sorted(str(g.get("uuid")) for g in gpus(m) if g.get("uuid"))) for m in metas]
    return bool(boards) and bool(boards[0]) and not _differ(boards)


def gpu_models(meta: RunMeta) -> tuple[str, ...]:
    names = [g["name"] for g in meta.gpus]
    workload_gpu = meta.workload_info.get("gpu")
    if workload_gpu and workload_gpu not in names:
        names.append(str(workload_gpu))
    return tuple(sorted(set(names)))


def _drivers(meta: RunMeta) -> tuple[str, ...]:
    found = {str(s.info.get("driver_version")) for s in meta.sources if s.info.get("driver_version")}
    return tuple(sorted(found))


def _power_limits(meta: RunMeta) -> tuple[float, ...]:
    return tuple(sorted(float(g["power_limit_w"]) for g in meta.gpus if g.get("power_limit_w") is not None))


def _flagged_trials(windows: pd.DataFrame, prefix: str) -> dict[str, tuple[int, int, set[str]]]:
    """Per phase: windows with a flag starting with ``prefix``, windows in all, and the flags."""
    out: dict[str, tuple[int, int, set[str]]] = {}
    if windows.empty or "flags" not in windows.columns:
        return out
    for phase, group in windows.groupby("phase", sort=False):
        flagged: set[int] = set()
        seen: set[str] = set()
        for trial, text in zip(group["trial"], group["flags"]):
            mine = {f for f in split_flags(text) if f.startswith(prefix)}
            if mine:
                flagged.add(int(trial))
                seen |= mine
        out[str(phase)] = (len(flagged), int(group["trial"].nunique()), seen)
    return out


def _clock_medians(windows: pd.DataFrame) -> dict[str, float]:
    if windows.empty or "sm_clock_mhz" not in windows.columns:
        return {}
    out = {}
    for phase, group in windows.groupby("phase", sort=False):
        values = pd.to_numeric(group["sm_clock_mhz"], errors="coerce").to_numpy(float)
        values = values[np.isfinite(values)]
        if values.size:
            out[str(phase)] = float(np.median(values))
    return out


def _option_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    keys = list(dict.fromkeys([*a, *b]))
    return [f"{k}={a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


def check(labels: Sequence[str], runs: Sequence[RunResult]) -> list[str]:  # noqa: C901, PLR0915 (one check per way two runs can differ, in report order)
    """Every reason the runs may not compare, as sentences (empty when none was found)."""
    metas = [r.run_meta for r in runs]
    out: list[str] = []
    for label, run in zip(labels, runs):
        if not run.complete:
            out.append(
                f"run {label} is incomplete ({run.reason}): it has only what was measured before it stopped"
            )

    models = [gpu_models(m) for m in metas]
    if any(models) and _differ(models):
        out.append("different GPU models: " + _per_run(labels, models, lambda v: ", ".join(v) or "unknown"))
    drivers = [_drivers(m) for m in metas]
    if any(drivers) and _differ(drivers):
        out.append("different GPU drivers: " + _per_run(labels, drivers, lambda v: ", ".join(v) or "unknown"))
    limits = [_power_limits(m) for m in metas]
    if any(limits) and _differ(limits):
        out.append(
            "different GPU power limits: "
            + _per_run(labels, limits, lambda v: ", ".join(f"{w:g} W" for w in v) or "unknown")
        )

    clocks = [_clock_medians(r.windows) for r in runs]
    slow = []
    for phase, reference in clocks[0].items():
        seen = [c.get(phase, math.nan) for c in clocks]
        finite = [v for v in seen if math.isfinite(v)]
        if (
            len(finite) > 1
            and reference > 0
            and max(abs(v / reference - 1) for v in finite) > CLOCK_TOLERANCE
        ):
            slow.append(f"{phase} (" + ", ".join(f"{v:.0f}" for v in seen) + " MHz)")
    if slow:
        out.append(
            f"SM clocks differ by more than {CLOCK_TOLERANCE:.0%} (median per phase, "
            f"{', '.join(labels)}): {_names(slow)}"
        )

    throttled = [_flagged_trials(r.windows, "throttled:") for r in runs]
    uneven = []
    for phase in dict.fromkeys(p for t in throttled for p in t):
        counts = [t.get(phase, (0, 0, set())) for t in throttled]
        if len({c[0] > 0 for c in counts if c[1]}) > 1:
            reasons = sorted(set().union(*(c[2] for c in counts)))
            uneven.append(
                f"{phase} (" + ", ".join(f"{c[0]}/{c[1]}" for c in counts) + f": {', '.join(reasons)})"
            )
    if uneven:
        out.append(
            f"throttled windows in some runs and not others (windows throttled, {', '.join(labels)}): "
            + _names(uneven)
        )

    for flag in QUALITY_FLAGS:
        flagged = [_flagged_trials(r.windows, flag) for r in runs]
        uneven = []
        for phase in dict.fromkeys(p for f in flagged for p in f):
            counts = [f.get(phase, (0, 0, set())) for f in flagged]
            if len({c[0] > 0 for c in counts if c[1]}) > 1:
                uneven.append(f"{phase} (" + ", ".join(f"{c[0]}/{c[1]}" for c in counts) + ")")
        if uneven:
            out.append(
                f"windows flagged {flag} in some runs and not others ({', '.join(labels)}): {_names(uneven)}"
            )

    workloads = [m.workload for m in metas]
    names = [w.name if w else None for w in workloads]
    if _differ(names):
        out.append("different workloads: " + _per_run(labels, names))
    else:
        first = workloads[0].options if workloads[0] else {}
        for label, w in zip(labels[1:], workloads[1:]):
            diff = _option_differences(first, w.options if w else {})
            if diff:
                out.append(f"workload options differ, {labels[0]} vs {label}: {'; '.join(diff)}")

    sources = [tuple(sorted(s.name for s in m.sources)) for m in metas]
    if _differ(sources):
        out.append(
            "different power sources: "
            + _per_run(labels, sources, lambda v: ", ".join(v) or "none (timing only)")
        )
    else:
        for label, meta in zip(labels[1:], metas[1:]):
            mine = {s.name: s.options for s in meta.sources}
            for source in metas[0].sources:
                diff = _option_differences(source.options, mine.get(source.name, {}))
                if diff:
                    out.append(
                        f"power source {source.name!r} options differ, {labels[0]} vs {label}: "
                        + "; ".join(diff)
                    )

    for key in VERSION_KEYS:
        versions = [m.versions.get(key) for m in metas]
        if any(versions) and _differ(versions):
            out.append(
                f"different {key} versions: " + _per_run(labels, versions, lambda v: v or "not installed")
            )
    cpus = [m.host.get("cpu") for m in metas]
    if any(cpus) and _differ(cpus):
        out.append("different host CPUs: " + _per_run(labels, cpus, lambda v: v or "unknown"))
    idle = [bool(m.idle_baseline) for m in metas]
    if _differ(idle):
        out.append(
            "an idle baseline in some runs only (dynamic energy compares only where both have one): "
            + _per_run(labels, idle, lambda v: "measured" if v else "none")
        )
    return out
