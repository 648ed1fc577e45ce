"""The prediction report: the full model measured against Σ (per-call figure × count) of its
replayed ops, for latency and energy; by tier; top kernels; coverage; and the gap analysis — how
long the GPU sat idle between kernels in the trace, and what that idle time costs in energy —
so that the closure gap is explained, not just printed."""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class OpFigures:
    """One replayed op: traced record and measured per-call figures. Units: s, J."""

    record: dict
    phase: str
    latency_s: float
    energy_j: float


def _pct(a: float, b: float) -> float:
    return 100.0 * (a / b - 1.0) if b and math.isfinite(a) and math.isfinite(b) else math.nan


def _with_gaps(energy_j: float, busy_s: float, latency_s: float, idle_power_w: float) -> float:
    if not (math.isfinite(latency_s) and math.isfinite(idle_power_w)):
        return math.nan
    return energy_j + max(0.0, latency_s - busy_s) * idle_power_w


def prediction(
    ops: Sequence[OpFigures],
    kernels: Sequence[dict],
    meta: dict,
    full_latency_s: float,
    full_energy_j: float,
    idle_power_w: float,
    not_rebuilt: Sequence[dict],
    iterations_per_step: int = 1,
    graph_latency_s: float = math.nan,
    graph_energy_j: float = math.nan,
    graph_execution: str | None = None,
) -> dict:
    """Everything comparison_report.json holds (the earlier tool's fields, then more).

    ``graph_*`` are the full model run as one CUDA graph: its kernels back to back, as the
    replayed ops run, so Σ ops predicts it without the host's launch gaps."""
    per_step = max(1, int(iterations_per_step))
    predicted_s = predicted_j = 0.0
    tiers: dict[str, dict] = defaultdict(
        lambda: {"unique_ops": 0, "latency_s": 0.0, "energy_j": 0.0, "traced_us": 0.0}
    )
    for op in ops:
        count = op.record["count_per_iteration"] / per_step
        predicted_s += count * op.latency_s
        predicted_j += count * op.energy_j
        by_tier = op.record.get("gpu_time_by_tier_us") or {"other": 1.0}
        total = sum(by_tier.values()) or 1.0
        for tier_name, us in by_tier.items():
            share = us / total
            t = tiers[tier_name]
            t["unique_ops"] += 1
            t["latency_s"] += share * count * op.latency_s
            t["energy_j"] += share * count * op.energy_j
            t["traced_us"] += us / max(1, meta.get("iterations", 1)) / per_step
    traced_total_us = meta.get("gpu_time_us", 0.0)
    replayed_us = sum(op.record.get("gpu_time_us", 0.0) for op in ops)
    coverage = 100.0 * replayed_us / traced_total_us if traced_total_us else math.nan
    iterations = max(1, meta.get("iterations", 1))
    gaps = meta.get("gaps") or {}
    idle_s = gaps.get("idle_us", math.nan) * 1e-6 / per_step
    busy_s = gaps.get("busy_us", math.nan) * 1e-6 / per_step
    span_s = gaps.get("span_us", math.nan) * 1e-6 / per_step
    report = {
        "full_model_inference_us": full_latency_s * 1e6,
        "predicted_from_kernels_us": predicted_s * 1e6,
        "error_percent": _pct(predicted_s, full_latency_s),
        "full_model_energy_j": full_energy_j,
        "predicted_energy_j": predicted_j,
        "energy_error_percent": _pct(predicted_j, full_energy_j),
        "full_model_graph_inference_us": graph_latency_s * 1e6,
        "graph_error_percent": _pct(predicted_s, graph_latency_s),
        "full_model_graph_energy_j": graph_energy_j,
        "graph_energy_error_percent": _pct(predicted_j, graph_energy_j),
        "full_model_graph_execution": graph_execution,
        "coverage_percent_of_gpu_time": coverage,
        "tier_breakdown": {
            name: {
                "unique_ops": t["unique_ops"],
                "predicted_us": t["latency_s"] * 1e6,
                "predicted_energy_j": t["energy_j"],
                "traced_us": t["traced_us"],
                "percentage_of_predicted": 100.0 * t["latency_s"] / predicted_s if predicted_s else math.nan,
            }
            for name, t in sorted(tiers.items())
        },
        "top_kernels": [
            {
                "name": k["name"],
                "tier": k["tier"],
                "count": k["count_per_iteration"] / per_step,
                "total_us": k["total_us"] / iterations / per_step,
            }
            for k in list(kernels)[:20]
        ],
        "gap_analysis": {
            "traced_gpu_span_us": span_s * 1e6,
            "traced_gpu_busy_us": busy_s * 1e6,
            "traced_gpu_idle_us": idle_s * 1e6,
            "idle_power_w": idle_power_w,
            "idle_energy_j": idle_s * idle_power_w if math.isfinite(idle_power_w) else math.nan,
            "predicted_plus_idle_us": (predicted_s + idle_s) * 1e6,
            "predicted_plus_idle_error_percent": _pct(predicted_s + idle_s, full_latency_s),
            "predicted_plus_idle_energy_j": predicted_j
            + (idle_s * idle_power_w if math.isfinite(idle_power_w) else 0.0),
            "predicted_plus_idle_energy_error_percent": _pct(
                predicted_j + (idle_s * idle_power_w if math.isfinite(idle_power_w) else math.nan),
                full_energy_j,
            ),
            # the energy the ops predict plus idle power over the time they leave out of the
            # *measured* latency: does the idle gap explain the energy, where latency is known?
            "energy_at_measured_latency_j": _with_gaps(
                predicted_j, predicted_s, full_latency_s, idle_power_w
            ),
            "energy_at_measured_latency_error_percent": _pct(
                _with_gaps(predicted_j, predicted_s, full_latency_s, idle_power_w), full_energy_j
            ),
            "host_overhead_us": (full_latency_s - graph_latency_s) * 1e6,
            "host_overhead_energy_j": full_energy_j - graph_energy_j,
            "explanation": (
                "the trace's GPU sat idle between kernels for this long per iteration (launch and host gaps); "
                "replayed ops run back to back in CUDA graphs, so their sum leaves that time out; "
                "host_overhead is the full model's eager time less its time as one CUDA graph "
                "(the profiler slows the host, so the traced idle time overstates it)"
            ),
        },
        "not_rebuilt": list(not_rebuilt),
        "not_rebuilt_share_percent_of_gpu_time": sum(r.get("share_percent", 0.0) for r in not_rebuilt),
    }
    return report


def report_png(report: dict, title: str) -> bytes:
    """Bars: measured against predicted (by tier), and predicted plus the traced idle gaps."""
    from ..plots import pyplot

    plt = pyplot("the prediction plot")

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    tiers = report["tier_breakdown"]
    colours = {"gemm": "#4C72B0", "memcpy/memset": "#DD8452", "other": "#55A868"}
    for ax, (unit, measured, graph, tier_key, idle_key, scale, label) in zip(
        axes,
        [
            (
                "ms",
                report["full_model_inference_us"],
                report.get("full_model_graph_inference_us", math.nan),
                "predicted_us",
                "traced_gpu_idle_us",
                1e-3,
                "latency per iteration",
            ),
            (
                "J",
                report["full_model_energy_j"],
                report.get("full_model_graph_energy_j", math.nan),
                "predicted_energy_j",
                "idle_energy_j",
                1.0,
                "energy per iteration",
            ),
        ],
    ):
        ax.bar(0, measured * scale, color="0.35", label="measured (full model)")
        if math.isfinite(graph):
            ax.bar(-1, graph * scale, color="0.6", label="measured (full model, one CUDA graph)")
        bottom = 0.0
        for name, t in tiers.items():
            value = t[tier_key] * scale
            ax.bar(1, value, bottom=bottom, color=colours.get(name, "0.6"), label=f"predicted: {name}")
            bottom += value
        idle = report["gap_analysis"][idle_key]
        if idle == idle:  # not NaN
            ax.bar(
                1,
                idle * scale,
                bottom=bottom,
                color="white",
                edgecolor="0.3",
                hatch="//",
                label="idle gaps in the trace",
            )
        if math.isfinite(graph):
            ax.set_xticks([-1, 0, 1], ["measured\n(graph)", "measured", "predicted"])
        else:
            ax.set_xticks([0, 1], ["measured", "predicted"])
        ax.set_ylabel(f"{label} ({unit})")
    axes[0].legend(fontsize=8, loc="upper right")
    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()
