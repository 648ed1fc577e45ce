"""``replay``: every unique leaf op of a trace, rebuilt and measured in isolation (CUDA graphs),
plus the full model it came from, and the prediction report.

    energyframe trace --workload bloom-560m --out trace/
    energyframe run --power nvml --workload replay:trace=trace/

A trace of several ranks (``trace/rank0``, ``trace/rank1``, written by ``energyframe trace``
under torchrun) is replayed under torchrun with as many ranks: each rank replays its own trace,
its collectives as real collectives on the process group (tier ``communication``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError, WorkloadError
from ..kit import extras, registry
from ..model import DerivedTable, Phase, ReportFigure, WorkloadContext
from ..options import Option, parse_spec
from ..plugin import Workload
from ..workloads import distributed
from ..workloads.graph import WINDOW_S_OPTION, Captured, Rotation, l2_cache_bytes, torch_device
from ..workloads.pipeline import PIPELINE_RUN_DEFAULTS, idle_power, stage_figures
from .memory_inputs import keep_others, memory_positions, read_memory_inputs
from .rebuild import RebuildError, float_dtype_hint, rebuild
from .report import OpFigures, prediction, report_png
from .tracedir import rank_trace, read_collectives, read_kernels, read_ops, read_trace_meta

log = logging.getLogger("energyframe")

if TYPE_CHECKING:
    import torch

    from .graphgap import GraphKernels

FULL_MODEL = "(full model)"
FULL_MODEL_GRAPH = "(full model, CUDA graph)"


#: the prediction report a replay saves beside the run
REPORT_JSON = "comparison_report.json"


class ReplayWorkload(Workload):
    """The leaf ops of a trace, each replayed in isolation; the full model beside them."""

    DESCRIPTION = (
        "replay a trace's unique leaf ops in isolation and predict the full model (energyframe trace)"
    )
    OPTIONS = (
        Option(
            "trace", "path", required=True, help="a directory written by energyframe trace (or trace import)"
        ),
        Option(
            "full", "str", None, "workload spec of the full model (default: the traced one; none to skip)"
        ),
        Option(
            "graph_full",
            "bool",
            True,
            "on a GPU, also measure the full model as one CUDA graph (no host launch gaps)",
        ),
        Option("unroll", "int", 20, "calls of an op captured per CUDA graph", minimum=1),
        Option(
            "kernel_gap_us",
            "float",
            None,
            "launch gap per kernel in a CUDA graph added to the prediction, in µs "
            "(default: measured from the full model's graph)",
            minimum=0,
        ),
        Option(
            "l2",
            "choice",
            "rotate",
            "rotate: calls rotate over copies of the inputs the model reads from memory (those "
            "that existed before its forward: weights, buffers, caches; every input when the "
            "trace did not record them), enough to exceed twice the L2; all: every input, "
            "activations too; warm: each op replays its own inputs, which stay in the L2",
            choices=("rotate", "all", "warm"),
        ),
        Option("device", "str", "auto", "cuda, cuda:N, cpu or auto"),
        Option("limit", "int", None, "replay only the N ops with the most traced GPU time", minimum=1),
        Option(
            "comm",
            "bool",
            True,
            "replay the trace's collectives (under torchrun with the traced number of ranks)",
        ),
        WINDOW_S_OPTION,
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        #: the full model as a workload made in Python (``full=ef.Model(...)``), which has no spec
        self.full_workload = options.get("full") if isinstance(options.get("full"), Workload) else None
        if self.full_workload is not None:
            options = {**options, "full": f"(python) {self.full_workload.name}"}
        super().__init__(name, **options)
        extras.check("torch", f"workload {self.name!r}")  # before anything starts
        trace: Path = rank_trace(self.options["trace"], self.world)
        self.trace_dir = trace
        self.meta = read_trace_meta(trace / "trace_meta.json")
        self.records = read_ops(trace)
        self.kernels = read_kernels(trace)
        self.collective_records = [c for c in read_collectives(trace) if c.get("replayed")]
        #: the signatures of the inputs the traced model read from memory (memory_inputs.py)
        self.memory_inputs = read_memory_inputs(trace)
        if self.collective_records and self.options["comm"]:
            self._check_world(trace)
        self.full_spec = _full_spec(self.options["full"], self.meta)
        self.rebuilt: list[tuple[dict, Any, str]] = []
        #: per replayed op, its input copies under l2=rotate or all
        self.rotations: dict[str, Rotation] = {}
        #: per op with copies, the schema positions rotated (None: every input)
        self.rotated: dict[str, set[int] | None] = {}
        self.collectives: list[tuple[dict, Any, str]] = []
        self.failed: list[dict] = []
        self._joined = False
        self.full: Workload | None = None
        self.full_graph: Workload | None = None
        self.device: torch.device | None = None
        #: the full model's graph under the profiler: kernels, busy time per replay
        self.graph_kernels: GraphKernels | None = None
        self.graph_iterations = 1
        self.full_graph_spec: str | None = None

    @property
    def world(self) -> WorkloadContext:
        """This process among the ranks (the workload's context)."""
        return self.context

    def run_defaults(self) -> Mapping[str, Any]:
        defaults = dict(PIPELINE_RUN_DEFAULTS)
        if self.options["window_s"] is not None:
            defaults["min_window_s"] = self.options["window_s"]
        return defaults

    def _check_world(self, trace: Path) -> None:
        ranks = max(int(c.get("group_size") or 1) for c in self.collective_records)
        if self.world.world_size != ranks:
            calls = sum(c["count_per_iteration"] for c in self.collective_records)
            kinds = ", ".join(sorted({c["kind"] for c in self.collective_records}))
            where = (
                f"WORLD_SIZE is {self.world.world_size}" if self.world.launched else "WORLD_SIZE is not set"
            )
            raise UsageError(
                f"{trace} holds {calls:g} collective calls per iteration ({kinds}) over {ranks} ranks, "
                f"but {where}: replay it under torchrun --nproc-per-node {ranks}, one process per rank, "
                "or with comm=false (and full=none) to replay its compute ops alone"
            )

    def setup(self) -> None:
        device = self._open_device()
        hint = float_dtype_hint(self.records)
        total_us = sum(r.get("gpu_time_us", 0.0) for r in self.records) or 1.0
        records = self._ops_to_replay(device, total_us)
        self._rebuild_ops(records, hint, total_us)
        if self.options["comm"]:
            self._rebuild_collectives(total_us)
        self._check_rebuilt(records)
        if self.full_workload is not None:
            self._set_up_full_workload(self.full_workload)
        elif self.full_spec:
            self._set_up_full_spec(self.full_spec)

    def _open_device(self) -> torch.device:
        """This process's device, set as ``self.device``: under torchrun its rank's, with the
        process group joined."""
        if not self.world.distributed:
            self.device = torch_device(self.options["device"], self.context)
            return self.device
        self.device = device = distributed.rank_device(self.options["device"], self.world)
        distributed.join(device)
        self._joined = True
        return device

    def _ops_to_replay(self, device: torch.device, total_us: float) -> list[dict]:
        """The traced ops to replay, the most traced GPU time first: on a GPU only those that ran
        a kernel, under torchrun only those every rank traced, at most ``limit``."""
        records = self.records
        if device.type == "cuda":  # ops that ran no kernel cost nothing
            records = [r for r in records if r.get("gpu_time_us", 0.0) > 0]
        records = sorted(records, key=lambda r: -r.get("gpu_time_us", 0.0))
        if self.world.distributed:
            records = self._agreed(records, total_us)
        if self.options["limit"]:
            records = records[: self.options["limit"]]
        return records

    def _set_up_full_spec(self, full_spec: str) -> None:
        """The full model from its spec, and its twin with ``execution=graph`` where it has one."""
        spec = parse_spec(full_spec)
        self.full = registry.create_workload(spec)
        self.full.setup()
        graph = self._graph_spec(spec)
        if graph is not None:
            self.full_graph_spec = str(graph)
            self.full_graph = registry.create_workload(graph)
            self.full_graph.setup()

    def _rebuild_ops(self, records: list[dict], hint, total_us: float) -> None:
        """Each op rebuilt and called once (which catches bad arguments now), then named by its
        place in the order."""
        assert self.device is not None  # set by setup
        for record in records:
            try:
                op = rebuild(record, hint)
                op.call(op.make_args(self.device))
            except (RebuildError, RuntimeError, TypeError, ValueError, IndexError) as e:
                self._not_replayed(record, f"{type(e).__name__}: {e}", total_us)
                continue
            self.rebuilt.append((record, op, ""))
        if self.world.distributed:
            self._drop_failed_elsewhere(total_us)
        self.rebuilt = [
            (record, op, f"{index:03d} {record['name'].removeprefix('aten::')} {_shapes(record)}")
            for index, (record, op, _name) in enumerate(self.rebuilt)
        ]

    def _check_rebuilt(self, records: list[dict]) -> None:
        """A replay of nothing is no measurement: refuse it with the first reason; ops left out
        are said (they are listed in the not_rebuilt table, and their share of the GPU time in
        comparison_report.json)."""
        if not self.failed:
            return
        first = self.failed[0]
        share = sum(f.get("share_percent", 0.0) for f in self.failed)
        if records and not self.rebuilt and not self.collectives:
            raise WorkloadError(
                f"none of the {len(self.failed)} ops of {self.options['trace']} could be rebuilt, so there "
                f"is nothing to replay (the first, {first['op']}: {first['reason'][:200]})"
            )
        log.warning(
            "%d of the trace's ops could not be rebuilt and are not replayed (%.3g %% of its GPU time; "
            "the first, %s: %s); the not_rebuilt table lists them",
            len(self.failed), share, first["op"], first["reason"][:200],
        )

    def _not_replayed(self, record: dict, reason: str, total_us: float) -> None:
        self.failed.append(
            {
                "op": record["name"],
                "inputs": _shapes(record),
                "reason": reason[:300],
                "share_percent": 100.0 * record.get("gpu_time_us", 0.0) / total_us,
            }
        )

    def _agreed(self, records: list[dict], total_us: float) -> list[dict]:
        """The ops every rank traced, in one order on every rank: by their GPU time summed over
        the ranks. Each rank's trace is its own, so the ops' times, and then their order by time,
        differ a little from rank to rank; the measurement needs every rank to measure the same
        phases in the same order. An op that not every rank traced is not replayed."""
        mine = {_op_key(r): r.get("gpu_time_us", 0.0) for r in records}
        everyone = distributed.gather(mine)
        common = set(mine).intersection(*everyone)
        summed = {key: sum(theirs[key] for theirs in everyone) for key in common}
        for record in records:
            if _op_key(record) not in common:
                self._not_replayed(record, "not traced on every rank", total_us)
        kept = [r for r in records if _op_key(r) in common]
        return sorted(kept, key=lambda r: (-summed[_op_key(r)], _op_key(r)))

    def _drop_failed_elsewhere(self, total_us: float) -> None:
        """An op that failed to rebuild on one rank is dropped on every rank."""
        rebuilt = [_op_key(record) for record, _op, _name in self.rebuilt]
        everyone = distributed.gather(rebuilt)
        common = set(rebuilt).intersection(*everyone)
        for record, _op, _name in self.rebuilt:
            if _op_key(record) not in common:
                self._not_replayed(record, "failed to rebuild on another rank", total_us)
        self.rebuilt = [item for item in self.rebuilt if _op_key(item[0]) in common]

    def _rebuild_collectives(self, total_us: float) -> None:
        """Every rank rebuilds its trace's collectives; the ranks must agree on them, or a rank
        would wait forever for a collective its peers never run."""
        from .collectives import rebuild_collective

        for index, record in enumerate(sorted(self.collective_records, key=lambda r: r["key"])):
            shapes = _shapes({"input_dims": record["shapes"]})
            name = f"comm {index:02d} {record['kind']} {record['dtype']} {shapes}"
            try:
                self.collectives.append((record, rebuild_collective(record, self.world.world_size), name))
            except RebuildError as e:
                self.failed.append(
                    {
                        "op": record["name"],
                        "inputs": shapes,
                        "reason": f"RebuildError: {e}"[:300],
                        "share_percent": 100.0 * record.get("gpu_time_us", 0.0) / total_us,
                    }
                )
        if self.world.distributed:
            mine = [(r["kind"], r["dtype"], r["shapes"], r["count"]) for r, _c, _n in self.collectives]
            everyone = distributed.gather(mine)
            if any(theirs != mine for theirs in everyone):
                counts = ", ".join(f"rank {i}: {len(c)}" for i, c in enumerate(everyone))
                raise WorkloadError(
                    f"the ranks' traces hold different collectives ({counts} unique); replay traces "
                    "written together by one energyframe trace under torchrun"
                )

    def _set_up_full_workload(self, full: Workload) -> None:
        """The full model made in Python, and its twin with ``execution=graph`` where it has one."""
        assert self.device is not None  # set by setup
        execution = full.options.get("execution")
        if self.options["graph_full"] and self.device.type == "cuda" and execution not in (None, "graph"):
            twin = copy.copy(full)  # not set up yet: its own options, the same module
            twin.options = {**full.options, "execution": "graph"}
            self.full_graph_spec = f"{self.full_spec}, execution=graph"
            self.full_graph = twin
        self.full = full
        full.setup()
        if self.full_graph is not None:
            self.full_graph.setup()

    def _graph_spec(self, spec):
        """The full model's spec with ``execution=graph``, where that means something new."""
        assert self.device is not None  # set by setup
        if not (self.options["graph_full"] and self.device.type == "cuda"):
            return None
        names = {o.name for o in registry.load(registry.WORKLOADS, spec.name).OPTIONS}
        if "execution" not in names or dict(spec.options).get("execution") == "graph":
            return None
        return dataclasses.replace(spec, options={**dict(spec.options), "execution": "graph"})

    def phases(self) -> Iterator[Phase]:
        # a generator: each phase is prepared just before it is measured, on every rank in the
        # same order (the measurement checks that the ranks measure the same phases)
        assert self.device is not None  # set by setup
        if self.full is not None:
            yield dataclasses.replace(next(iter(self.full.phases())), name=FULL_MODEL)
        if self.full_graph is not None:
            yield self._profiled(next(iter(self.full_graph.phases())))
        if self.collectives:
            from .collectives import collective_phase

            for _record, collective, name in self.collectives:
                yield collective_phase(name, collective, self.device, self.options["unroll"])
        for record, op, name in self.rebuilt:
            make, call = op.make_args, op.call
            if self.options["l2"] != "warm" and self.device.type == "cuda":
                rotation = self._rotation(record, op, name)
                self.rotations[name] = rotation
                make, call = rotation.make, rotation.rotated_call()
            captured = Captured(make, call, self.options["unroll"], self.device)
            yield captured.phase(name)

    def _rotated_inputs(self, name: str) -> str:
        """Which inputs the op's copies rotate: all, none, or the schema positions."""
        rotation = self.rotations.get(name)
        if rotation is None or rotation.copies == 1:
            return "none"
        positions = self.rotated[name]
        return "all" if positions is None else " ".join(str(i) for i in sorted(positions))

    def _rotation(self, record: dict, op, name: str) -> Rotation:
        """The op's calls over copies of its inputs: every input with ``l2=all`` or when the
        trace did not record which the model read from memory, else only those."""
        l2_bytes, unroll = l2_cache_bytes(self.device), self.options["unroll"]
        if self.options["l2"] == "all" or self.memory_inputs is None:
            self.rotated[name] = None
            return Rotation(op.make_args, op.call, l2_bytes, unroll)
        positions = self.rotated[name] = memory_positions(record, self.memory_inputs)
        keep, rotated_bytes = keep_others(op.overload._schema.arguments, positions)
        return Rotation(op.make_args, op.call, l2_bytes, unroll, keep=keep, rotated_bytes=rotated_bytes)

    def _profiled(self, phase: Phase) -> Phase:
        """The full-model graph phase, whose set-up also profiles a few replays of the graph:
        its kernels and their busy time give the launch gap between kernels (graphgap.py)."""
        self.graph_iterations = phase.iterations_per_step

        def setup() -> None:
            if phase.setup is not None:
                phase.setup()
            captured = getattr(self.full_graph, "whole_captured", None)
            if captured is not None and captured.on_gpu and captured.fallback is None:
                from .graphgap import profile_replays

                self.graph_kernels = profile_replays(phase.step, phase.sync)

        return dataclasses.replace(phase, name=FULL_MODEL_GRAPH, setup=setup)

    def teardown(self) -> None:
        for full in (self.full, self.full_graph):
            if full is not None:
                full.teardown()
        if self._joined:
            self._joined = False
            distributed.leave()

    def _report(self, result) -> dict:
        channel = distributed.own_channel(result, self.device)  # this rank's GPU
        ops = _op_figures(result, self.rebuilt, channel)
        collectives = _op_figures(result, self.collectives, channel)
        full_latency_s, full_energy_j = _full_model_figures(result, FULL_MODEL, self.full, channel)
        graph_latency_s, graph_energy_j = _full_model_figures(
            result, FULL_MODEL_GRAPH, self.full_graph, channel
        )
        captured = getattr(self.full_graph, "whole_captured", None)
        graph_kernels, graph_busy_s, graph_span_s = self._graph_profile()
        gap_us = self.options["kernel_gap_us"]
        return prediction(
            ops,
            self.kernels,
            self.meta,
            full_latency_s,  # per iteration, as the counts below
            full_energy_j,
            idle_power(result, channel),
            self.failed,
            self.meta.get("iterations_per_step", 1),
            graph_latency_s=graph_latency_s,
            graph_energy_j=graph_energy_j,
            graph_execution=(captured.fallback or "cuda graph") if captured is not None else None,
            graph_kernels=graph_kernels,
            graph_busy_s=graph_busy_s,
            graph_span_s=graph_span_s,
            kernel_gap_option_s=gap_us * 1e-6 if gap_us is not None else None,
            collectives=collectives,
        )

    def _graph_profile(self) -> tuple[float, float, float]:
        """The full model's graph as profiled (graphgap.py), per iteration: its kernels, their busy
        time and their span; NaN where it was not profiled. Units: s."""
        gk = self.graph_kernels
        if gk is None:
            return math.nan, math.nan, math.nan
        n = self.graph_iterations
        return gk.kernels / n, gk.busy_s / n, gk.span_s / n

    def derive(self, result) -> Sequence[DerivedTable]:
        report = self._report(result)
        summary = {
            **_comparison_summary(report),
            "replayed_collectives": len(self.collectives),
            "replayed_ops": len(self.rebuilt),
            "not_rebuilt_ops": len(self.failed),
            "workload": self.full_spec,
            "graph_workload": self.full_graph_spec,
        }
        tiers = [{"tier": k, **v} for k, v in report["tier_breakdown"].items()]
        tables = [
            DerivedTable(
                "comparison",
                "prediction: full model against the sum of its replayed ops",
                [summary],
                note=report["gap_analysis"]["explanation"] + "; " + report["kernel_gap_model"]["explanation"],
                display=COMPARISON_COLUMNS,
            ),
            DerivedTable("tiers", "predicted time and energy by kernel tier", tiers),
            DerivedTable(
                "replayed_ops",
                "replayed ops, per call and per iteration",
                self._replayed_op_rows(result),
                display=(
                    "op",
                    "count",
                    "latency_s",
                    "traced_us_per_call",
                    "energy_j",
                    "total_latency_s",
                    "total_energy_j",
                ),
            ),
        ]
        if self.failed:
            tables.append(DerivedTable("not_rebuilt", "ops that could not be rebuilt", self.failed))
        return tables

    def _replayed_op_rows(self, result) -> list[dict]:
        """One row per replayed collective and op: per call, per iteration, its traced time and
        kernels, and which inputs its calls rotate over how many copies."""
        rows = []
        channel = distributed.own_channel(result, self.device)
        for record, _op, name in [*self.collectives, *self.rebuilt]:
            fig, s = stage_figures(result, name, channel=channel)
            count = record["count_per_iteration"] / max(1, self.meta.get("iterations_per_step", 1))
            rows.append(
                {
                    "op": name,
                    "count": count,
                    "latency_s": fig.latency_s,
                    "energy_j": fig.energy_j,
                    "total_latency_s": count * fig.latency_s,
                    "total_energy_j": count * fig.energy_j,
                    "traced_us_per_call": record["gpu_time_us"] / max(1, record["count"]),
                    "kernels": ";".join(record.get("kernel_names", []))[:200],
                    "input_copies": self.rotations[name].copies if name in self.rotations else 1,
                    "rotated_inputs": self._rotated_inputs(name),
                }
            )
        return rows

    @classmethod
    def phase_kinds(cls, run_dir: Path, result) -> Mapping[str, str]:
        """Each replayed op's phase (the ``replayed_ops`` table's ``op`` column)."""
        return {
            str(row["op"]): "op"
            for table in result.derived
            if table.name == "replayed_ops"
            for row in table.rows
            if row.get("op") is not None
        }

    @classmethod
    def report_figures(cls, run_dir: Path, result) -> Sequence[ReportFigure]:
        try:
            report = json.loads((run_dir / REPORT_JSON).read_text())
        except (OSError, ValueError):
            return ()
        from .report_figures import gantt_figure, replay_prediction, tiers

        figures = [
            ReportFigure("Replay: prediction", replay_prediction(report)),
            ReportFigure("Replay: tiers", tiers(report)),
        ]
        trace = ((result.meta.get("workload") or {}).get("info") or {}).get("trace")
        if trace:
            path = Path(trace) if Path(trace).is_absolute() else run_dir / trace
            figures.append(gantt_figure(path))
        return figures

    def extra_files(self, result) -> Mapping[str, bytes]:
        from ..results.store import json_safe

        report = self._report(result)
        title = f"{self.full_spec or self.options['trace']}: measured vs predicted"
        files = {REPORT_JSON: (json.dumps(json_safe(report), indent=2) + "\n").encode()}
        if extras.optional("matplotlib", "prediction.png"):
            files["prediction.png"] = report_png(report, title)
        return files

    def info(self) -> Mapping[str, Any]:
        return {
            "trace": str(self.trace_dir),
            "rank": self.world.rank,
            "world_size": self.world.world_size,
            "replayed_collectives": len(self.collectives),
            "full_model": self.full_spec,
            "full_model_graph": self.full_graph_spec,
            "graph_kernels": dataclasses.asdict(self.graph_kernels) if self.graph_kernels else None,
            "replayed_ops": len(self.rebuilt),
            "l2": self.options["l2"],
            "memory_inputs": (
                "recorded by the trace" if self.memory_inputs is not None
                else "not in the trace: l2=rotate rotates every input"
            ),
            "not_rebuilt": self.failed,
            "device": str(self.device),
            "traced": self.meta,
        }


#: the comparison table's columns shown by default
COMPARISON_COLUMNS = (
    "workload",
    "rank",
    "full_model_inference_us",
    "predicted_from_kernels_us",
    "error_percent",
    "full_model_energy_j",
    "predicted_energy_j",
    "energy_error_percent",
    "full_model_graph_inference_us",
    "graph_error_percent",
    "full_model_graph_energy_j",
    "graph_energy_error_percent",
    "gap_per_kernel_us",
    "predicted_with_kernel_gaps_us",
    "kernel_gap_error_percent",
    "predicted_with_kernel_gaps_energy_j",
    "kernel_gap_energy_error_percent",
    "gap_host_overhead_us",
    "coverage_percent_of_gpu_time",
    "gap_traced_gpu_idle_us",
    "gap_predicted_plus_idle_error_percent",
    "gap_idle_energy_j",
    "gap_predicted_plus_idle_energy_error_percent",
    "communication_share_percent",
    "traced_communication_share_percent",
    "replayed_ops",
    "replayed_collectives",
    "not_rebuilt_ops",
    "not_rebuilt_share_percent_of_gpu_time",
)


def _comparison_summary(report: Mapping[str, Any]) -> dict:
    """The report's figures as one flat row: its top-level numbers, the gap analysis's (as
    ``gap_*``), the kernel-gap model's, and the communication's share."""
    summary = {k: v for k, v in report.items() if not isinstance(v, (dict, list))}
    summary.update({f"gap_{k}": v for k, v in report["gap_analysis"].items() if k != "explanation"})
    summary.update({k: v for k, v in report["kernel_gap_model"].items() if k != "explanation"})
    comm = report["communication"]
    summary.update(
        communication_us=comm["predicted_us"],
        communication_share_percent=comm["share_of_predicted_percent"],
        communication_energy_share_percent=comm["energy_share_of_predicted_percent"],
        traced_communication_share_percent=comm["traced_share_percent_of_gpu_time"],
    )
    return summary


def _op_figures(result, replayed: Sequence[tuple[dict, Any, str]], channel: str | None) -> list[OpFigures]:
    """The measured per-call figures of each replayed op (or collective), with its record."""
    out = []
    for record, _op, name in replayed:
        fig, _ = stage_figures(result, name, channel=channel)
        out.append(OpFigures(record, name, fig.latency_s, fig.energy_j))
    return out


def _full_model_figures(
    result, phase: str, workload: Workload | None, channel: str | None
) -> tuple[float, float]:
    """A full model's measured latency and energy per iteration; NaN for one not run. Units: s, J."""
    if workload is None:
        return math.nan, math.nan
    fig, _ = stage_figures(result, phase, channel=channel)
    return (fig.latency_s, fig.energy_j) if fig else (math.nan, math.nan)


def _full_spec(full: str | None, meta: Mapping[str, Any]) -> str | None:
    """The full model's spec: the ``full`` option, else the traced workload's; None for ``full=none``."""
    return None if full == "none" else (full or meta.get("workload"))


def _op_key(record: dict) -> str:
    """One op's identity across the ranks' traces: its name and its inputs as traced."""
    fields = ("name", "input_dims", "input_types", "input_strides", "concrete_inputs")
    return json.dumps([record.get(field) for field in fields], default=str)


def _shapes(record: dict) -> str:
    parts = []
    for dims in record.get("input_dims") or []:
        if dims and isinstance(dims[0], list):
            parts.append("[" + ",".join("x".join(map(str, d)) for d in dims) + "]")
        elif dims:
            parts.append("x".join(map(str, dims)))
    return " ".join(parts)
