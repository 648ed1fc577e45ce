"""Pipelines: ordered stages (each a workload) measured in turn, with pipeline totals.

Per stage: latency, energy and mean power per call (or per item), times its count. Per
pipeline (docs/pipelines.md has the formulas):

- sum of latencies and of energies,
- dynamic energy: the energy minus idle power times the latency,
- energy under full pipeline parallelism: every stage on its own device, throughput set by the
  slowest stage (t_max), each device idling at idle power while it waits, per item
  ``sum_i E_i + P_idle * sum_i (t_max - t_i)`` (a stage counted n times is n devices).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import WorkloadError
from ..model import DerivedTable, Phase
from ..plugin import Workload

#: what a pipeline of many short phases asks of a run unless the user says otherwise
#: (calibration runs each phase for 0.15 of a window first, which warms it up; a 1-s idle
#: baseline holds 10 counter ticks and 50 of the 20-ms samples)
PIPELINE_RUN_DEFAULTS = {"min_window_periods": 2.0, "trials": 3, "warmup_s": 0.0, "idle_s": 1.0}


@dataclass(frozen=True)
class StageFigures:
    """One stage of a pipeline, per call. Units: s, J, W."""

    name: str
    count: int
    latency_s: float
    energy_j: float
    power_w: float = math.nan


def pipeline_totals(stages: Sequence[StageFigures], idle_power_w: float) -> dict[str, float]:
    """Totals per pipeline item (one pass through every stage, each ``count`` times)."""
    if not stages:
        return {}
    sum_latency = sum(s.count * s.latency_s for s in stages)
    sum_energy = sum(s.count * s.energy_j for s in stages)
    t_max = max(s.latency_s for s in stages)
    waiting = sum(s.count * (t_max - s.latency_s) for s in stages)
    return {
        "sum_latency_s": sum_latency,
        "sum_energy_j": sum_energy,
        "dynamic_energy_j": sum_energy - idle_power_w * sum_latency,
        "parallel_energy_j": sum_energy + idle_power_w * waiting,
        "parallel_throughput_per_s": 1.0 / t_max if t_max > 0 else math.nan,
        "slowest_stage_s": t_max,
        "idle_power_w": idle_power_w,
    }


def stage_figures(result, phase: str, count: int = 1, channel: str | None = None) -> tuple[StageFigures, Any]:
    """Median per-call figures of a phase on ``channel`` (the first primary channel by default)."""
    rows = _on_channel([s for s in result.summaries if s.phase == phase], channel, result)
    if not rows:
        return StageFigures(phase, count, math.nan, math.nan), None
    s = rows[0]
    return StageFigures(
        phase, count, s.time_per_iter_s.median, s.energy_per_iter_j.median, s.mean_power_w.median
    ), s


def _on_channel(rows: list, channel: str | None, result) -> list:
    """A phase's summaries on ``channel``; by default those without a channel (timing only) or
    on a primary channel, or all of them where none is."""
    if channel is not None:
        return [s for s in rows if s.channel == channel]
    primary = set(result.meta.get("primary_channels", []))
    return [s for s in rows if not s.channel or s.channel in primary] or rows


def idle_power(result, channel: str | None = None) -> float:
    idle = result.meta.get("idle_baseline", {})
    if channel is None:
        primary = result.meta.get("primary_channels", [])
        channel = primary[0] if primary else None
    entry = idle.get(channel) if channel else None
    return float(entry["power_w"]) if entry and entry.get("power_w") is not None else math.nan


@dataclass
class Stage:
    """A pipeline stage: a workload (its phases are measured), counted ``count`` times.
    ``workload`` is ``None`` for a stage that is only tabulated (a per-layer unit, measured by
    the per-layer workload itself)."""

    name: str
    workload: Workload | None
    count: int = 1
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _runnable(stage: Stage) -> Workload:
    if stage.workload is None:
        raise WorkloadError(f"pipeline stage {stage.name!r} has no workload to run")
    return stage.workload


class Pipeline(Workload):
    """Stages measured one after another; totals as if they ran as a pipeline.

    Python API, as in the earlier tool::

        pipe = Pipeline("MyPipeline_N1", [("conv3x3", ConvKernel(...)), ("fc", MatmulKernel(...))])
        ef.run(pipe, power=["nvml"])
    """

    DESCRIPTION = "an ordered list of stages (workloads) with pipeline totals"

    def __init__(
        self,
        name: str | None = None,
        stages: Sequence[Stage | tuple[str, Workload]] = (),
        channel: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        self.stages = [s if isinstance(s, Stage) else Stage(s[0], s[1]) for s in stages]
        self.channel = channel

    def run_defaults(self) -> Mapping[str, Any]:
        return dict(PIPELINE_RUN_DEFAULTS)

    def setup(self) -> None:
        for stage in self.stages:
            _runnable(stage).setup()

    def teardown(self) -> None:
        for stage in self.stages:
            _runnable(stage).teardown()

    def phases(self) -> Sequence[Phase]:
        out = []
        self._stage_phase: dict[str, str] = {}
        for stage in self.stages:
            phases = list(_runnable(stage).phases())
            for phase in phases:
                name = stage.name if len(phases) == 1 else f"{stage.name}/{phase.name}"
                self._stage_phase.setdefault(stage.name, name)  # a stage's first phase stands for it
                out.append(dataclasses.replace(phase, name=name))
        return out

    def derive(self, result) -> Sequence[DerivedTable]:
        names = getattr(self, "_stage_phase", {})
        return self.pipeline_tables(
            result, [(stage, names.get(stage.name, stage.name)) for stage in self.stages]
        )

    def pipeline_tables(
        self, result, stage_phases, extra: Mapping[str, Any] | None = None
    ) -> list[DerivedTable]:
        figures, rows = [], []
        for stage, phase in stage_phases:
            fig, summary = stage_figures(result, phase, stage.count, self.channel)
            figures.append(fig)
            rows.append(
                {
                    "stage": stage.name,
                    **stage.info,
                    "count": stage.count,
                    "latency_s": fig.latency_s,
                    "energy_j": fig.energy_j,
                    "power_w": fig.power_w,
                    "total_latency_s": stage.count * fig.latency_s,
                    "total_energy_j": stage.count * fig.energy_j,
                    "energy_cv_pct": 100 * summary.energy_per_iter_j.cv if summary is not None else math.nan,
                }
            )
        idle = idle_power(result, self.channel)
        totals = pipeline_totals(figures, idle)
        total_latency = totals.get("sum_latency_s", math.nan)
        for row in rows:
            row["share_of_latency_pct"] = (
                100 * row["total_latency_s"] / total_latency if total_latency else math.nan
            )
        summary_row = {
            "pipeline": self.name,
            "stages": len(figures),
            "calls": sum(f.count for f in figures),
            **totals,
            **(extra or {}),
        }
        return [
            DerivedTable("stages", f"{self.name}: per stage, per call (x count in the totals)", rows),
            DerivedTable(
                "summary",
                f"{self.name}: pipeline totals per item",
                [summary_row],
                note="dynamic = energy - idle power x latency; parallel = every stage on its own device, "
                "each idling while it waits for the slowest: sum E_i + P_idle x sum (t_max - t_i)",
            ),
        ]
