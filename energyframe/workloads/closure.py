"""Per-layer sums against the whole model: the launch-gap correction and the closure table, in
which every residual carries its cause.

A unit measured in its own CUDA graph repeats its call back to back. A unit of one kernel then
runs without the gap a graph leaves between two *different* kernels (~1.4 µs on an H200), which
it has in the model; units of several kernels keep those gaps in their own graph. With
``kernel_gaps=true`` the whole model's graph is profiled after its windows (CUPTI: kernels K and
their busy time B per forward) and, as in replay (``energyframe/replay/graphgap.py``), the gap
per kernel is ``g = (T - B) / K`` with T the whole model's measured forward. Each single-kernel
unit call gets ``g`` added, at the unit's own mean power (a gap of a microsecond or two is far
too short for clocks or power to change). What remains is the kernels' own time and power alone
against in the model: cache state and clocks, which the closure table names from the run's
settings and the signs it measured.

Pure arithmetic on figures (no torch); tested on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

#: a residual this small (in %, or twice the trials' spread if that is larger) is not attributed
NOISE_FLOOR_PCT = 1.0


@dataclass(frozen=True)
class UnitFigures:
    """One unit, per call, as the closure needs it. Units: s, J.

    Args:
        calls: calls of this unit in the forward that the whole model ran.
        kernels: kernel-launching ops per call (from the decomposition).
        graph: measured as a CUDA graph (an eager unit has its launch overhead instead of gaps).
    """

    name: str
    calls: int
    latency_s: float
    energy_j: float
    kernels: int
    graph: bool

    @property
    def repeats_one_kernel(self) -> bool:
        """Its graph repeats one kernel back to back: no gap between different kernels."""
        return self.graph and self.kernels == 1

    @property
    def power_w(self) -> float:
        return self.energy_j / self.latency_s if self.latency_s > 0 else math.nan


@dataclass(frozen=True)
class WholeFigures:
    """The whole model per forward: measured latency and energy, and (profiled) its kernels and
    their busy time; NaN where not profiled. Units: s, J."""

    latency_s: float
    energy_j: float
    kernels: float = math.nan
    busy_s: float = math.nan
    span_s: float = math.nan


def gap_from_span(latency_s: float, busy_s: float, span_s: float, kernels: float) -> tuple[float, str]:
    """The launch gap per kernel of a CUDA graph and where it came from: ``(T - B) / K`` with T
    the graph's time from the windows (``"graph"``), or, where the profiled kernels' busy time B is
    not below T (the profile ran at other clocks than the windows), ``(span - B) / K`` of the
    profiled replays alone (``"profiled span"``). Units: s; NaN and ``""`` when neither is known,
    never a negative gap (replay/graphgap.py)."""
    if not (kernels and kernels > 0 and math.isfinite(busy_s)):
        return math.nan, ""
    if math.isfinite(latency_s) and latency_s > busy_s:
        return (latency_s - busy_s) / kernels, "graph"
    if math.isfinite(span_s) and span_s > busy_s:
        return (span_s - busy_s) / kernels, "profiled span"
    return math.nan, ""


def gap_per_kernel_s(whole: WholeFigures) -> float:
    """The launch gap per kernel of the whole model's graph (``gap_from_span``). Units: s (NaN
    when not profiled)."""
    return gap_from_span(whole.latency_s, whole.busy_s, whole.span_s, whole.kernels)[0]


def unit_gap_s(unit: UnitFigures, gap_s: float) -> float:
    """The gap added to one call of ``unit``: ``gap_s`` for a single-kernel graph, else 0."""
    if not math.isfinite(gap_s):
        return math.nan
    return gap_s if unit.repeats_one_kernel else 0.0


@dataclass(frozen=True)
class ClosureContext:
    """What the cause of a residual can be read from: the run's settings and what was seen.

    Args:
        l2: ``rotate`` or ``warm`` (weights).
        activations: ``reuse`` or ``rotate`` (inputs).
        weights_bytes: the model's parameters and buffers.
        l2_bytes: the GPU's L2 (0 when unknown, on the CPU).
        eager_units: units that ran eagerly (a capture failed, or no GPU).
        gaps_note: why the launch gaps were not measured ("" when they were).
        spread_pct: the trials' spread (the larger of the median unit's and the whole model's
            energy CV).
        whole_eager: why the whole model ran eagerly on a GPU (its capture failed), "" when it
            ran as one CUDA graph or everything ran on the CPU.
        measured: the residual split by the whole model's profiled graph (``measured_split``),
            "" when it was not profiled.
    """

    l2: str = "rotate"
    activations: str = "reuse"
    weights_bytes: int = 0
    l2_bytes: int = 0
    eager_units: int = 0
    gaps_note: str = ""
    spread_pct: float = math.nan
    whole_eager: str = ""
    measured: str = ""


@dataclass(frozen=True)
class Closure:
    """Σ units against the whole model, with the launch gaps and what remains. Units: s, J, %."""

    sum_latency_s: float
    sum_energy_j: float
    whole_latency_s: float
    whole_energy_j: float
    latency_diff_pct: float
    energy_diff_pct: float
    gap_per_kernel_s: float
    gap_calls: int
    gaps_latency_s: float
    gaps_energy_j: float
    corrected_latency_diff_pct: float
    corrected_energy_diff_pct: float
    residual_cause: str
    rows: tuple[dict, ...]

    def summary(self) -> dict:
        """The summary table's closure columns."""
        return {
            "kernel_gap_s": self.gap_per_kernel_s,
            "gap_calls": self.gap_calls,
            "gaps_latency_s": self.gaps_latency_s,
            "gaps_energy_j": self.gaps_energy_j,
            "gap_corrected_latency_diff_pct": self.corrected_latency_diff_pct,
            "gap_corrected_energy_diff_pct": self.corrected_energy_diff_pct,
            "residual_cause": self.residual_cause,
        }


def _pct(part: float, whole: float) -> float:
    return (
        100.0 * (part / whole - 1.0) if whole and math.isfinite(part) and math.isfinite(whole) else math.nan
    )


def _share(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole and math.isfinite(part) and math.isfinite(whole) else math.nan


def residual_cause(latency_pct: float, energy_pct: float, ctx: ClosureContext) -> str:
    """What a residual of the per-layer sum against the whole model comes from.

    The launch gaps are measured when ``ctx.gaps_note`` is empty and are then not part of the
    residual; what is left is named from the run's settings and the residual's signs (a unit's
    kernels faster or slower alone, its power higher or lower), never more precisely than that.
    A run without energy (timing only) is judged on its latency.
    """
    if not math.isfinite(latency_pct):
        return "not known: a phase has no figures (it failed, or was not measured)"
    has_energy = math.isfinite(energy_pct)
    floor = _noise_floor_pct(ctx)
    if abs(latency_pct) <= floor and (not has_energy or abs(energy_pct) <= floor):
        return (
            f"within the noise (|diff| <= {floor:.3g} %: the larger of {NOISE_FLOOR_PCT:g} % and twice "
            "the trials' spread)"
        )
    # each cause the run's settings and the residual's signs allow, in report order
    causes = _how_it_ran(ctx)
    if abs(latency_pct) > floor:
        causes += _faster_alone(ctx) if latency_pct < 0 else _slower_alone(ctx)
    if has_energy:
        causes += _power_differs(latency_pct, energy_pct, floor)
    else:
        causes.append("no energy measured")
    return "; ".join(causes) or "within the noise"


def _noise_floor_pct(ctx: ClosureContext) -> float:
    """The residual not attributed: the larger of ``NOISE_FLOOR_PCT`` and twice the trials'
    spread (no spread when it is not known). Units: %."""
    spread = ctx.spread_pct if math.isfinite(ctx.spread_pct) else 0.0
    return max(NOISE_FLOOR_PCT, 2.0 * spread)


def _how_it_ran(ctx: ClosureContext) -> list[str]:
    """What the profiled graph measured, and what ran eagerly where the rest ran as graphs."""
    causes = [ctx.measured] if ctx.measured else []
    if ctx.whole_eager:
        causes.append(
            f"the whole model ran eagerly ({ctx.whole_eager}), its time set by the host's launches, "
            "while the units ran as CUDA graphs"
        )
    if ctx.eager_units:
        causes.append(f"{ctx.eager_units} unit(s) ran eagerly, with launch overhead instead of graph gaps")
    return causes


def _faster_alone(ctx: ClosureContext) -> list[str]:
    """Why the units' sum can be shorter than the model: gaps not measured, and caches that a
    unit alone keeps warm (or, with neither setting, clocks)."""
    causes = []
    if ctx.gaps_note and not ctx.measured:
        causes.append(f"launch gaps between different kernels, not measured ({ctx.gaps_note})")
    cache = []
    if ctx.activations == "reuse":
        cache.append(
            "each unit re-reads its own inputs, which stay in L1/L2 (activations=rotate reads copies)"
        )
    if ctx.l2 == "warm":
        cache.append("its weights stay in the L2 (l2=rotate reads copies from memory)")
    causes.append(
        "kernels ran faster alone than in the model" + (": " + "; ".join(cache) if cache else " (clocks)")
    )
    return causes


def _slower_alone(ctx: ClosureContext) -> list[str]:
    """Why the units' sum can be longer than the model: rotated copies read from memory what the
    model finds in the L2 (or, with neither, clocks and the power cap)."""
    causes = []
    fits = ctx.l2 == "rotate" and 0 < ctx.weights_bytes < ctx.l2_bytes
    if fits:
        causes.append(
            f"the model's weights ({ctx.weights_bytes / 1e6:.3g} MB) fit in the L2 "
            f"({ctx.l2_bytes / 1e6:.3g} MB): partly L2-resident in the model, read from "
            "memory by rotated copies (l2=warm bounds it from below)"
        )
    if ctx.activations == "rotate":
        causes.append(
            "rotated input copies come from memory, where in the model a layer reads what "
            "the one before just wrote"
        )
    if not fits and ctx.activations != "rotate" and not ctx.eager_units:
        causes.append("kernels ran slower alone than in the model (clocks, power cap)")
    return causes


def _power_differs(latency_pct: float, energy_pct: float, floor_pct: float) -> list[str]:
    """The units' power alone against the model's, when it differs by more than the floor."""
    power_pct = _pct(1 + energy_pct / 100.0, 1 + latency_pct / 100.0)
    if not abs(power_pct) > floor_pct:  # NaN (no power to compare) included
        return []
    side = "higher" if power_pct > 0 else "lower"
    return [f"units alone drew {abs(power_pct):.3g} % {side} power than the model (clocks, power cap)"]


def measured_split(sum_t: float, whole: WholeFigures, gap_calls: int, gap_s: float, ops: int) -> str:
    """What the whole model's profiled graph says of Σ units against it: the launch gaps the
    single-kernel units leave out, and the rest, which is the units' kernel time against the
    model's. "" when the graph was not profiled."""
    t = whole.latency_s
    if not (math.isfinite(gap_s) and t and math.isfinite(t) and math.isfinite(sum_t)):
        return ""
    left_out = gap_calls * gap_s
    gaps_pct = -100.0 * left_out / t
    kernel_pct = 100.0 * (sum_t + left_out - t) / t
    side = "faster" if kernel_pct < 0 else "slower"
    text = (
        f"measured (the model's graph profiled: {whole.kernels:.4g} kernels, {whole.busy_s * 1e3:.4g} ms busy "
        f"of {t * 1e3:.4g} ms): {gaps_pct:+.3g} % are launch gaps the {gap_calls} single-kernel unit calls "
        f"leave out, {kernel_pct:+.3g} % kernel time: the units' kernels ran {side} alone than the model's"
    )
    if abs(whole.kernels - ops) >= 0.5:
        text += (
            f"; the model's graph runs {whole.kernels:.4g} kernels per forward where the units run {ops} ops"
        )
    return text


@dataclass(frozen=True)
class _UnitsTally:
    """What the units add up to per forward of the whole model. Units: s, J.

    Args:
        gap_calls: calls of single-kernel units (the ones that leave out a launch gap).
        ops: kernel-launching ops.
    """

    latency_s: float
    energy_j: float
    gap_calls: int
    ops: int

    @classmethod
    def of(cls, units: Sequence[UnitFigures]) -> _UnitsTally:
        return cls(
            latency_s=sum(u.calls * u.latency_s for u in units),
            energy_j=sum(u.calls * u.energy_j for u in units),
            gap_calls=sum(u.calls for u in units if u.repeats_one_kernel),
            ops=sum(u.calls * u.kernels for u in units),
        )


def close(
    units: Sequence[UnitFigures],
    whole: WholeFigures,
    ctx: ClosureContext,
    reference: str = "the forward as one CUDA graph",
    add_gaps: bool = True,
) -> Closure:
    """Σ calls x per-call figures against the whole model, with the launch-gap term when the
    whole model's graph was profiled (and ``add_gaps``), and the closure table's rows (term,
    figures, cause). A profiled graph also splits the residual into what it measured
    (``measured_split``), gaps added or not."""
    tally = _UnitsTally.of(units)
    sum_t, sum_e = tally.latency_s, tally.energy_j
    g = gap_per_kernel_s(whole)
    profiled = math.isfinite(g)
    measured = profiled and add_gaps
    gaps_t, gaps_e = _gap_terms(units, g) if measured else (math.nan, math.nan)
    added_t, added_e = (gaps_t, gaps_e) if measured else (0.0, 0.0)
    lat_pct, en_pct = _pct(sum_t, whole.latency_s), _pct(sum_e, whole.energy_j)
    c_lat, c_en = _pct(sum_t + added_t, whole.latency_s), _pct(sum_e + added_e, whole.energy_j)
    split = measured_split(sum_t, whole, tally.gap_calls, g, tally.ops) if profiled else None
    cause = residual_cause(c_lat, c_en, _residual_context(ctx, measured, split))
    rows: list[dict[str, Any]] = [
        _whole_row(whole, reference),
        _sum_row(units, sum_t, sum_e, lat_pct, en_pct),
    ]
    if measured:
        rows.append(_gap_row(whole, gaps_t, gaps_e, tally.gap_calls, g, tally.ops))
    residual_t, residual_e = sum_t + added_t - whole.latency_s, sum_e + added_e - whole.energy_j
    rows.append(_residual_row(residual_t, residual_e, c_lat, c_en, cause))
    return Closure(
        sum_latency_s=sum_t,
        sum_energy_j=sum_e,
        whole_latency_s=whole.latency_s,
        whole_energy_j=whole.energy_j,
        latency_diff_pct=lat_pct,
        energy_diff_pct=en_pct,
        gap_per_kernel_s=g,
        gap_calls=tally.gap_calls,
        gaps_latency_s=gaps_t,
        gaps_energy_j=gaps_e,
        corrected_latency_diff_pct=c_lat,
        corrected_energy_diff_pct=c_en,
        residual_cause=cause,
        rows=tuple(rows),
    )


def _gap_terms(units: Sequence[UnitFigures], gap_s: float) -> tuple[float, float]:
    """The launch gaps the single-kernel unit calls leave out, per forward, each at its unit's
    own power. Units: s, J."""
    gaps_t = sum(u.calls * unit_gap_s(u, gap_s) for u in units)
    gaps_e = sum(u.calls * unit_gap_s(u, gap_s) * u.power_w for u in units if u.repeats_one_kernel)
    return gaps_t, gaps_e


def _residual_context(ctx: ClosureContext, measured: bool, split: str | None) -> ClosureContext:
    """The context the residual's cause is read from: the gaps measured (no note), or why they
    were not; and the split the profiled graph measured (``None``: not profiled)."""
    if measured:
        ctx = replace(ctx, gaps_note="")
    elif not ctx.gaps_note:
        ctx = replace(ctx, gaps_note="kernel_gaps=true measures them")
    if split is not None:
        ctx = replace(ctx, measured=split)
    return ctx


def _whole_row(whole: WholeFigures, reference: str) -> dict[str, Any]:
    return {
        "term": "whole model",
        "latency_s": whole.latency_s,
        "latency_pct": 0.0,
        "energy_j": whole.energy_j,
        "energy_pct": 0.0,
        "cause": f"the reference: {reference}",
    }


def _sum_row(
    units: Sequence[UnitFigures], sum_t: float, sum_e: float, lat_pct: float, en_pct: float
) -> dict[str, Any]:
    return {
        "term": "sum of units",
        "latency_s": sum_t,
        "latency_pct": lat_pct,
        "energy_j": sum_e,
        "energy_pct": en_pct,
        "cause": "each unit measured on its own"
        + (" (a CUDA graph of its calls)" if any(u.graph for u in units) else " (eagerly)")
        + ", times its calls in the forward",
    }


def _residual_row(
    latency_s: float, energy_j: float, lat_pct: float, en_pct: float, cause: str
) -> dict[str, Any]:
    return {
        "term": "residual",
        "latency_s": latency_s,
        "latency_pct": lat_pct,
        "energy_j": energy_j,
        "energy_pct": en_pct,
        "cause": cause,
    }


def _gap_row(whole: WholeFigures, gaps_t: float, gaps_e: float, gap_calls: int, g: float, ops: int) -> dict:
    counted = (
        f"the profile counted {whole.kernels:.4g} kernels per forward, the decomposition {ops} ops"
        if abs(whole.kernels - ops) >= 0.5
        else f"{ops} kernels per forward"
    )
    return {
        "term": "launch gaps (measured)",
        "latency_s": gaps_t,
        "latency_pct": _share(gaps_t, whole.latency_s),
        "energy_j": gaps_e,
        "energy_pct": _share(gaps_e, whole.energy_j),
        "cause": (
            f"{gap_calls} single-kernel unit calls x g = (T - B)/K = {g * 1e6:.3g} us from the whole "
            f"model's graph ({counted}, {whole.busy_s * 1e3:.4g} ms busy): a unit's graph repeats "
            "its kernel without the gap between different kernels; energy at the unit's own power"
        ),
    }
