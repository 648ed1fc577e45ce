"""``per-layer``: a named model measured layer by layer, as a pipeline derived from the model.

    energyframe run --power nvml --workload per-layer:model=resnet50,batch=64,validate=true

The wrapper's own options are ``OWN_OPTIONS`` (``model``, ``granularity``, ``validate``, ``l2``,
``unroll``, and how units are prepared and timed: ``window_s``, ``lead_s``, ``prepare``,
``activations``, ``kernel_gaps``); every other key is the model's (``batch``, ``dtype``,
``image_size``, ``prompt_len`` ...) and is passed through to it, checked against the options the
model declares. One forward pass of the model is decomposed into units (``layers.decompose``);
each unique unit becomes a phase, captured ``unroll`` times per CUDA graph; ``validate=true``
adds the whole model as a last phase and compares the per-layer sums with it (``closure.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import OptionError, UsageError
from ..model import DerivedTable, Phase
from ..options import Spec, parse_spec
from ..plugin import Workload
from .graph import Captured, copies_for, l2_cache_bytes
from .perlayer_options import (  # noqa: F401 (the options are read from here too)
    ACTIVATIONS,
    GRANULARITY,
    KERNEL_GAPS,
    L2,
    LEAD_S,
    OWN_OPTIONS,
    PER_LAYER,
    PREPARE,
    UNROLL,
    VALIDATE,
    WINDOW_S,
)
from .pipeline import PIPELINE_RUN_DEFAULTS, Pipeline, Stage

if TYPE_CHECKING:
    from ..replay.graphgap import GraphKernels
    from .layers import Decomposition
    from .models import ModelWorkload
    from .unitplan import GranularityChoice

log = logging.getLogger("energyframe")

WHOLE_MODEL = "(whole model)"
#: ``prepare=ahead`` stops capturing ahead when less GPU memory than this is free (the larger of
#: a fraction of the GPU and a fixed amount); the rest are captured just before they are measured
AHEAD_RESERVE_FRACTION = 0.25
AHEAD_RESERVE_BYTES = 2 << 30

#: model options that mean nothing per layer (the wrapper decides them)
NOT_PASSED = frozenset({"execution"} | {o.name for o in OWN_OPTIONS})


def per_layer_spec(workload_spec: str | None, validate: bool = False) -> str:
    """The ``per-layer`` spec that measures ``workload_spec`` layer by layer (what
    ``energyframe run --per-layer [--validate]`` runs).

    ``resnet50:batch=64`` gives ``per-layer:model=resnet50,batch=64``; a spec that already is a
    ``per-layer`` one is kept (with ``validate=true`` added when asked). Whether the model has a
    per-layer mode is checked when the workload is made, with the list of those that have one.

    Raises:
        UsageError: no workload spec, or one that sets ``per_layer`` or ``model`` itself.
    """
    if not workload_spec:
        raise UsageError("--per-layer needs --workload MODEL")
    spec = parse_spec(workload_spec)
    options = dict(spec.options)
    if spec.name == PER_LAYER:
        model_options = options
    else:
        for key in ("per_layer", "model"):
            if key in options:
                raise UsageError(
                    f"{spec.name}: option {key!r} has no place in a per-layer spec "
                    f"(--per-layer measures per-layer:model={spec.name})"
                )
        model_options = {"model": spec.name, **options}
    if validate:
        model_options["validate"] = "true"
    return str(Spec(PER_LAYER, model_options))


def per_layer_models() -> list[str]:
    """Registered workloads that can be measured layer by layer."""
    from ..kit import registry
    from .models import ModelWorkload

    return [
        e.name
        for e in registry.entries(registry.WORKLOADS)
        if e.cls is not None and issubclass(e.cls, ModelWorkload) and e.cls.PER_LAYER
    ]


def _model_class(name: str) -> type[ModelWorkload]:
    from ..kit import registry
    from .models import ModelWorkload

    cls = registry.load(registry.WORKLOADS, name)
    if not (issubclass(cls, ModelWorkload) and cls.PER_LAYER):
        raise OptionError(
            f"workload {name!r} has no per-layer mode. Models that have one: {', '.join(per_layer_models())}"
        )
    return cls


@dataclass
class UnitPlan:
    """How one unit (or the whole model, ``unit=None``) is prepared and measured.

    ``capture_s`` and ``probe_s`` are the host time its capture and its replay timing took;
    ``step_s`` the time of one replay and ``steps`` the replays per window (with ``window_s``).
    Units: s.
    """

    name: str
    unit: Any
    captured: Captured
    copies: int = 1
    input_copies: int = 1
    built: bool = False
    ahead: bool = False
    capture_s: float = math.nan
    probe_s: float = math.nan
    step_s: float = math.nan
    steps: int | None = None
    lead: int = 0


class _Phases:
    """The units' phases, prepared one by one as the run asks for them; sized, so the run's
    progress shows how many there are."""

    def __init__(self, count: int, make: Callable[[], Iterator[Phase]]) -> None:
        self._count = count
        self._make = make

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Phase]:
        return self._make()


def _memory_low(device) -> bool:
    """Whether capturing one more unit ahead would leave too little GPU memory free."""
    if device.type != "cuda":
        return False
    import torch

    free_b, total_b = torch.cuda.mem_get_info(device)
    return free_b < max(AHEAD_RESERVE_BYTES, AHEAD_RESERVE_FRACTION * total_b)


def _own_and_passed(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The options per-layer declares, and the rest, which are the model's."""
    names = {o.name for o in OWN_OPTIONS}
    own = {k: v for k, v in options.items() if k in names}
    passed = {k: v for k, v in options.items() if k not in own}
    return own, passed


def _not_taken(cls: type[ModelWorkload], passed: Mapping[str, Any], allowed: Sequence[str]) -> list[str]:
    """The options passed that the model does not take from per-layer: those it declares but
    that are not passed on, and, unless it takes undeclared keys (a transformers config's, which
    it checks itself), those it does not declare."""
    declared = {o.name for o in cls.OPTIONS}
    return [k for k in passed if k not in allowed and (k in declared or not cls.ACCEPTS_OVERRIDES)]


def _energy_spreads_pct(result, pairs, whole_summary) -> list[float]:
    """The trials' energy spread (CV, %) of the median unit and of the whole model, where known."""
    from .pipeline import stage_figures

    cvs = []
    for _, name in pairs:
        summary = stage_figures(result, name)[1]
        if summary is not None and math.isfinite(summary.energy_per_iter_j.cv):
            cvs.append(100 * summary.energy_per_iter_j.cv)
    spreads = [sorted(cvs)[len(cvs) // 2]] if cvs else []
    if whole_summary is not None and math.isfinite(whole_summary.energy_per_iter_j.cv):
        spreads.append(100 * whole_summary.energy_per_iter_j.cv)
    return spreads


class PerLayerWorkload(Workload):
    """A named model measured unit by unit (leaf modules or blocks, and the ops between them).

    Python API: ``PerLayer(model="resnet50", batch=64, validate=True)`` or, with a model made
    already, ``PerLayer(model=ResNet50(batch=64), validate=True)``.
    """

    DESCRIPTION = (
        "a named model measured layer by layer (a per-layer pipeline); "
        "the model's own options (batch, dtype ...) pass through"
    )
    OPTIONS = OWN_OPTIONS
    #: options it does not declare are the model's, handed on and checked there (the registry lets
    #: even a "name" through: per-layer:model=torchvision,name=convnext_tiny)
    FORWARDS_OPTIONS = True

    def __init__(self, name: str | None = None, /, model: Any = None, **options: Any) -> None:
        from .models import ModelWorkload

        own, passed = _own_and_passed(options)
        if isinstance(model, ModelWorkload):
            if passed:
                raise OptionError(
                    f"{PER_LAYER}: options {sorted(passed)} belong to the model, which is made already"
                )
            super().__init__(name or PER_LAYER, model=model.name, **own)
            self.model = model
        else:
            if model is not None:
                own["model"] = model
            super().__init__(name or PER_LAYER, **own)
            self.model = self._named_model(passed)
        if self.model.options.get("tp") is not None:
            raise OptionError(
                f"{PER_LAYER}:model={self.options['model']}: tp= measures a split model's prefill and decode; "
                "per-layer takes the model whole (leave tp out)"
            )
        self._check_combinations()
        self.decomposition: Decomposition | None = None
        #: the granularity and why, once set up
        self.granularity_choice: GranularityChoice | None = None
        self._plans: dict[int, UnitPlan] = {}
        self._whole: UnitPlan | None = None
        self._whole_kernels: GraphKernels | None = None  # one replay of the whole graph
        self._gaps_note = ""
        self._spans: dict[str, float] = {}

    def _named_model(self, passed: Mapping[str, Any]) -> ModelWorkload:
        """The model this wrapper's ``model`` option names, made with the options passed to it."""
        model_name = self.options["model"]
        cls = _model_class(model_name)
        self._check_passed(model_name, cls, passed)
        return cls(model_name, **passed)  # positional: a model may take a 'name' option

    @staticmethod
    def _check_passed(model_name: str, cls: type[ModelWorkload], passed: Mapping[str, Any]) -> None:
        allowed = sorted(o.name for o in cls.OPTIONS if o.name not in NOT_PASSED)
        unknown = _not_taken(cls, passed, allowed)
        if unknown:
            own = ", ".join(o.name for o in OWN_OPTIONS)
            raise OptionError(
                f"unknown option {unknown[0]!r} for {PER_LAYER}:model={model_name}. Valid options: "
                f"{own} (per-layer); {', '.join(allowed) or '(none)'} ({model_name})"
            )

    def _check_combinations(self) -> None:
        o = self.options
        where = f"{PER_LAYER}:model={o['model']}"
        if o["kernel_gaps"] and not o["validate"]:
            raise OptionError(
                f"{where}: kernel_gaps=true needs validate=true (the gap is measured on the whole model's graph)"
            )
        if o["lead_s"] and o["window_s"] is None:
            raise OptionError(
                f"{where}: lead_s needs window_s (without it the run's calibration replays each unit "
                "before its windows)"
            )

    def _span(self, name: str, seconds: float) -> None:
        self._spans[name] = self._spans.get(name, 0.0) + seconds

    # -- workload -----------------------------------------------------------------------------
    def run_defaults(self) -> Mapping[str, Any]:
        return dict(PIPELINE_RUN_DEFAULTS)

    def setup(self) -> None:
        from .unitplan import GranularityChoice

        model = self.model
        t0 = time.monotonic()
        model.build_model()
        self._span("build_model", time.monotonic() - t0)
        granularity = self.options["granularity"]
        t0 = time.monotonic()
        timed_inside = self._spans.get("capture", 0.0) + self._spans.get("probe", 0.0)
        if granularity == "auto":
            decomposition, choice = self._decompose_auto()
        else:
            decomposition = self._decompose(granularity)
            choice = GranularityChoice(granularity, f"{granularity} (asked for)")
        self.decomposition, self.granularity_choice = decomposition, choice
        model.finish_decomposition(decomposition)
        # the whole model's capture and timing for auto are counted as capture and probe
        timed_inside = self._spans.get("capture", 0.0) + self._spans.get("probe", 0.0) - timed_inside
        self._span("decompose", time.monotonic() - t0 - timed_inside)
        log.info("%s: %s", model.name, choice.reason)

    def _decompose(self, granularity: str) -> Decomposition:
        """The model's units at ``granularity``, recorded as the CUDA graphs that measure them
        will run the model (``layers.decompose``'s ``as_captured``) when the device is a GPU."""
        from .layers import decompose

        model = self.model
        on_gpu = model.device is not None and model.device.type == "cuda"
        return decompose(
            model.model, model.args, model.kwargs, granularity, model.block_names(), as_captured=on_gpu
        )

    def _decompose_auto(self) -> tuple[Decomposition, GranularityChoice]:
        """Leaf units, or blocks when leaf units would leave too much of the forward out
        (``unitplan.choose_granularity``), and why; times the whole model's graph to decide."""
        from .unitplan import GranularityChoice, choose_granularity, probe_step_s

        model = self.model
        blocks = model.block_names()
        leaf = self._decompose("leaf")
        if not blocks:
            return leaf, choose_granularity(leaf.single_kernel_calls, math.nan, False)
        plan = self._whole_plan()
        self._build(plan)
        if plan.steps is None:  # timed already when window_s is set
            t0 = time.monotonic()
            plan.step_s, _ = probe_step_s(plan.captured.step, plan.captured.sync)
            plan.probe_s = time.monotonic() - t0
            self._span("probe", plan.probe_s)
        whole_s = plan.step_s / plan.captured.unroll
        if not self.options["validate"]:  # measured only to decide
            plan.captured.release()
            plan.built = False
            self._whole = None
        choice = choose_granularity(leaf.single_kernel_calls, whole_s, True)
        if choice.granularity == "leaf":
            return leaf, choice
        block = self._decompose("block")
        if not any(u.type_name in blocks for u in block.units):
            return leaf, GranularityChoice("leaf", f"auto: leaf (none of the model's blocks {', '.join(blocks)} ran)")
        return block, choice

    def teardown(self) -> None:
        for plan in [*self._plans.values(), *([self._whole] if self._whole else [])]:
            if plan.built:
                plan.captured.release()
                plan.built = False
        self.model.teardown()

    def phases(self) -> Iterable[Phase]:
        assert self.decomposition is not None  # set by setup
        units = self.decomposition.units
        return _Phases(len(units) + bool(self.options["validate"]), self._phase_iter)

    def _phase_iter(self) -> Iterator[Phase]:
        assert self.decomposition is not None  # set by setup
        plans = [self._unit_plan(unit) for unit in self.decomposition.units]
        if self.options["validate"]:
            plans.append(self._whole_plan())
        if self.options["prepare"] == "ahead":
            for plan in plans:
                if plan.built:
                    continue
                if _memory_low(self.model.device):
                    log.info("prepare=ahead: GPU memory is low; the remaining units are captured one by one")
                    break
                plan.ahead = True
                self._build(plan)
        for plan in plans:
            yield self._phase(plan)

    def _unit_plan(self, unit) -> UnitPlan:
        device = self.model.device
        assert device is not None  # the model's setup ran
        l2 = l2_cache_bytes(device)
        copies = input_copies = 1
        if self.options["l2"] == "rotate" and unit.kind == "module" and device.type == "cuda":
            copies = copies_for(unit.params_bytes, l2)
        if self.options["activations"] == "rotate" and device.type == "cuda":
            input_copies = copies_for(unit.input_bytes(), l2)
        make_state, call = unit.call_factory(device, copies, input_copies)
        plan = UnitPlan(
            self._unique_name(unit),
            unit,
            Captured(make_state, call, self.options["unroll"], device),
            copies,
            input_copies,
        )
        self._plans[id(unit)] = plan
        return plan

    def _whole_plan(self) -> UnitPlan:
        if self._whole is None:
            self._whole = UnitPlan(WHOLE_MODEL, None, self.model.whole_graph())
        return self._whole

    def _unique_name(self, unit) -> str:
        taken = {p.name for p in self._plans.values()}
        name, n = unit.path, 1
        while name in taken:
            n += 1
            name = f"{unit.path} ({n})"
        return name

    def _build(self, plan: UnitPlan) -> None:
        """Capture the plan's graph; with ``window_s``, time its replays and count its steps."""
        from .unitplan import lead_steps, probe_step_s, steps_for_window

        t0 = time.monotonic()
        plan.captured.build()
        plan.built = True
        plan.capture_s = time.monotonic() - t0
        self._span("capture", plan.capture_s)
        window_s = self.options["window_s"]
        if window_s is not None:
            t0 = time.monotonic()
            plan.step_s, _ = probe_step_s(plan.captured.step, plan.captured.sync)
            plan.probe_s = time.monotonic() - t0
            self._span("probe", plan.probe_s)
            plan.steps = steps_for_window(plan.step_s, window_s)
            plan.lead = lead_steps(plan.step_s, self.options["lead_s"])

    def _phase(self, plan: UnitPlan) -> Phase:
        work = self.model.work() if plan.unit is None else None
        phase = plan.captured.phase(plan.name, work)
        if not plan.built and self.options["window_s"] is None:
            # as the run has always done it: captured in the phase's set-up, calibrated by the run
            def setup() -> None:
                self._build(plan)

            return dataclasses.replace(phase, setup=setup, teardown=self._teardown_for(plan))
        if not plan.built:
            self._build(plan)
        changes: dict[str, Any] = {"setup": None, "teardown": self._teardown_for(plan)}
        if plan.steps is not None:
            changes.update(
                iterations=plan.steps,
                warmup=plan.lead,
                note="; ".join(
                    n
                    for n in (
                        phase.note,
                        f"{plan.steps} replays of ~{plan.step_s * 1e3:.4g} ms timed at capture "
                        f"(window_s={self.options['window_s']:g})",
                    )
                    if n
                ),
            )
        return dataclasses.replace(phase, **changes)

    def _teardown_for(self, plan: UnitPlan) -> Callable[[], None]:
        def teardown() -> None:
            try:
                if plan.unit is None:  # the whole model: its kernels name what the units miss
                    self._profile_whole(plan)
            finally:
                plan.captured.release()
                plan.built = False

        return teardown

    def _profile_whole(self, plan: UnitPlan) -> None:
        """Profile a few replays of the whole model's graph, after its windows (the profiler
        never runs during a window): its kernels and their busy time give the launch gap, and
        split the closure's residual into gaps and kernel time (``closure.measured_split``)."""
        captured = plan.captured
        if not captured.on_gpu:
            self._gaps_note = "no CUDA graph on the CPU"
            return
        if captured.fallback is not None:
            self._gaps_note = f"the whole model ran eagerly ({captured.fallback})"
            return
        t0 = time.monotonic()
        try:
            from ..replay.graphgap import profile_replays

            self._whole_kernels = profile_replays(captured.step, captured.sync)
            if self._whole_kernels is None:
                self._gaps_note = "the profiler recorded no kernel in the graph's replays"
        except Exception as e:  # a profiler that cannot run must not cost the run
            self._gaps_note = f"profiling failed: {type(e).__name__}: {str(e)[:120]}"
            log.warning("profiling the whole model's graph: %s", self._gaps_note)
        finally:
            self._span("profile", time.monotonic() - t0)

    # -- results ------------------------------------------------------------------------------
    def derive(self, result) -> Sequence[DerivedTable]:
        if self.decomposition is None:
            return ()
        model = self.model
        pairs, in_forward = self._stages()
        extra = self._run_columns()
        closure = self._closure(result, pairs, in_forward) if self.options["validate"] else None
        if closure is not None:
            extra.update(
                whole_latency_s=closure.whole_latency_s,
                whole_energy_j=closure.whole_energy_j,
                latency_diff_pct=closure.latency_diff_pct,
                energy_diff_pct=closure.energy_diff_pct,
                validated_against=model.whole_note(),
                **closure.summary(),
            )
        tables = Pipeline(name=model.pipeline_name()).pipeline_tables(result, pairs, extra)
        rows = [dict(row) for row in tables[0].rows]
        if closure is not None and self.options["kernel_gaps"] and math.isfinite(closure.gap_per_kernel_s):
            self._add_gaps(rows, self._unit_figures(result, pairs, in_forward), closure.gap_per_kernel_s)
        tables[0] = self._layers_table(rows)
        if closure is not None:
            tables.append(
                DerivedTable(
                    "closure",
                    f"{model.pipeline_name()}: per-layer sum against {model.whole_note()}, per forward",
                    list(closure.rows),
                    note=f"granularity: {extra['granularity_choice']}; pct: of the whole model (sum "
                    "and residual: difference; launch gaps: share); every residual with its cause",
                )
            )
        return tables

    def _stages(self) -> tuple[list[tuple[Stage, str]], list[int]]:
        """Each unit as a stage with its name, and each unit's calls in the forward."""
        assert self.decomposition is not None  # set by setup
        stages = [self._stage(unit) for unit in self.decomposition.units]
        return [(stage, stage.name) for stage in stages], [u.measured_calls for u in self.decomposition.units]

    def _stage(self, unit) -> Stage:
        """A unit as a stage of the layers table, with how it was measured."""
        plan = self._plans.get(id(unit))
        info = {
            "type": unit.type_name,
            "inputs": unit.inputs(),
            "weight_copies": plan.copies if plan else 1,
            "input_copies": plan.input_copies if plan else 1,
            "kernels": unit.kernels,
            "execution": self._execution(plan),
            "capture_s": plan.capture_s if plan else math.nan,
        }
        if self.options["window_s"] is not None:
            info["steps_per_window"] = plan.steps if plan and plan.steps is not None else math.nan
        return Stage(plan.name if plan else unit.path, None, unit.count, info)

    def _granularity_reason(self) -> str:
        assert self.decomposition is not None  # set by setup
        choice = self.granularity_choice
        return choice.reason if choice else self.decomposition.granularity

    def _run_columns(self) -> dict[str, Any]:
        """The summary's columns of how the units were chosen and measured."""
        assert self.decomposition is not None  # set by setup
        window_s = self.options["window_s"]
        return {
            "granularity": self.decomposition.granularity,
            "granularity_choice": self._granularity_reason(),
            "blocks": self.model.blocks_note(),
            "unique_units": len(self.decomposition.units),
            "deduplicated_calls": self.decomposition.deduplicated,
            "l2": self.options["l2"],
            "activations": self.options["activations"],
            "window_s": window_s if window_s is not None else math.nan,
            "prepare": self.options["prepare"],
        }

    @staticmethod
    def _add_gaps(rows: list[dict[str, Any]], units: Sequence[Any], gap_per_kernel_s: float) -> None:
        """Each layer row with its launch gap, and its latency and energy with the gap added (at
        the unit's own power)."""
        from .closure import unit_gap_s

        for row, unit in zip(rows, units):
            gap = unit_gap_s(unit, gap_per_kernel_s)
            row["gap_s"] = gap
            row["latency_with_gap_s"] = row["latency_s"] + gap
            row["energy_with_gap_j"] = row["energy_j"] + gap * unit.power_w

    def _layers_table(self, rows: list[dict[str, Any]]) -> DerivedTable:
        assert self.decomposition is not None  # set by setup
        notes = [
            f"granularity: {self._granularity_reason()}",
            f"{self.decomposition.deduplicated} of {self.decomposition.calls} calls were identical to "
            "another and measured once (count); layers.csv has every column",
        ]
        return DerivedTable(
            "layers",
            f"{self.model.pipeline_name()}: per layer, per call",
            rows,
            note="; ".join(notes),
            display=(
                "stage",
                "type",
                "inputs",
                "count",
                "latency_s",
                "energy_j",
                "power_w",
                "total_energy_j",
                "share_of_latency_pct",
            ),
        )

    def _unit_figures(self, result, pairs, in_forward) -> list:
        """Each unit's per-call figures for the closure (``closure.UnitFigures``)."""
        from .closure import UnitFigures
        from .pipeline import stage_figures

        assert self.decomposition is not None  # set by setup
        out = []
        for (_stage, name), calls, unit in zip(pairs, in_forward, self.decomposition.units):
            fig = stage_figures(result, name, calls)[0]
            plan = self._plans.get(id(unit))
            graph = self._execution(plan) == "cuda graph"
            out.append(UnitFigures(name, calls, fig.latency_s, fig.energy_j, unit.kernels, graph))
        return out

    def _closure(self, result, pairs, in_forward):
        from .closure import ClosureContext, WholeFigures, close
        from .pipeline import stage_figures

        units = self._unit_figures(result, pairs, in_forward)
        whole_fig, whole_summary = stage_figures(result, WHOLE_MODEL)
        kernels, busy, span = self._whole_graph_per_forward()
        spreads = _energy_spreads_pct(result, pairs, whole_summary)
        gaps_note = self._gaps_note
        if not self.options["kernel_gaps"]:
            gaps_note = "kernel_gaps=true measures them"
        whole = self._whole
        whole_eager = whole.captured.fallback if whole is not None and whole.captured.on_gpu else None
        ctx = ClosureContext(
            whole_eager=whole_eager or "",
            l2=self.options["l2"],
            activations=self.options["activations"],
            weights_bytes=self._weights_bytes(),
            l2_bytes=l2_cache_bytes(self.model.device) if self.model.device is not None else 0,
            eager_units=sum(1 for u in units if not u.graph),
            gaps_note=gaps_note,
            spread_pct=max(spreads) if spreads else math.nan,
        )
        return close(
            units,
            WholeFigures(whole_fig.latency_s, whole_fig.energy_j, kernels, busy, span),
            ctx,
            self._whole_reference(),
            add_gaps=self.options["kernel_gaps"],
        )

    def _whole_graph_per_forward(self) -> tuple[float, float, float]:
        """The profiled whole graph's kernels, busy time and span per forward (a replay runs
        ``unroll`` forwards). Units: s; NaN where it was not profiled."""
        gk = self._whole_kernels
        if gk is None or self._whole is None:
            return math.nan, math.nan, math.nan
        per = self._whole.captured.unroll
        return gk.kernels / per, gk.busy_s / per, gk.span_s / per

    def _whole_reference(self) -> str:
        """How the whole model, the closure's reference, ran."""
        whole = self._whole
        if whole is not None and whole.captured.on_gpu:
            how = whole.captured.fallback or "one CUDA graph"
        else:
            how = "eagerly, on the CPU"
        return f"the forward, {self.model.options['whole_unroll']} per replay, {how}"

    def _weights_bytes(self) -> int:
        net = getattr(self.model, "model", None)
        if net is None:
            return 0
        tensors = list(net.parameters()) + list(net.buffers())
        return sum(t.numel() * t.element_size() for t in tensors)

    def _execution(self, plan: UnitPlan | None) -> str:
        if plan is None or not plan.captured.on_gpu:
            return "cpu eager"
        return plan.captured.fallback or "cuda graph"

    def info(self) -> Mapping[str, Any]:
        out = dict(self.model.info())
        if self.decomposition is not None:
            out["units"] = len(self.decomposition.units)
            out["calls"] = self.decomposition.calls
            out["deduplicated_calls"] = self.decomposition.deduplicated
            out["calls_without_kernels"] = self.decomposition.without_kernels
            out["host_checks_left_out"] = self.decomposition.host_checks
            out["granularity"] = self.decomposition.granularity
        if self.granularity_choice is not None:
            out["granularity_choice"] = self.granularity_choice.reason
        plans = list(self._plans.values())
        out["units_captured_ahead"] = sum(1 for p in plans if p.ahead)
        #: host time the wrapper spent preparing (inside the run's setup and phase_setup)
        out["prepare_timings_s"] = dict(self._spans)
        return out


#: the Python API name
PerLayer = PerLayerWorkload
