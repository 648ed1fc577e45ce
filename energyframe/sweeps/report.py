"""``benchmark_report.txt``: the GPUs and warnings, then per parameter point the kernels from
fastest to slowest with their spread, energy, throughput, ncu metrics and check, then the
speedup against the slowest."""

from __future__ import annotations

import math
from collections import defaultdict

from .devices import describe_line
from .results import MISMATCH, KernelResult, SweepResult

RULE = "=" * 110
#: warnings listed in the report's header (all are in benchmark_results.json)
MAX_WARNINGS = 12
THIN = "-" * 110


def _f(value: float | None, scale: float = 1.0, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * scale:.{digits}g}"


def _check(r) -> str:
    status = r.check.get("status", "")
    if status in ("mismatch", "nondeterministic"):
        return f"{status.upper()} ({_f(r.check.get('rel_error'), digits=3)})"
    return status


def warnings(sweep: SweepResult) -> list[str]:
    """The sweep's warnings, then each distinct warning of its configurations."""
    found = list(sweep.meta.get("warnings") or [])
    for r in sweep.results:
        found += r.warnings
    return list(dict.fromkeys(found))


def text_report(sweep: SweepResult) -> str:
    # the report's lines in print order, each part only when the sweep has it
    several = len(sweep.meta.get("devices") or {}) > 1
    lines = _header(sweep)
    by_point: defaultdict[int, list[KernelResult]] = defaultdict(list)
    for r in sweep.results:
        by_point[r.point_index].append(r)
    for point_index in sorted(by_point):
        lines += _point(by_point[point_index], several)
    return "\n".join(lines + _footer(sweep))


def _header(sweep: SweepResult) -> list[str]:
    """The title, what measured the sweep (GPU, power, date, sources, devices), its warnings,
    missing shards and ncu note, and how to read the tables."""
    meta = sweep.meta
    lines = [RULE, "CUDA KERNEL SWEEP REPORT", RULE]
    for key in ("gpu", "power", "date", "sources"):
        if meta.get(key):
            lines.append(f"{key}: {meta[key]}")
    devices = meta.get("devices") or {}
    lines += [describe_line(label, info) for label, info in devices.items()]
    lines += _warning_lines(warnings(sweep))
    if meta.get("missing_shards"):
        lines.append(f"MISSING SHARDS: {meta['missing_shards']} (merged {meta.get('merged_shards')})")
    if meta.get("ncu"):
        lines.append(f"ncu: {meta['ncu']}")
    lines.append(
        "Times and energies are per launch: median over trials (IQR as % of the median); "
        "speedup is against the slowest kernel measured at that point."
    )
    return lines


def _warning_lines(found: list[str]) -> list[str]:
    """The first ``MAX_WARNINGS`` warnings, then how many more there are."""
    lines = [f"WARNING: {w}" for w in found[:MAX_WARNINGS]]
    if len(found) > MAX_WARNINGS:
        lines.append(
            f"WARNING: ... and {len(found) - MAX_WARNINGS} more (each configuration's in benchmark_results.json)"
        )
    return lines


def _point(rows: list[KernelResult], several: bool) -> list[str]:
    """One parameter point's table: the kernels measured, fastest first, then those not
    measured with the reason, then the speedups. ``several``: a GPU column (several devices)."""
    params = ", ".join(f"{k}={v}" for k, v in rows[0].parameters.items())
    lines = ["", f"Parameters: {params}", THIN, _column_titles(several), THIN]
    measured = sorted((r for r in rows if r.measured), key=lambda r: r.latency_s)
    lines += [_measured_line(r, several) for r in measured]
    lines += [_not_measured_line(r) for r in rows if not r.measured]
    return lines + _speedups(measured)


def _column_titles(several: bool) -> str:
    return (
        f"{'Kernel':<24}{'Block':<10}{'Time (ms)':>11}{'IQR %':>7}{'Energy (mJ)':>12}{'IQR %':>7}"
        f"{'n':>3}{'GFLOP/s':>10}{'GFLOP/J':>9}{'Mem %':>7}{'SM %':>7}{'ncu Δ %':>9}"
        + (f"  {'GPU':<6}" if several else "")
        + "  Check"
    )


def _relative_iqr(iqr: float, median: float) -> float:
    """The IQR as a fraction of the median (NaN for a median of 0)."""
    return iqr / median if median else math.nan


def _measured_line(r: KernelResult, several: bool) -> str:
    check = _check(r)
    gpu = f"  {r.device or '-':<6}" if several else ""
    flags = f"  [{', '.join(r.flags)}]" if r.flags else ""
    return (
        f"{r.kernel:<24}{'x'.join(map(str, r.block)):<10}{_f(r.latency_s, 1e3):>11}"
        f"{_f(_relative_iqr(r.latency_iqr_s, r.latency_s), 100, 2):>7}"
        f"{_f(r.energy_j, 1e3):>12}"
        f"{_f(_relative_iqr(r.energy_iqr_j, r.energy_j), 100, 2):>7}{r.trials:>3}"
        f"{_f(r.gflops):>10}{_f(r.gflop_per_j):>9}{_f(r.ncu.get('memory_throughput_pct'), digits=3):>7}"
        f"{_f(r.ncu.get('compute_throughput_pct'), digits=3):>7}{_f(r.ncu_diff_pct, digits=3):>9}{gpu}  {check}{flags}"
    )


def _not_measured_line(r: KernelResult) -> str:
    reason = r.error[:150] or "no reason was recorded"
    return f"{r.kernel:<24}{'x'.join(map(str, r.block)):<10}  {r.status.upper()}: {reason}"


def _speedups(measured: list[KernelResult]) -> list[str]:
    """Each measured kernel's speedup against the slowest (none with fewer than two)."""
    if len(measured) <= 1:
        return []
    slowest = measured[-1].latency_s
    lines = ["", "Speedup vs slowest:"]
    for r in measured:
        lines.append(f"  {r.kernel} ({'x'.join(map(str, r.block))}): {slowest / r.latency_s:.2f}x")
    return lines


def _footer(sweep: SweepResult) -> list[str]:
    """How many configurations were measured, wrong, or failed or not run."""
    failed = [r for r in sweep.results if not r.measured]
    return [
        "",
        RULE,
        f"{len(sweep.results)} configurations: {len(sweep.results) - len(failed)} measured, "
        f"{sum(r.status == MISMATCH for r in sweep.results)} with a wrong result, "
        f"{len(failed)} failed or not run",
        RULE,
        "",
    ]
