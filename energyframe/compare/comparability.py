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


#: one phase's flagged windows in one run: trials flagged, trials in all, the flags seen
FlagCount = tuple[int, int, set[str]]
NO_TRIALS: FlagCount = (0, 0, set())


def _flagged_trials(windows: pd.DataFrame, prefix: str) -> dict[str, FlagCount]:
    """Per phase: windows with a flag starting with ``prefix``, windows in all, and the flags."""
    out: dict[str, FlagCount] = {}
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


def _incomplete_runs(labels: Sequence[str], runs: Sequence[RunResult]) -> list[str]:
    return [
        f"run {label} is incomplete ({run.reason}): it has only what was measured before it stopped"
        for label, run in zip(labels, runs)
        if not run.complete
    ]


def _differing(
    what: str, labels: Sequence[str], values: Sequence[Any], show: Callable[[Any], str]
) -> list[str]:
    """One sentence when some run knows the value and the runs disagree on it."""
    if any(values) and _differ(values):
        return [f"{what}: " + _per_run(labels, values, show)]
    return []


def _joined_or_unknown(values: Sequence[str]) -> str:
    return ", ".join(values) or "unknown"


def _hardware(labels: Sequence[str], metas: Sequence[RunMeta]) -> list[str]:
    """GPU models, drivers and power limits, each reported when the runs disagree."""
    return [
        *_differing("different GPU models", labels, [gpu_models(m) for m in metas], _joined_or_unknown),
        *_differing("different GPU drivers", labels, [_drivers(m) for m in metas], _joined_or_unknown),
        *_differing(
            "different GPU power limits",
            labels,
            [_power_limits(m) for m in metas],
            lambda v: ", ".join(f"{w:g} W" for w in v) or "unknown",
        ),
    ]


def _clock_differs(reference_mhz: float, seen_mhz: Sequence[float]) -> bool:
    """Whether at least two runs have a median and one strays from the first run's by more than
    the tolerance."""
    finite = [v for v in seen_mhz if math.isfinite(v)]
    if len(finite) <= 1 or reference_mhz <= 0:
        return False
    return max(abs(v / reference_mhz - 1) for v in finite) > CLOCK_TOLERANCE


def _clocks(labels: Sequence[str], runs: Sequence[RunResult]) -> list[str]:
    """Phases whose median SM clock differs between runs (the first run's phases, in its order)."""
    clocks = [_clock_medians(r.windows) for r in runs]
    slow = []
    for phase, reference in clocks[0].items():
        seen = [c.get(phase, math.nan) for c in clocks]
        if _clock_differs(reference, seen):
            slow.append(f"{phase} (" + ", ".join(f"{v:.0f}" for v in seen) + " MHz)")
    if not slow:
        return []
    return [
        f"SM clocks differ by more than {CLOCK_TOLERANCE:.0%} (median per phase, "
        f"{', '.join(labels)}): {_names(slow)}"
    ]


def _uneven(flagged: Sequence[Mapping[str, FlagCount]]) -> list[tuple[str, list[FlagCount]]]:
    """The phases flagged in some runs and not in others (among the runs that have the phase),
    with every run's count, in the order the phases first appear."""
    out = []
    for phase in dict.fromkeys(p for f in flagged for p in f):
        counts = [f.get(phase, NO_TRIALS) for f in flagged]
        if len({c[0] > 0 for c in counts if c[1]}) > 1:
            out.append((phase, counts))
    return out


def _fractions(counts: Sequence[FlagCount]) -> str:
    return ", ".join(f"{c[0]}/{c[1]}" for c in counts)


def _throttling(labels: Sequence[str], runs: Sequence[RunResult]) -> list[str]:
    uneven = []
    for phase, counts in _uneven([_flagged_trials(r.windows, "throttled:") for r in runs]):
        reasons = sorted(set().union(*(c[2] for c in counts)))
        uneven.append(f"{phase} ({_fractions(counts)}: {', '.join(reasons)})")
    if not uneven:
        return []
    return [
        f"throttled windows in some runs and not others (windows throttled, {', '.join(labels)}): "
        + _names(uneven)
    ]


def _quality_flags(labels: Sequence[str], runs: Sequence[RunResult]) -> list[str]:
    out = []
    for flag in QUALITY_FLAGS:
        uneven = [
            f"{phase} ({_fractions(counts)})"
            for phase, counts in _uneven([_flagged_trials(r.windows, flag) for r in runs])
        ]
        if uneven:
            out.append(
                f"windows flagged {flag} in some runs and not others ({', '.join(labels)}): {_names(uneven)}"
            )
    return out


def _workloads(labels: Sequence[str], metas: Sequence[RunMeta]) -> list[str]:
    """Different workloads, or else each later run's options that differ from the first's."""
    workloads = [m.workload for m in metas]
    names = [w.name if w else None for w in workloads]
    if _differ(names):
        return ["different workloads: " + _per_run(labels, names)]
    out = []
    first = workloads[0].options if workloads[0] else {}
    for label, w in zip(labels[1:], workloads[1:]):
        diff = _option_differences(first, w.options if w else {})
        if diff:
            out.append(f"workload options differ, {labels[0]} vs {label}: {'; '.join(diff)}")
    return out


def _power_sources(labels: Sequence[str], metas: Sequence[RunMeta]) -> list[str]:
    """Different power sources, or else each later run's source options that differ from the
    first's."""
    sources = [tuple(sorted(s.name for s in m.sources)) for m in metas]
    if _differ(sources):
        return [
            "different power sources: "
            + _per_run(labels, sources, lambda v: ", ".join(v) or "none (timing only)")
        ]
    out = []
    for label, meta in zip(labels[1:], metas[1:]):
        mine = {s.name: s.options for s in meta.sources}
        for source in metas[0].sources:
            diff = _option_differences(source.options, mine.get(source.name, {}))
            if diff:
                out.append(
                    f"power source {source.name!r} options differ, {labels[0]} vs {label}: " + "; ".join(diff)
                )
    return out


def _software(labels: Sequence[str], metas: Sequence[RunMeta]) -> list[str]:
    """Library versions and the host CPU, each reported when the runs disagree."""
    out = []
    for key in VERSION_KEYS:
        versions = [m.versions.get(key) for m in metas]
        out += _differing(f"different {key} versions", labels, versions, lambda v: v or "not installed")
    cpus = [m.host.get("cpu") for m in metas]
    out += _differing("different host CPUs", labels, cpus, lambda v: v or "unknown")
    return out


def _idle_baselines(labels: Sequence[str], metas: Sequence[RunMeta]) -> list[str]:
    idle = [bool(m.idle_baseline) for m in metas]
    if not _differ(idle):
        return []
    return [
        "an idle baseline in some runs only (dynamic energy compares only where both have one): "
        + _per_run(labels, idle, lambda v: "measured" if v else "none")
    ]


def check(labels: Sequence[str], runs: Sequence[RunResult]) -> list[str]:
    """Every reason the runs may not compare, as sentences (empty when none was found)."""
    metas = [r.run_meta for r in runs]
    # one check per way two runs can differ, in report order
    return [
        *_incomplete_runs(labels, runs),
        *_hardware(labels, metas),
        *_clocks(labels, runs),
        *_throttling(labels, runs),
        *_quality_flags(labels, runs),
        *_workloads(labels, metas),
        *_power_sources(labels, metas),
        *_software(labels, metas),
        *_idle_baselines(labels, metas),
    ]
