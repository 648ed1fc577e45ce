"""The prediction report: the full model measured against Σ (per-call figure × count) of its
replayed ops, for latency and energy; by tier; top kernels; coverage; and the gap analysis — how
long the GPU sat idle between kernels in the trace, and what that idle time costs in energy —
so that the closure gap is explained, not just printed. For a trace of one rank of several, the
collectives are their own tier, ``communication``, replayed as real collectives: the report
gives their share of the prediction and of the traced GPU time."""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ..workloads.closure import gap_from_span
from .comm import TIER_COMMUNICATION


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


def with_kernel_gaps(
    predicted_s: float, predicted_j: float, kernels: float, gap_s: float, idle_power_w: float
) -> dict:
    """The replayed ops' sum with ``kernels`` launch gaps of ``gap_s`` added: the time, and the
    energy with the gaps at the ops' own mean power (a gap of a microsecond or two is far too
    short for clocks or power to change) and, as a lower bound, at the idle baseline's power.
    Units: s, J."""
    gaps_s = kernels * gap_s if math.isfinite(gap_s) and kernels else math.nan
    ops_power_w = predicted_j / predicted_s if predicted_s > 0 else math.nan
    return {
        "gaps_s": gaps_s,
        "latency_s": predicted_s + gaps_s,
        "energy_j": predicted_j + gaps_s * ops_power_w,
        "kernel_gaps_energy_at_idle_j": predicted_j + gaps_s * idle_power_w,
    }


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
    graph_kernels: float = math.nan,
    graph_busy_s: float = math.nan,
    kernel_gap_option_s: float | None = None,
    graph_span_s: float = math.nan,
    collectives: Sequence[OpFigures] = (),
) -> dict:
    """Everything comparison_report.json holds (the earlier tool's fields, then more).

    ``graph_*`` are the full model run as one CUDA graph: its kernels back to back, as the
    replayed ops run, so Σ ops predicts it without the host's launch gaps. ``graph_kernels``
    and ``graph_busy_s`` (per inference, from profiling the graph's replays) give the launch
    gap per kernel inside the graph; ``kernel_gap_option_s`` replaces it (a gap measured on
    another model), applied to the graph's kernels or, without a graph, to the trace's.
    ``collectives`` are the replayed collectives (records of collectives.jsonl): tier
    ``communication``."""
    per_step = max(1, int(iterations_per_step))
    predicted_s = predicted_j = 0.0
    tiers: dict[str, dict] = defaultdict(
        lambda: {"unique_ops": 0, "latency_s": 0.0, "energy_j": 0.0, "traced_us": 0.0}
    )
    comm_s = comm_j = comm_calls = 0.0
    for c in collectives:  # their own tier: communication
        count = c.record["count_per_iteration"] / per_step
        comm_s += count * c.latency_s
        comm_j += count * c.energy_j
        comm_calls += count
        t = tiers[TIER_COMMUNICATION]
        t["unique_ops"] += 1
        t["latency_s"] += count * c.latency_s
        t["energy_j"] += count * c.energy_j
        t["traced_us"] += c.record.get("gpu_time_us", 0.0) / max(1, meta.get("iterations", 1)) / per_step
    predicted_s, predicted_j = comm_s, comm_j
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
    replayed_us = sum(op.record.get("gpu_time_us", 0.0) for op in [*ops, *collectives])
    coverage = 100.0 * replayed_us / traced_total_us if traced_total_us else math.nan
    iterations = max(1, meta.get("iterations", 1))
    gaps = meta.get("gaps") or {}
    idle_s = gaps.get("idle_us", math.nan) * 1e-6 / per_step
    busy_s = gaps.get("busy_us", math.nan) * 1e-6 / per_step
    span_s = gaps.get("span_us", math.nan) * 1e-6 / per_step
    measured_gap_s, measured_from = gap_from_span(graph_latency_s, graph_busy_s, graph_span_s, graph_kernels)
    gap_s = kernel_gap_option_s if kernel_gap_option_s is not None else measured_gap_s
    graph_counted = math.isfinite(graph_kernels) and graph_kernels > 0
    launches = graph_kernels if graph_counted else meta.get("kernel_launches", 0) / iterations / per_step
    launches = launches or math.nan
    gapped = with_kernel_gaps(predicted_s, predicted_j, launches, gap_s, idle_power_w)
    traced_comm_us = (meta.get("gpu_time_by_tier_us") or {}).get(TIER_COMMUNICATION, 0.0)
    report = {
        "rank": meta.get("rank", 0),
        "world_size": meta.get("world_size", 1),
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
        "predicted_with_kernel_gaps_us": gapped["latency_s"] * 1e6,
        "kernel_gap_error_percent": _pct(gapped["latency_s"], graph_latency_s),
        "predicted_with_kernel_gaps_energy_j": gapped["energy_j"],
        "kernel_gap_energy_error_percent": _pct(gapped["energy_j"], graph_energy_j),
        "kernel_gap_model": {
            "kernels_per_inference": launches,
            "kernels_counted_in": "graph" if graph_counted else "trace",
            "graph_kernel_busy_us": graph_busy_s * 1e6,
            "measured_gap_per_kernel_us": measured_gap_s * 1e6,
            "gap_per_kernel_us": gap_s * 1e6,
            "gap_source": "option" if kernel_gap_option_s is not None else (measured_from or "graph"),
            "kernel_gaps_us": gapped["gaps_s"] * 1e6,
            "sum_vs_graph_kernels_percent": _pct(predicted_s, graph_busy_s),
            "kernel_gaps_energy_at_idle_j": gapped["kernel_gaps_energy_at_idle_j"],
            "kernel_gaps_energy_at_idle_error_percent": _pct(
                gapped["kernel_gaps_energy_at_idle_j"], graph_energy_j
            ),
            "explanation": (
                "a CUDA graph starts each kernel a short time after the previous one ends; the "
                "replayed ops' sum leaves that out. gap per kernel = (graph time - its kernels' busy "
                "time, profiled) / its kernels; the prediction adds kernels x gap, at the ops' mean "
                "power (kernel_gaps_energy_at_idle_j: at idle power, a lower bound)"
            ),
        },
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
        "communication": {
            "predicted_us": comm_s * 1e6,
            "predicted_energy_j": comm_j,
            "share_of_predicted_percent": 100.0 * comm_s / predicted_s if predicted_s else math.nan,
            "energy_share_of_predicted_percent": 100.0 * comm_j / predicted_j if predicted_j else math.nan,
            "calls_per_iteration": comm_calls,
            "traced_us": traced_comm_us / iterations / per_step,
            "traced_share_percent_of_gpu_time": (
                100.0 * traced_comm_us / traced_total_us if traced_total_us else math.nan
            ),
            "collectives": [
                {
                    "kind": c.record["kind"],
                    "shapes": c.record.get("shapes"),
                    "dtype": c.record.get("dtype"),
                    "bytes": c.record.get("bytes"),
                    "count": c.record["count_per_iteration"] / per_step,
                    "latency_us": c.latency_s * 1e6,
                    "energy_j": c.energy_j,
                    "traced_us_per_call": (
                        c.record.get("gpu_time_us", 0.0) / max(1, c.record.get("count", 1))
                    ),
                }
                for c in collectives
            ],
        },
        "not_rebuilt": list(not_rebuilt),
        "not_rebuilt_share_percent_of_gpu_time": sum(r.get("share_percent", 0.0) for r in not_rebuilt),
    }
    return report


def report_png(report: dict, title: str) -> bytes:
    """Bars: measured against predicted (by tier), and predicted plus the traced idle gaps."""
    from ..report.plots import pyplot

    plt = pyplot("the prediction plot")

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    tiers = report["tier_breakdown"]
    colours = {
        "gemm": "#4C72B0",
        "memcpy/memset": "#DD8452",
        "other": "#55A868",
        TIER_COMMUNICATION: "#C44E52",
    }
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
