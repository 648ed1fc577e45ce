"""The measured part of a sweep: one phase per configuration, each a CUDA graph of launches.

Each configuration is prepared just before it is measured (``phases`` is a generator): its
arguments are allocated, one launch is checked against the reference (or, with nothing to
compare against, for determinism on a second fresh copy of its arguments), three are timed to
choose how many launches a graph holds, and the graph is captured. A configuration that fails to compile,
launch or allocate is recorded with its error and the sweep goes on; after an error that leaves
the CUDA context unusable (an illegal address), the remaining configurations are marked not run.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import WorkloadError
from ..kit import extras
from ..model import DerivedTable, Phase, ReportFigure
from ..plugin import Workload
from ..workloads.graph import Captured, torch_device
from .check import UNCHECKED, WRONG, Check, allocate, compare, determinism, reference_outputs
from .kernel import CudaKernel, Dim3, Launch
from .results import ERROR, MISMATCH, NOT_RUN, OK, RESULTS_JSON, KernelResult
from .runtime import kernel_args, launcher

if TYPE_CHECKING:
    import torch

    from ..plugin import PhaseSummary

log = logging.getLogger("energyframe")

#: a graph replay should last about this long (launch overhead spread over its launches)
TARGET_STEP_S = 2e-3
MAX_UNROLL = 100
#: run settings a sweep prefers (calibration and the checked launch warm each configuration up)
SWEEP_RUN_DEFAULTS = {"warmup_s": 0.2}
_STICKY = (
    "illegal",
    "misaligned",
    "unspecified launch failure",
    "context is destroyed",
    "device-side assert",
)


@dataclass
class Config:
    """One configuration: a kernel, a parameter point and a block, in sweep order."""

    index: int
    point_index: int
    kernel: CudaKernel
    point: Mapping[str, Any]
    block: Dim3
    launch: Launch | None = None
    status: str = NOT_RUN
    error: str = ""
    check: Check | None = None
    unroll: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.launch.warnings if self.launch is not None else ()

    @property
    def phase(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.point.items())
        return f"{self.kernel.label} {params} block={'x'.join(map(str, self.block))}"


def plan(
    kernels: Sequence[CudaKernel], points: Sequence[Mapping[str, Any]], shard: tuple[int, int] | None = None
) -> list[Config]:
    """Every configuration in sweep order (point, then kernel, then block), each configured;
    one that cannot be configured carries its error. With ``shard``, only that shard's points."""
    from .space import in_shard

    configs, index = [], 0
    for point_index, point in enumerate(points):
        for kernel in kernels:
            for block in kernel.blocks_for(point):
                config = Config(index, point_index, kernel, dict(point), block)
                index += 1
                if not in_shard(point_index, shard):
                    continue
                try:
                    config.launch = kernel.configure(point, block)
                except Exception as e:
                    config.status, config.error = ERROR, f"{type(e).__name__}: {e}"
                configs.append(config)
    return configs


class SweepWorkload(Workload):
    """Configurations of ``.cu`` kernels, each measured as a CUDA graph of ``unroll`` launches."""

    DESCRIPTION = "a sweep of CUDA source kernels over parameters (energyframe sweep)"

    def __init__(
        self,
        name: str | None = None,
        configs: Sequence[Config] = (),
        reference: Callable[..., Any] | None = None,
        check: bool = True,
        rtol: float | None = None,
        unroll: int | None = None,
        device: str = "auto",
        seed: int = 0,
        **options: Any,
    ) -> None:
        super().__init__(name, **options)
        extras.check("torch", f"workload {self.name!r}")  # before anything starts
        self.configs = list(configs)
        self.reference = reference
        self.check = check
        self.rtol = rtol
        self.unroll = unroll
        self.device_spec = device
        self.seed = seed
        self.device: torch.device | None = None
        self._expected: dict[int, tuple[str, dict]] = {}  # point -> (reference kernel, outputs)
        self._lost: str | None = None

    def run_defaults(self) -> Mapping[str, Any]:
        return dict(SWEEP_RUN_DEFAULTS)

    def setup(self) -> None:
        self.device = torch_device(self.device_spec, self.context)
        if self.device.type != "cuda":
            raise WorkloadError("a kernel sweep needs a CUDA GPU (torch sees none); --dry-run shows the plan")

    def phases(self) -> Iterator[Phase]:
        for config in self.configs:
            if config.status == ERROR:
                continue
            if self._lost:
                config.error = f"not run: the CUDA context was lost after {self._lost}"
                continue
            try:
                captured = self._prepare(config)
            except KeyboardInterrupt:
                raise
            except Exception as e:
                self._failed(config, e)
                continue
            config.status = MISMATCH if config.check and config.check.status in WRONG else OK
            yield captured.phase(config.phase, self._work(config))
            self._expected = {k: v for k, v in self._expected.items() if k >= config.point_index}

    def _failed(self, config: Config, error: BaseException) -> None:
        config.status, config.error = ERROR, f"{type(error).__name__}: {str(error).strip()[:1500]}"
        log.warning("%s: %s", config.phase, config.error)
        text = str(error).lower()
        if any(s in text for s in _STICKY):
            self._lost = config.phase
            return
        try:  # an error of this launch only: make sure nothing is left queued
            import torch

            torch.cuda.synchronize(self.device)
        except Exception:
            self._lost = config.phase

    def _work(self, config: Config) -> dict[str, float]:
        work = {}
        for unit in ("flop", "bytes"):
            value = config.extra.get(unit)
            if value is not None and not math.isnan(value):
                work[unit] = float(value)
        return work

    def _prepare(self, config: Config) -> Captured:
        import torch

        kernel, launch = config.kernel, config.launch
        assert launch is not None
        _, total_b = torch.cuda.mem_get_info(self.device)
        if launch.array_bytes > total_b:
            raise WorkloadError(
                f"the arguments need {launch.array_bytes / 2**30:.3g} GiB; the GPU has "
                f"{total_b / 2**30:.3g} GiB (nothing was allocated)"
            )
        tensors = allocate(kernel, launch, config.point, self.device, self.seed + config.point_index)
        before = {p.name: tensors[p.name].clone() for p in kernel.inouts} if self.check else {}
        args = kernel_args(kernel.signature, tensors, launch.scalars)
        go = launcher(kernel, launch, args)
        go()
        torch.cuda.synchronize(self.device)
        config.check = self._check(config, tensors, before)
        before.clear()
        # time a few launches to choose the graph's size
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            go()
        end.record()
        end.synchronize()
        per_launch_s = start.elapsed_time(end) / 3e3
        config.unroll = self.unroll or max(
            1, min(MAX_UNROLL, math.ceil(TARGET_STEP_S / max(per_launch_s, 1e-7)))
        )
        return Captured(
            lambda device: tensors, lambda state: go(), config.unroll, self.device, warmup_calls=1
        )

    def _check(self, config: Config, tensors: Mapping[str, Any], before: Mapping[str, Any]) -> Check:
        if not self.check:
            return Check(UNCHECKED, detail="checking was turned off")
        kernel, launch = config.kernel, config.launch
        assert launch is not None
        if self.reference is not None:
            expected = reference_outputs(
                kernel, self.reference, tensors, launch.scalars, config.point, before
            )
            return compare(kernel, tensors, expected, "reference", self.rtol)
        if config.point_index in self._expected:
            against, expected = self._expected[config.point_index]
            return compare(kernel, tensors, expected, against, self.rtol, slack=2.0)
        # the first configuration of a point is the reference of the others
        self._expected[config.point_index] = (
            config.phase,
            {p.name: tensors[p.name].clone() for p in kernel.outputs},
        )
        return self._determinism(config, tensors)

    def _determinism(self, config: Config, tensors: Mapping[str, Any]) -> Check:
        """A second launch on a fresh allocation of the same inputs, compared with the first."""
        import torch

        kernel, launch = config.kernel, config.launch
        assert launch is not None
        free_b, _ = torch.cuda.mem_get_info(self.device)
        if launch.array_bytes > free_b:
            return Check(UNCHECKED, detail="no GPU memory left for the determinism check's second copy")
        twin = allocate(kernel, launch, config.point, self.device, self.seed + config.point_index)
        try:
            launcher(kernel, launch, kernel_args(kernel.signature, twin, launch.scalars))()
            torch.cuda.synchronize(self.device)
            return determinism(kernel, tensors, twin, self.rtol)
        finally:
            twin.clear()

    # -- results ------------------------------------------------------------------------------
    def results(self, run_result, stopped: str = "", device: str = "") -> list[KernelResult]:
        """Every configuration with its measured figures (from ``run_result``'s summaries).

        Args:
            stopped: why the run ended early (the reason given to configurations not run).
            device: which GPU measured the configurations (a label of ``sweep.devices``).
        """
        summaries = {s.phase: s for s in run_result.primary_summaries()} if run_result is not None else {}
        why = f"not measured: the run stopped before it ({stopped})" if stopped else ""
        out = []
        for c in self.configs:
            s = summaries.get(c.phase)
            status, error = _status(c, measured=s is not None, why=why)
            out.append(
                KernelResult(
                    index=c.index,
                    point_index=c.point_index,
                    kernel=c.kernel.label,
                    parameters=dict(c.point),
                    block=c.block,
                    grid=c.launch.grid if c.launch else (0, 0, 0),
                    status=status,
                    error=error,
                    phase=c.phase,
                    unroll=c.unroll,
                    check=c.check.to_json() if c.check else {},
                    flop=c.extra.get("flop", math.nan),
                    bytes=c.extra.get("bytes", math.nan),
                    warnings=c.warnings,
                    device=device if status != NOT_RUN else "",
                    **(_figures(s) if s is not None else {}),
                )
            )
        return out

    @classmethod
    def phase_kinds(cls, run_dir: Path, result) -> Mapping[str, str]:
        """Each measured configuration's phase (from the sweep's benchmark_results.json)."""
        sweep = read_results_json(run_dir)
        return {
            str(b["phase"]): "configuration" for b in (sweep or {}).get("benchmarks", []) if b.get("phase")
        }

    @classmethod
    def report_figures(cls, run_dir: Path, result) -> Sequence[ReportFigure]:
        sweep = read_results_json(run_dir)
        if not sweep:
            return ()
        from .report_figures import sweep_energy_latency, sweep_heatmaps, sweep_speedup

        return (
            ReportFigure("Sweep: latency heatmaps", sweep_heatmaps(sweep)),
            ReportFigure("Sweep: speedup", sweep_speedup(sweep)),
            ReportFigure("Sweep: energy against latency", sweep_energy_latency(sweep)),
        )

    def derive(self, result) -> Sequence[DerivedTable]:
        rows = []
        for r in self.results(result):
            rows.append(
                {
                    "kernel": r.kernel,
                    **r.parameters,
                    "block": "x".join(map(str, r.block)),
                    "status": r.status,
                    "latency_s": r.latency_s,
                    "latency_cv_pct": 100 * r.latency_cv,
                    "energy_j": r.energy_j,
                    "energy_cv_pct": 100 * r.energy_cv,
                    "trials": r.trials,
                    "rel_error": r.check.get("rel_error"),
                    "check": r.check.get("status", ""),
                    "gflops": r.gflops,
                    "gflop_per_j": r.gflop_per_j,
                    "error": r.error[:200],
                }
            )
        return [
            DerivedTable(
                "sweep",
                f"{self.name}: per launch (median over trials)",
                rows,
                note="check: each kernel's output against the reference on fresh random inputs "
                "(deterministic: two launches on fresh copies agreed, when there is no reference); "
                "cv: coefficient of variation over trials",
            )
        ]

    def info(self) -> Mapping[str, Any]:
        import torch

        out: dict[str, Any] = {"configurations": len(self.configs), "torch": torch.__version__}
        if self.device is not None and self.device.type == "cuda":
            from .devices import describe

            out["gpu"] = torch.cuda.get_device_name(self.device)
            out["execution"] = "cuda graph"
            try:
                out["device"] = describe(self.device)
            except Exception as e:  # what identifies the GPU is useful, not essential
                out["device"] = {"error": f"{type(e).__name__}: {e}"}
        try:
            import cupy

            out["cupy"] = cupy.__version__
        except ImportError:
            pass
        return out


def _status(config: Config, *, measured: bool, why: str) -> tuple[str, str]:
    """A configuration's status and error in the results: one that ran but has no figures (the
    run stopped before it), or was never run, is ``not run`` with a reason (``why``: the run's,
    where it stopped early)."""
    status = config.status
    if status in (OK, MISMATCH) and not measured:
        return NOT_RUN, config.error or why or "not measured (the run stopped before it)"
    if status == NOT_RUN:
        return status, config.error or why or "not measured (the run stopped before it)"
    return status, config.error


def _figures(s: PhaseSummary) -> dict[str, Any]:
    """A configuration's measured figures, per launch, from its phase's summary."""
    return {
        "latency_s": s.time_per_iter_s.median,
        "latency_iqr_s": s.time_per_iter_s.iqr,
        "latency_cv": s.time_per_iter_s.cv,
        "energy_j": s.energy_per_iter_j.median,
        "energy_iqr_j": s.energy_per_iter_j.iqr,
        "energy_cv": s.energy_per_iter_j.cv,
        "power_w": s.mean_power_w.median,
        "trials": s.trials,
        "launches_per_window": s.iterations,
        "flags": tuple(s.flags),
    }


def read_results_json(run_dir: Path) -> dict | None:
    """A sweep run directory's benchmark_results.json, or None where there is none to read."""
    try:
        data = json.loads((run_dir / RESULTS_JSON).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
