"""``per-layer``: a named model measured layer by layer, as a pipeline derived from the model.

    energyframe run --power nvml --workload per-layer:model=resnet50,batch=64,validate=true

The wrapper's own options are ``model``, ``granularity``, ``validate``, ``l2`` and ``unroll``;
every other key is the model's (``batch``, ``dtype``, ``image_size``, ``prompt_len`` ...) and is
passed through to it, checked against the options the model declares. One forward pass of the
model is decomposed into units (``layers.decompose``); each unique unit becomes a phase, captured
``unroll`` times per CUDA graph; ``validate=true`` adds the whole model as a last phase and
compares the per-layer sums with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import OptionError, UsageError
from ..interfaces import DerivedTable, Phase, Workload
from ..options import Option, Spec, parse_spec
from .graph import Captured, l2_cache_bytes
from .pipeline import PIPELINE_RUN_DEFAULTS, Pipeline, Stage

#: the registered name of the wrapper
PER_LAYER = "per-layer"
#: rotate at most this many copies of a layer's weights, and at most this many bytes of them
MAX_COPIES = 64
MAX_COPY_BYTES = 4 << 30
WHOLE_MODEL = "(whole model)"

GRANULARITY = Option(
    "granularity",
    "choice",
    "leaf",
    "per-layer units: leaf modules, or the model's blocks",
    choices=("leaf", "block"),
)
VALIDATE = Option("validate", "bool", False, "per-layer: also measure the whole model and compare")
L2 = Option(
    "l2",
    "choice",
    "rotate",
    "per-layer: rotate copies of each layer's weights (more than the L2) so "
    "they come from memory as in the model, or keep one copy (warm)",
    choices=("rotate", "warm"),
)
UNROLL = Option("unroll", "int", 100, "per-layer: calls captured per CUDA graph", minimum=1)
#: options of the wrapper; every other key of a per-layer spec belongs to the model
OWN_OPTIONS = (
    Option(
        "model",
        "str",
        required=True,
        help="a named model workload (resnet50, vit_b_16, opt-66b-prefill ...); its own options "
        "(batch, dtype ...) go beside this one",
    ),
    GRANULARITY,
    VALIDATE,
    L2,
    UNROLL,
)
#: model options that mean nothing per layer (the wrapper decides them)
NOT_PASSED = frozenset({"per_layer", "execution"} | {o.name for o in OWN_OPTIONS})


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
    from .. import registry
    from .models import ModelWorkload

    return [
        e.name
        for e in registry.entries(registry.WORKLOADS)
        if e.cls is not None and issubclass(e.cls, ModelWorkload) and e.cls.PER_LAYER
    ]


def _model_class(name: str) -> type:
    from .. import registry
    from .models import ModelWorkload

    cls = registry.load(registry.WORKLOADS, name)
    if not (issubclass(cls, ModelWorkload) and cls.PER_LAYER):
        raise OptionError(
            f"workload {name!r} has no per-layer mode. Models that have one: {', '.join(per_layer_models())}"
        )
    return cls


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

    def __init__(self, name: str | None = None, model: Any = None, **options: Any) -> None:
        from .models import ModelWorkload

        own = {k: v for k, v in options.items() if k in {o.name for o in OWN_OPTIONS}}
        passed = {k: v for k, v in options.items() if k not in own}
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
            model_name = self.options["model"]
            cls = _model_class(model_name)
            self._check_passed(model_name, cls, passed)
            self.model = cls(name=model_name, **passed)
        self.decomposition = None
        self._phase_of: dict[int, str] = {}
        self._copies: dict[int, int] = {}
        self._captured: dict[int, Captured] = {}

    @staticmethod
    def _check_passed(model_name: str, cls: type, passed: Mapping[str, Any]) -> None:
        allowed = sorted(o.name for o in cls.OPTIONS if o.name not in NOT_PASSED)
        unknown = [k for k in passed if k not in allowed]
        if unknown:
            own = ", ".join(o.name for o in OWN_OPTIONS)
            raise OptionError(
                f"unknown option {unknown[0]!r} for {PER_LAYER}:model={model_name}. Valid options: "
                f"{own} (per-layer); {', '.join(allowed) or '(none)'} ({model_name})"
            )

    # -- workload -----------------------------------------------------------------------------
    def run_defaults(self) -> Mapping[str, Any]:
        return dict(PIPELINE_RUN_DEFAULTS)

    def setup(self) -> None:
        from .layers import decompose

        model = self.model
        model.build_model()
        self.decomposition = decompose(
            model.model, model.args, model.kwargs, self.options["granularity"], model.BLOCKS
        )
        model.finish_decomposition(self.decomposition)

    def teardown(self) -> None:
        self.model.teardown()

    def phases(self) -> Sequence[Phase]:
        phases = [self._unit_phase(unit) for unit in self.decomposition.units]
        if self.options["validate"]:
            phases.append(self.model.whole_graph().phase(WHOLE_MODEL, self.model.work()))
        return phases

    def _unit_phase(self, unit) -> Phase:
        device = self.model.device
        copies = 1
        if (
            self.options["l2"] == "rotate"
            and unit.kind == "module"
            and unit.params_bytes
            and device.type == "cuda"
        ):
            l2 = l2_cache_bytes(device)
            copies = max(
                1, min(MAX_COPIES, math.ceil(2 * l2 / unit.params_bytes), MAX_COPY_BYTES // unit.params_bytes)
            )
        self._copies[id(unit)] = copies
        make_state, call = unit.call_factory(device, copies)
        name = self._unique_name(unit)
        self._phase_of[id(unit)] = name
        captured = Captured(make_state, call, self.options["unroll"], device)
        self._captured[id(unit)] = captured
        return captured.phase(name)

    def _unique_name(self, unit) -> str:
        taken = set(self._phase_of.values())
        name, n = unit.path, 1
        while name in taken:
            n += 1
            name = f"{unit.path} ({n})"
        return name

    def derive(self, result) -> Sequence[DerivedTable]:
        if self.decomposition is None:
            return ()
        model = self.model
        stages, pairs, in_forward = [], [], []
        for unit in self.decomposition.units:
            in_forward.append(unit.measured_calls)
            stage = Stage(
                self._phase_of.get(id(unit), unit.path),
                None,
                unit.count,
                {
                    "type": unit.type_name,
                    "inputs": unit.inputs(),
                    "weight_copies": self._copies.get(id(unit), 1),
                    "execution": self._execution(unit),
                },
            )
            stages.append(stage)
            pairs.append((stage, stage.name))
        pipeline = Pipeline(name=model.pipeline_name())
        extra: dict[str, Any] = {
            "granularity": self.decomposition.granularity,
            "unique_units": len(self.decomposition.units),
            "deduplicated_calls": self.decomposition.deduplicated,
            "l2": self.options["l2"],
        }
        if self.options["validate"]:
            from .pipeline import pipeline_totals, stage_figures

            whole, _ = stage_figures(result, WHOLE_MODEL)
            # like with like: each unit as often as it ran in the forward pass that was measured
            figures = [stage_figures(result, name, n)[0] for (s, name), n in zip(pairs, in_forward)]
            totals = pipeline_totals(figures, math.nan)
            extra.update(
                whole_latency_s=whole.latency_s,
                whole_energy_j=whole.energy_j,
                latency_diff_pct=100 * (totals["sum_latency_s"] / whole.latency_s - 1),
                energy_diff_pct=100 * (totals["sum_energy_j"] / whole.energy_j - 1),
                validated_against=model.whole_note(),
            )
        tables = pipeline.pipeline_tables(result, pairs, extra)
        tables[0] = DerivedTable(
            "layers",
            f"{model.pipeline_name()}: per layer, per call",
            tables[0].rows,
            note=f"{self.decomposition.deduplicated} of {self.decomposition.calls} calls were identical to "
            "another and measured once (count); layers.csv has every column",
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
        return tables

    def _execution(self, unit) -> str:
        captured = self._captured.get(id(unit))
        if captured is None or not captured.on_gpu:
            return "cpu eager"
        return captured.fallback or "cuda graph"

    def info(self) -> Mapping[str, Any]:
        out = dict(self.model.info())
        if self.decomposition is not None:
            out["units"] = len(self.decomposition.units)
            out["calls"] = self.decomposition.calls
            out["deduplicated_calls"] = self.decomposition.deduplicated
            out["calls_without_kernels"] = self.decomposition.without_kernels
        return out


#: the Python API name
PerLayer = PerLayerWorkload
