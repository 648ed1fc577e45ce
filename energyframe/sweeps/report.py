"""``benchmark_report.txt``: the GPUs and warnings, then per parameter point the kernels from
fastest to slowest with their spread, energy, throughput, ncu metrics and check, then the
speedup against the slowest."""

from __future__ import annotations

import math
from collections import defaultdict

from .devices import describe_line
from .results import MISMATCH, SweepResult

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


def text_report(sweep: SweepResult) -> str:  # noqa: C901 (the report's lines in print order, each part only when the sweep has it)
    meta = sweep.meta
    lines = [RULE, "CUDA KERNEL SWEEP REPORT", RULE]
    for key in ("gpu", "power", "date", "sources"):
        if meta.get(key):
            lines.append(f"{key}: {meta[key]}")
    devices = meta.get("devices") or {}
    lines += [describe_line(label, info) for label, info in devices.items()]
    found = warnings(sweep)
    lines += [f"WARNING: {w}" for w in found[:MAX_WARNINGS]]
    if len(found) > MAX_WARNINGS:
        lines.append(
            f"WARNING: ... and {len(found) - MAX_WARNINGS} more (each configuration's in benchmark_results.json)"
        )
    if meta.get("missing_shards"):
        lines.append(f"MISSING SHARDS: {meta['missing_shards']} (merged {meta.get('merged_shards')})")
    if meta.get("ncu"):
        lines.append(f"ncu: {meta['ncu']}")
    lines.append(
        "Times and energies are per launch: median over trials (IQR as % of the median); "
        "speedup is against the slowest kernel measured at that point."
    )
    several = len(devices) > 1
    by_point = defaultdict(list)
    for r in sweep.results:
        by_point[r.point_index].append(r)
    for point_index in sorted(by_point):
        rows = by_point[point_index]
        params = ", ".join(f"{k}={v}" for k, v in rows[0].parameters.items())
        lines += ["", f"Parameters: {params}", THIN]
        lines.append(
            f"{'Kernel':<24}{'Block':<10}{'Time (ms)':>11}{'IQR %':>7}{'Energy (mJ)':>12}{'IQR %':>7}"
            f"{'n':>3}{'GFLOP/s':>10}{'GFLOP/J':>9}{'Mem %':>7}{'SM %':>7}{'ncu Δ %':>9}"
            + (f"  {'GPU':<6}" if several else "")
            + "  Check"
        )
        lines.append(THIN)
        measured = sorted((r for r in rows if r.measured), key=lambda r: r.latency_s)
        for r in measured:
            check = _check(r)
            gpu = f"  {r.device or '-':<6}" if several else ""
            flags = f"  [{', '.join(r.flags)}]" if r.flags else ""
            lines.append(
                f"{r.kernel:<24}{'x'.join(map(str, r.block)):<10}{_f(r.latency_s, 1e3):>11}"
                f"{_f(r.latency_iqr_s / r.latency_s if r.latency_s else math.nan, 100, 2):>7}"
                f"{_f(r.energy_j, 1e3):>12}"
                f"{_f(r.energy_iqr_j / r.energy_j if r.energy_j else math.nan, 100, 2):>7}{r.trials:>3}"
                f"{_f(r.gflops):>10}{_f(r.gflop_per_j):>9}{_f(r.ncu.get('memory_throughput_pct'), digits=3):>7}"
                f"{_f(r.ncu.get('compute_throughput_pct'), digits=3):>7}{_f(r.ncu_diff_pct, digits=3):>9}{gpu}  {check}{flags}"
            )
        for r in rows:
            if not r.measured:
                reason = r.error[:150] or "no reason was recorded"
                lines.append(f"{r.kernel:<24}{'x'.join(map(str, r.block)):<10}  {r.status.upper()}: {reason}")
        if len(measured) > 1:
            slowest = measured[-1].latency_s
            lines.append("")
            lines.append("Speedup vs slowest:")
            for r in measured:
                lines.append(f"  {r.kernel} ({'x'.join(map(str, r.block))}): {slowest / r.latency_s:.2f}x")
    failed = [r for r in sweep.results if not r.measured]
    lines += [
        "",
        RULE,
        f"{len(sweep.results)} configurations: {len(sweep.results) - len(failed)} measured, "
        f"{sum(r.status == MISMATCH for r in sweep.results)} with a wrong result, "
        f"{len(failed)} failed or not run",
        RULE,
        "",
    ]
    return "\n".join(lines)
