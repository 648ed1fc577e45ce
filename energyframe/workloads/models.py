"""Named models: a whole forward pass, or (``per_layer=true``, ``--per-layer``) a per-layer
pipeline derived from the model with its exact layer inputs.

Vision models come from torchvision with random weights (no downloads; ``energyframe[models]``);
RepLKNet-31B and the OPT-66B layer are implemented in ``nets/``. ``weights=PATH`` loads a local
state dict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .. import extras
from ..errors import OptionError, WorkloadError
from ..interfaces import DerivedTable, Phase, Workload
from ..options import Option
from .graph import Captured, device_sync, l2_cache_bytes, torch_device, torch_dtype
from .pipeline import PIPELINE_RUN_DEFAULTS, Pipeline, Stage

#: rotate at most this many copies of a layer's weights, and at most this many bytes of them
MAX_COPIES = 64
MAX_COPY_BYTES = 4 << 30

COMMON_OPTIONS = (
    Option("batch", "int", 1, "batch size", minimum=1),
    Option(
        "dtype",
        "choice",
        "auto",
        "element type (auto: fp16 on a GPU, fp32 on the CPU)",
        choices=("auto", "fp16", "bf16", "fp32"),
    ),
    Option("per_layer", "bool", False, "measure layer by layer (a per-layer pipeline) instead of whole"),
    Option(
        "granularity",
        "choice",
        "leaf",
        "per-layer units: leaf modules, or the model's blocks",
        choices=("leaf", "block"),
    ),
    Option("validate", "bool", False, "per-layer: also measure the whole model and compare"),
    Option(
        "l2",
        "choice",
        "rotate",
        "per-layer: rotate copies of each layer's weights (more than the L2) so "
        "they come from memory as in the model, or keep one copy (warm)",
        choices=("rotate", "warm"),
    ),
    Option("unroll", "int", 100, "per-layer: calls captured per CUDA graph", minimum=1),
    Option(
        "whole_unroll", "int", 10, "forward passes captured per CUDA graph for the whole model", minimum=1
    ),
    Option(
        "execution",
        "choice",
        "eager",
        "whole model: eager, a CUDA graph of the forward, or torch.compile",
        choices=("eager", "graph", "compile"),
    ),
    Option("weights", "path", None, "a local state dict to load (default: random weights)"),
    Option("device", "str", "auto", "cuda, cuda:N, cpu or auto"),
)

VISION_OPTIONS = (
    Option("image_size", "int", 224, "input height and width", minimum=32),
    Option("channels_last", "bool", True, "NHWC memory format for inputs and weights"),
)


class ModelWorkload(Workload):
    """Base of the named models: builds the model, then one whole phase or one phase per unit."""

    BLOCKS: ClassVar[tuple[str, ...]] = ()
    OPTIONS = COMMON_OPTIONS

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        for key, default in (
            ("per_layer", False),
            ("validate", False),
            ("whole_unroll", 1),
            ("l2", "warm"),
            ("granularity", "leaf"),
            ("unroll", 100),
        ):
            self.options.setdefault(key, default)  # models without a per-layer mode lack these
        if self.options["validate"] and not self.options["per_layer"]:
            raise OptionError(
                f"{self.name}: validate compares a per-layer run with the whole model; set per_layer=true"
            )
        self.device = None
        self.decomposition = None
        self._pipeline: Pipeline | None = None
        self._phase_of: dict[int, str] = {}
        self._copies: dict[int, int] = {}
        self._captured: dict[int, Captured] = {}
        #: the whole model's CUDA graph (execution=graph), once phases() made it
        self.whole_captured: Captured | None = None

    # -- what subclasses provide --------------------------------------------------------------
    def build(self, device, dtype) -> tuple[Any, tuple, dict]:
        """The model (eval mode, on ``device``) and its example arguments."""
        raise NotImplementedError

    def work(self) -> Mapping[str, float]:
        """Work per forward pass by unit (images, tokens)."""
        return {"items": float(self.options["batch"])}

    def finish_decomposition(self, decomposition) -> None:
        """Adjust counts after decomposing (OPT counts its one layer 64 times)."""

    def whole_note(self) -> str:
        return "the whole model"

    # -- workload -----------------------------------------------------------------------------
    def run_defaults(self) -> Mapping[str, Any]:
        return dict(PIPELINE_RUN_DEFAULTS) if self.options["per_layer"] else {}

    def dtype_name(self) -> str:
        name = self.options["dtype"]
        if name == "auto":
            return "fp16" if self.device is not None and self.device.type == "cuda" else "fp32"
        return name

    def setup(self) -> None:
        import torch

        self.device = torch_device(self.options["device"])
        dtype = torch_dtype(self.dtype_name())
        try:
            self.model, self.args, self.kwargs = self.build(self.device, dtype)
        except torch.cuda.OutOfMemoryError as e:
            raise WorkloadError(f"{self.name} does not fit on {self.device}: {e}") from e
        if self.options["weights"] is not None:
            state = torch.load(self.options["weights"], map_location=self.device)
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            if missing or unexpected:
                raise WorkloadError(
                    f"weights {self.options['weights']}: missing {missing[:3]}, unexpected {unexpected[:3]}"
                )
        if self.options["per_layer"]:
            from .layers import decompose

            self.decomposition = decompose(
                self.model, self.args, self.kwargs, self.options["granularity"], self.BLOCKS
            )
            self.finish_decomposition(self.decomposition)

    def _forward(self, state) -> None:
        self.model(*self.args, **self.kwargs)

    def _whole(self) -> Captured:
        return Captured(lambda device: None, self._forward, self.options["whole_unroll"], self.device)

    def phases(self) -> Sequence[Phase]:
        if not self.options["per_layer"]:
            return [self._whole_phase()]
        phases = [self._unit_phase(unit) for unit in self.decomposition.units]
        if self.options["validate"]:
            phases.append(self._whole().phase("(whole model)", self.work()))
        return phases

    def _whole_phase(self) -> Phase:
        execution = self.options["execution"]
        if execution == "graph":
            self.whole_captured = self._whole()
            return self.whole_captured.phase("forward", self.work())
        model = self.model
        if execution == "compile":
            import torch

            model = torch.compile(self.model)
        args, kwargs = self.args, self.kwargs
        import torch

        def step() -> None:
            with torch.no_grad():
                model(*args, **kwargs)

        return Phase("forward", step=step, sync=device_sync(self.device), work=self.work(), note=execution)

    def _unit_phase(self, unit) -> Phase:
        copies = 1
        if (
            self.options["l2"] == "rotate"
            and unit.kind == "module"
            and unit.params_bytes
            and self.device.type == "cuda"
        ):
            l2 = l2_cache_bytes(self.device)
            copies = max(
                1, min(MAX_COPIES, math.ceil(2 * l2 / unit.params_bytes), MAX_COPY_BYTES // unit.params_bytes)
            )
        self._copies[id(unit)] = copies
        make_state, call = unit.call_factory(self.device, copies)
        name = self._unique_name(unit)
        self._phase_of[id(unit)] = name
        captured = Captured(make_state, call, self.options["unroll"], self.device)
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
        if not self.options["per_layer"] or self.decomposition is None:
            return ()
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
        pipeline = Pipeline(name=self.pipeline_name())
        extra: dict[str, Any] = {
            "granularity": self.decomposition.granularity,
            "unique_units": len(self.decomposition.units),
            "deduplicated_calls": self.decomposition.deduplicated,
            "l2": self.options["l2"],
        }
        if self.options["validate"]:
            from .pipeline import pipeline_totals, stage_figures

            whole, _ = stage_figures(result, "(whole model)")
            # like with like: each unit as often as it ran in the forward pass that was measured
            figures = [stage_figures(result, name, n)[0] for (s, name), n in zip(pairs, in_forward)]
            totals = pipeline_totals(figures, math.nan)
            extra.update(
                whole_latency_s=whole.latency_s,
                whole_energy_j=whole.energy_j,
                latency_diff_pct=100 * (totals["sum_latency_s"] / whole.latency_s - 1),
                energy_diff_pct=100 * (totals["sum_energy_j"] / whole.energy_j - 1),
                validated_against=self.whole_note(),
            )
        tables = pipeline.pipeline_tables(result, pairs, extra)
        tables[0] = DerivedTable(
            "layers",
            f"{self.pipeline_name()}: per layer, per call",
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

    def pipeline_name(self) -> str:
        return f"{self.name}_b{self.options['batch']}_{self.dtype_name()}"

    def info(self) -> Mapping[str, Any]:
        import torch

        out: dict[str, Any] = {"model": self.name, "dtype": self.dtype_name(), "torch": torch.__version__}
        if self.device is not None:
            out["device"] = str(self.device)
            if self.device.type == "cuda":
                out["gpu"] = torch.cuda.get_device_name(self.device)
                out["l2_bytes"] = l2_cache_bytes(self.device)
            else:
                out["execution_note"] = "cpu, eager: no CUDA graph"
        if self.whole_captured is not None and self.whole_captured.on_gpu:
            out["execution"] = self.whole_captured.fallback or "cuda graph"
        if self.decomposition is not None:
            out["units"] = len(self.decomposition.units)
            out["calls"] = self.decomposition.calls
            out["deduplicated_calls"] = self.decomposition.deduplicated
            out["calls_without_kernels"] = self.decomposition.without_kernels
        if hasattr(self, "model"):
            out["parameters"] = sum(p.numel() for p in self.model.parameters())
        return out


class VisionModel(ModelWorkload):
    """A torchvision image classifier with random weights."""

    #: the torchvision model function; empty for the models implemented here
    TORCHVISION: ClassVar[str] = ""
    OPTIONS = COMMON_OPTIONS + VISION_OPTIONS

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        if self.TORCHVISION:  # before anything starts; torchvision is imported in setup
            extras.check("torchvision", f"workload {self.name!r}")

    def _torchvision(self):
        """The torchvision module, or a ``WorkloadError`` naming the extra."""
        return extras.require("torchvision", f"workload {self.name!r}", WorkloadError)

    def make_model(self):
        return getattr(self._torchvision().models, self.TORCHVISION)(weights=None)

    def build(self, device, dtype):
        import torch

        o = self.options
        with torch.device(device):  # build in place: no copy of the weights through host memory
            model = self.make_model()
        model = model.eval().to(dtype=dtype)
        x = torch.randn(o["batch"], 3, o["image_size"], o["image_size"], device=device, dtype=dtype)
        if o["channels_last"]:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        return model, (x,), {}

    def work(self) -> Mapping[str, float]:
        return {"images": float(self.options["batch"])}


class ResNet18(VisionModel):
    DESCRIPTION = "ResNet-18 (torchvision, random weights; energyframe[models])"
    TORCHVISION = "resnet18"
    BLOCKS = ("BasicBlock",)


class ResNet50(VisionModel):
    DESCRIPTION = "ResNet-50 (torchvision, random weights; energyframe[models])"
    TORCHVISION = "resnet50"
    BLOCKS = ("Bottleneck",)


class MobileNetV3Small(VisionModel):
    DESCRIPTION = "MobileNetV3-Small (torchvision, random weights; energyframe[models])"
    TORCHVISION = "mobilenet_v3_small"
    BLOCKS = ("InvertedResidual",)


class EfficientNetB0(VisionModel):
    DESCRIPTION = "EfficientNet-B0 (torchvision, random weights; energyframe[models])"
    TORCHVISION = "efficientnet_b0"
    BLOCKS = ("MBConv",)


class ViTB16(VisionModel):
    DESCRIPTION = "ViT-B/16 (torchvision, random weights; energyframe[models])"
    TORCHVISION = "vit_b_16"
    BLOCKS = ("EncoderBlock",)
    OPTIONS = COMMON_OPTIONS + (
        Option("image_size", "int", 224, "input height and width (a multiple of 16)", minimum=32),
        Option("channels_last", "bool", False, "NHWC memory format for the input"),
    )

    def make_model(self):
        return self._torchvision().models.vit_b_16(weights=None, image_size=self.options["image_size"])


class RepLKNet31B(VisionModel):
    DESCRIPTION = "RepLKNet-31B (inference form, kernels 31/29/27/13; implemented here)"
    BLOCKS = ("RepLKBlock", "ConvFFN")

    def make_model(self):
        from .nets.replknet import replknet31b

        return replknet31b()


class OPT66B(ModelWorkload):
    """OPT-66B at its real dimensions: one decoder layer measured, counted 64 times."""

    MODE: ClassVar[str] = "prefill"
    BLOCKS = ("OPTDecoderLayer",)
    OPTIONS = COMMON_OPTIONS + (
        Option("prompt_len", "int", 512, "prompt tokens per sequence (prefill)", minimum=1),
        Option("kv_len", "int", 512, "tokens already in the key/value cache (decode)", minimum=1),
        Option("layers", "int", 64, "decoder layers the measured one stands for", minimum=1),
    )

    def build(self, device, dtype):
        import torch

        from .nets.opt import OPT_66B, OPTSlice, example_inputs

        o = self.options
        with torch.device(device):  # 2 billion parameters: build them where they will run
            model = OPTSlice(OPT_66B)
        model = model.eval().to(dtype=dtype)
        args = example_inputs(OPT_66B, o["batch"], self.MODE, o["prompt_len"], o["kv_len"], device, dtype)
        return model, args, {}

    def finish_decomposition(self, decomposition) -> None:
        decomposition.repeat("layers.0", self.options["layers"])

    def work(self) -> Mapping[str, float]:
        tokens = self.options["prompt_len"] if self.MODE == "prefill" else 1
        return {"tokens": float(self.options["batch"] * tokens)}

    def whole_note(self) -> str:
        return "embeddings + one decoder layer + LM head (the per-layer sum counted once)"


class OPT66BPrefill(OPT66B):
    DESCRIPTION = "OPT-66B prefill per layer (hidden 9216, 72 heads, FFN 36864, 64 layers)"
    MODE = "prefill"


class OPT66BDecode(OPT66B):
    DESCRIPTION = "OPT-66B decode per layer: one new token against a kv_len key/value cache"
    MODE = "decode"
