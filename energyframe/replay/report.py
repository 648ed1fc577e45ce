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
from collections.abc import Mapping, Sequence
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


@dataclass
class _TierSums:
    """One tier's share of the prediction, summed as the ops are added. Units: s, J, µs."""

    unique_ops: int = 0
    latency_s: float = 0.0
    energy_j: float = 0.0
    traced_us: float = 0.0

    def add(self, latency_s: float, energy_j: float, traced_us: float) -> None:
        self.unique_ops += 1
        self.latency_s += latency_s
        self.energy_j += energy_j
        self.traced_us += traced_us


@dataclass(frozen=True)
class _PerStep:
    """The trace counts per traced iteration; the replay measures per phase step, which may run
    several iterations (``iterations_per_step``): every traced figure is divided by both."""

    iterations: int
    per_step: int

    def calls(self, record: Mapping) -> float:
        return record["count_per_iteration"] / self.per_step

    def traced_us(self, total_us: float) -> float:
        return total_us / self.iterations / self.per_step


@dataclass(frozen=True)
class _Sums:
    """Σ (per-call figure × count): the collectives alone, and the prediction (the collectives,
    then the ops, added in that order). Units: s, J."""

    communication_s: float
    communication_j: float
    communication_calls: float
    predicted_s: float
    predicted_j: float


def _summed(
    ops: Sequence[OpFigures], collectives: Sequence[OpFigures], per: _PerStep, tiers: dict[str, _TierSums]
) -> _Sums:
    """The prediction's sums; each op also tallied in its tiers (by its traced GPU time in each),
    each collective in tier ``communication``."""
    comm_s = comm_j = comm_calls = 0.0
    for c in collectives:
        count = per.calls(c.record)
        comm_s += count * c.latency_s
        comm_j += count * c.energy_j
        comm_calls += count
        tiers[TIER_COMMUNICATION].add(
            count * c.latency_s, count * c.energy_j, per.traced_us(c.record.get("gpu_time_us", 0.0))
        )
    predicted_s, predicted_j = comm_s, comm_j
    for op in ops:
        count = per.calls(op.record)
        predicted_s += count * op.latency_s
        predicted_j += count * op.energy_j
        by_tier = op.record.get("gpu_time_by_tier_us") or {"other": 1.0}
        total = sum(by_tier.values()) or 1.0
        for tier_name, us in by_tier.items():
            share = us / total
            tiers[tier_name].add(share * count * op.latency_s, share * count * op.energy_j, per.traced_us(us))
    return _Sums(comm_s, comm_j, comm_calls, predicted_s, predicted_j)


@dataclass(frozen=True)
class _KernelGaps:
    """The launch gap per kernel and the kernels it is added for. Units: s."""

    launches: float
    counted_in: str
    measured_gap_s: float
    gap_s: float
    source: str
    gapped: dict


def _kernel_gaps(
    sums: _Sums,
    meta: Mapping,
    per: _PerStep,
    idle_power_w: float,
    *,
    graph_latency_s: float,
    graph_kernels: float,
    graph_busy_s: float,
    graph_span_s: float,
    kernel_gap_option_s: float | None,
) -> _KernelGaps:
    """The gap measured in the full model's graph, or the one given as an option; the kernels
    counted in the graph when it was profiled, else in the trace."""
    measured_gap_s, measured_from = gap_from_span(graph_latency_s, graph_busy_s, graph_span_s, graph_kernels)
    gap_s = kernel_gap_option_s if kernel_gap_option_s is not None else measured_gap_s
    graph_counted = math.isfinite(graph_kernels) and graph_kernels > 0
    launches = (
        graph_kernels if graph_counted else meta.get("kernel_launches", 0) / per.iterations / per.per_step
    )
    launches = launches or math.nan
    return _KernelGaps(
        launches=launches,
        counted_in="graph" if graph_counted else "trace",
        measured_gap_s=measured_gap_s,
        gap_s=gap_s,
        source="option" if kernel_gap_option_s is not None else (measured_from or "graph"),
        gapped=with_kernel_gaps(sums.predicted_s, sums.predicted_j, launches, gap_s, idle_power_w),
    )


def _kernel_gap_model(gaps: _KernelGaps, sums: _Sums, graph_busy_s: float, graph_energy_j: float) -> dict:
    gapped = gaps.gapped
    return {
        "kernels_per_inference": gaps.launches,
        "kernels_counted_in": gaps.counted_in,
        "graph_kernel_busy_us": graph_busy_s * 1e6,
        "measured_gap_per_kernel_us": gaps.measured_gap_s * 1e6,
        "gap_per_kernel_us": gaps.gap_s * 1e6,
        "gap_source": gaps.source,
        "kernel_gaps_us": gapped["gaps_s"] * 1e6,
        "sum_vs_graph_kernels_percent": _pct(sums.predicted_s, graph_busy_s),
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
    }


def _gap_analysis(
    sums: _Sums,
    meta: Mapping,
    per: _PerStep,
    idle_power_w: float,
    *,
    full_latency_s: float,
    full_energy_j: float,
    graph_latency_s: float,
    graph_energy_j: float,
) -> dict:
    """The trace's idle GPU time per step, and what adding it (at idle power) does to the
    prediction's error."""
    predicted_s, predicted_j = sums.predicted_s, sums.predicted_j
    gaps = meta.get("gaps") or {}
    idle_s = gaps.get("idle_us", math.nan) * 1e-6 / per.per_step
    busy_s = gaps.get("busy_us", math.nan) * 1e-6 / per.per_step
    span_s = gaps.get("span_us", math.nan) * 1e-6 / per.per_step
    idle_power_known = math.isfinite(idle_power_w)
    return {
        "traced_gpu_span_us": span_s * 1e6,
        "traced_gpu_busy_us": busy_s * 1e6,
        "traced_gpu_idle_us": idle_s * 1e6,
        "idle_power_w": idle_power_w,
        "idle_energy_j": idle_s * idle_power_w if idle_power_known else math.nan,
        "predicted_plus_idle_us": (predicted_s + idle_s) * 1e6,
        "predicted_plus_idle_error_percent": _pct(predicted_s + idle_s, full_latency_s),
        "predicted_plus_idle_energy_j": predicted_j + (idle_s * idle_power_w if idle_power_known else 0.0),
        "predicted_plus_idle_energy_error_percent": _pct(
            predicted_j + (idle_s * idle_power_w if idle_power_known else math.nan),
            full_energy_j,
        ),
        # the energy the ops predict plus idle power over the time they leave out of the
        # *measured* latency: does the idle gap explain the energy, where latency is known?
        "energy_at_measured_latency_j": _with_gaps(predicted_j, predicted_s, full_latency_s, idle_power_w),
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
    }


def _share_pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else math.nan


def _communication(sums: _Sums, collectives: Sequence[OpFigures], meta: Mapping, per: _PerStep) -> dict:
    """The collectives' share of the prediction and of the traced GPU time, and each one's figures."""
    traced_total_us = meta.get("gpu_time_us", 0.0)
    traced_comm_us = (meta.get("gpu_time_by_tier_us") or {}).get(TIER_COMMUNICATION, 0.0)
    return {
        "predicted_us": sums.communication_s * 1e6,
        "predicted_energy_j": sums.communication_j,
        "share_of_predicted_percent": _share_pct(sums.communication_s, sums.predicted_s),
        "energy_share_of_predicted_percent": _share_pct(sums.communication_j, sums.predicted_j),
        "calls_per_iteration": sums.communication_calls,
        "traced_us": per.traced_us(traced_comm_us),
        "traced_share_percent_of_gpu_time": _share_pct(traced_comm_us, traced_total_us),
        "collectives": [
            {
                "kind": c.record["kind"],
                "shapes": c.record.get("shapes"),
                "dtype": c.record.get("dtype"),
                "bytes": c.record.get("bytes"),
                "count": per.calls(c.record),
                "latency_us": c.latency_s * 1e6,
                "energy_j": c.energy_j,
                "traced_us_per_call": c.record.get("gpu_time_us", 0.0) / max(1, c.record.get("count", 1)),
            }
            for c in collectives
        ],
    }


def _tier_breakdown(tiers: Mapping[str, _TierSums], predicted_s: float) -> dict:
    return {
        name: {
            "unique_ops": t.unique_ops,
            "predicted_us": t.latency_s * 1e6,
            "predicted_energy_j": t.energy_j,
            "traced_us": t.traced_us,
            "percentage_of_predicted": _share_pct(t.latency_s, predicted_s),
        }
        for name, t in sorted(tiers.items())
    }


def _top_kernels(kernels: Sequence[dict], per: _PerStep) -> list[dict]:
    return [
        {
            "name": k["name"],
            "tier": k["tier"],
            "count": per.calls(k),
            "total_us": per.traced_us(k["total_us"]),
        }
        for k in list(kernels)[:20]
    ]


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
    per = _PerStep(iterations=max(1, meta.get("iterations", 1)), per_step=max(1, int(iterations_per_step)))
    tiers: dict[str, _TierSums] = defaultdict(_TierSums)
    sums = _summed(ops, collectives, per, tiers)
    predicted_s, predicted_j = sums.predicted_s, sums.predicted_j
    gaps = _kernel_gaps(
        sums,
        meta,
        per,
        idle_power_w,
        graph_latency_s=graph_latency_s,
        graph_kernels=graph_kernels,
        graph_busy_s=graph_busy_s,
        graph_span_s=graph_span_s,
        kernel_gap_option_s=kernel_gap_option_s,
    )
    replayed_us = sum(op.record.get("gpu_time_us", 0.0) for op in [*ops, *collectives])
    return {
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
        "predicted_with_kernel_gaps_us": gaps.gapped["latency_s"] * 1e6,
        "kernel_gap_error_percent": _pct(gaps.gapped["latency_s"], graph_latency_s),
        "predicted_with_kernel_gaps_energy_j": gaps.gapped["energy_j"],
        "kernel_gap_energy_error_percent": _pct(gaps.gapped["energy_j"], graph_energy_j),
        "kernel_gap_model": _kernel_gap_model(gaps, sums, graph_busy_s, graph_energy_j),
        "coverage_percent_of_gpu_time": _share_pct(replayed_us, meta.get("gpu_time_us", 0.0)),
        "tier_breakdown": _tier_breakdown(tiers, predicted_s),
        "top_kernels": _top_kernels(kernels, per),
        "gap_analysis": _gap_analysis(
            sums,
            meta,
            per,
            idle_power_w,
            full_latency_s=full_latency_s,
            full_energy_j=full_energy_j,
            graph_latency_s=graph_latency_s,
            graph_energy_j=graph_energy_j,
        ),
        "communication": _communication(sums, collectives, meta, per),
        "not_rebuilt": list(not_rebuilt),
        "not_rebuilt_share_percent_of_gpu_time": sum(r.get("share_percent", 0.0) for r in not_rebuilt),
    }


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
