"""Named models: a whole forward pass, or (through the ``per-layer`` wrapper, ``--per-layer``)
a per-layer pipeline derived from the model with its exact layer inputs.

Vision models come from torchvision with random weights (no downloads; ``energyframe[models]``);
RepLKNet-31B and the OPT-66B layer are implemented in ``nets/``. ``weights=PATH`` loads a local state dict. The named
models are rows of tables (``VISION_MODELS``, ``OPT66B_MODES``; ``lm.LANGUAGE_MODELS``): each row
becomes the class its entry point names.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import OptionError, WorkloadError
from ..kit import extras
from ..model import Phase
from ..options import Option
from ..plugin import Workload
from .graph import DTYPE_OPTION, Captured, device_sync, dtype_name, l2_cache_bytes, torch_device, torch_dtype
from .perlayer_options import OWN_OPTIONS as PER_LAYER_OPTIONS
from .perlayer_options import PER_LAYER as PER_LAYER_WRAPPER

if TYPE_CHECKING:
    import torch

#: how the whole model runs: shared by the named models and those named by their library
WHOLE_UNROLL = Option(
    "whole_unroll", "int", 10, "forward passes captured per CUDA graph for the whole model", minimum=1
)
EXECUTION = Option(
    "execution",
    "choice",
    "eager",
    "whole model: eager, a CUDA graph of the forward, or torch.compile",
    choices=("eager", "graph", "compile"),
)
DEVICE = Option("device", "str", "auto", "cuda, cuda:N, cpu or auto")

COMMON_OPTIONS = (
    Option("batch", "int", 1, "batch size", minimum=1),
    DTYPE_OPTION,
    WHOLE_UNROLL,
    EXECUTION,
    Option("weights", "path", None, "a local state dict to load (default: random weights)"),
    DEVICE,
)

VISION_OPTIONS = (
    Option("image_size", "int", 224, "input height and width", minimum=32),
    Option("channels_last", "bool", True, "NHWC memory format for inputs and weights"),
)


@dataclass(frozen=True)
class ModelRow:
    """One named model: the name users type, the class it becomes, and the class attributes
    that set it apart from its base (``FACTORY``, ``BLOCKS``, ``OPTIONS``, ``SIZE`` ...)."""

    entry: str
    class_name: str
    description: str
    attributes: Mapping[str, Any] = field(default_factory=dict)


def define_models(base: type, rows: Iterable[ModelRow], namespace: dict) -> dict[str, type]:
    """One subclass of ``base`` per row, put into ``namespace`` (a module's globals) under its
    class name, which the entry point in pyproject.toml names. Returns them by entry name."""
    made = {}
    for row in rows:
        cls = type(
            row.class_name,
            (base,),
            {
                "__module__": namespace["__name__"],
                "__qualname__": row.class_name,
                "__doc__": row.description,
                "DESCRIPTION": row.description,
                **row.attributes,
            },
        )
        namespace[row.class_name] = cls
        made[row.entry] = cls
    return made


def import_object(path: str) -> Any:
    """``module:attribute`` (a relative module is taken from this package)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module, __package__), attribute)


class ModelWorkload(Workload):
    """Base of the named models: builds the model and measures its whole forward pass."""

    BLOCKS: ClassVar[tuple[str, ...]] = ()
    OPTIONS: ClassVar[Sequence[Option]] = COMMON_OPTIONS
    #: the model can be decomposed into layers (the ``per-layer`` wrapper takes it)
    PER_LAYER: ClassVar[bool] = True
    #: keys the model takes beyond ``OPTIONS`` (a transformers config's), checked by the model
    ACCEPTS_OVERRIDES: ClassVar[bool] = False

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        self._refuse_per_layer_options(name or options.get("name"), options)
        super().__init__(name, **options)  # positional: a model may take a 'name' option
        self.options.setdefault("whole_unroll", 1)  # models that declare their own options may lack it
        for module in self.required_modules():  # before anything starts: one line naming the extra
            extras.check(module, f"workload {self.name!r}")
        self.device: torch.device | None = None
        #: the whole model's CUDA graph (execution=graph), once phases() made it
        self.whole_captured: Captured | None = None

    def _refuse_per_layer_options(self, name: str | None, options: Mapping[str, Any]) -> None:
        """A model measured layer by layer is the per-layer wrapper's (``per-layer:model=NAME``):
        its options given to the model itself (``per_layer=true`` before 0.x) name the wrapper.

        Raises:
            OptionError: naming the spec (or, for a model made in Python, the call) that measures
                the model layer by layer.
        """
        declared = {o.name for o in self.OPTIONS}
        wrapper = {o.name for o in PER_LAYER_OPTIONS if o.name != "model"} | {"per_layer"}
        given = [k for k in options if k in wrapper and k not in declared]
        if not given:
            return
        key, value = given[0], options[given[0]]
        label, wrapped = self._wrapper_call(name, key, value)
        if key == "per_layer":
            raise OptionError(
                f"{label}: per_layer=true was removed in 0.x; measure layer by layer with {wrapped} (the same "
                "run; energyframe run --per-layer)"
            )
        raise OptionError(f"{label}: {key} is an option of the per-layer wrapper; use {wrapped}")

    def _wrapper_call(self, name: str | None, key: str, value: Any) -> tuple[str, str]:
        """The model's label and how the per-layer wrapper measures it with ``key=value``: a
        spec for a named model, the Python call for one made in Python."""
        if name is None:  # made in Python: ResNet18(granularity="block")
            label = type(self).__name__
            return label, f"ef.PerLayer(model={label}(...)" + (")" if key == "per_layer" else f", {key}={value!r})")
        return name, f"{PER_LAYER_WRAPPER}:model={name}" + ("" if key == "per_layer" else f",{key}={value}")

    # -- what subclasses provide --------------------------------------------------------------
    def required_modules(self) -> tuple[str, ...]:
        """Optional packages the model needs, checked when it is made (the library that builds
        it first: its extra brings torch too)."""
        return ("torch",)

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

    def block_names(self) -> tuple[str, ...]:
        """The module classes ``granularity=block`` measures whole (a named model's ``BLOCKS``;
        found in the model for one by name or by code, once it is built)."""
        return tuple(self.BLOCKS)

    def blocks_note(self) -> str:
        """Which blocks and how they were decided, for the per-layer tables."""
        return "named: " + ", ".join(self.BLOCKS) if self.BLOCKS else "none"

    # -- workload -----------------------------------------------------------------------------
    def dtype_name(self) -> str:
        return dtype_name(self.options["dtype"], self.device)

    def setup(self) -> None:
        self.build_model()

    def build_model(self) -> None:
        """Build the model and its example inputs on the device; load ``weights``."""
        import torch

        self.device = torch_device(self.options["device"], self.context)
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

    def _forward(self, state) -> None:
        self.model(*self.args, **self.kwargs)

    def whole_graph(self) -> Captured:
        """``whole_unroll`` forward passes, captured as one CUDA graph on a GPU."""
        return Captured(lambda device: None, self._forward, self.options["whole_unroll"], self.device)

    def phases(self) -> Iterable[Phase]:
        return [self._whole_phase()]

    def _whole_phase(self) -> Phase:
        execution = self.options["execution"]
        if execution == "graph":
            self.whole_captured = self.whole_graph()
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
        if hasattr(self, "model"):
            out["parameters"] = sum(p.numel() for p in self.model.parameters())
        return out


class VisionModel(ModelWorkload):
    """An image classifier with random weights, made by ``FACTORY`` (``module:function``)."""

    #: the function that makes the model, as ``module:function``
    FACTORY: ClassVar[str] = ""
    #: options passed to ``FACTORY`` by name (ViT takes its image size)
    FACTORY_OPTIONS: ClassVar[tuple[str, ...]] = ()
    OPTIONS = COMMON_OPTIONS + VISION_OPTIONS

    def required_modules(self) -> tuple[str, ...]:
        package = self._extra_package()  # imported in setup
        return (package, "torch") if package else ("torch",)

    def _extra_package(self) -> str | None:
        """The optional package ``FACTORY`` comes from (torchvision), if any."""
        package = self.FACTORY.split(":")[0].split(".")[0]
        return package if package in extras.EXTRA_OF else None

    def make_model(self):
        package = self._extra_package()
        if package:  # installed but broken: one line that says so
            extras.require(package, f"workload {self.name!r}", WorkloadError)
        factory = import_object(self.FACTORY)
        kwargs = {name: self.options[name] for name in self.FACTORY_OPTIONS}
        if self.FACTORY.startswith("torchvision."):
            kwargs["weights"] = None
        return factory(**kwargs)

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


def _vision(entry, class_name, description, factory, blocks, **more) -> ModelRow:
    return ModelRow(entry, class_name, description, {"FACTORY": factory, "BLOCKS": blocks, **more})


VIT_OPTIONS = COMMON_OPTIONS + (
    Option("image_size", "int", 224, "input height and width (a multiple of 16)", minimum=32),
    Option("channels_last", "bool", False, "NHWC memory format for the input"),
)
#: the vision models: entry name, class, description, factory, blocks (for granularity=block)
VISION_MODELS = (
    _vision(
        "resnet18",
        "ResNet18",
        "ResNet-18 (torchvision, random weights; energyframe[models])",
        "torchvision.models:resnet18",
        ("BasicBlock",),
    ),
    _vision(
        "resnet50",
        "ResNet50",
        "ResNet-50 (torchvision, random weights; energyframe[models])",
        "torchvision.models:resnet50",
        ("Bottleneck",),
    ),
    _vision(
        "mobilenet_v3_small",
        "MobileNetV3Small",
        "MobileNetV3-Small (torchvision, random weights; energyframe[models])",
        "torchvision.models:mobilenet_v3_small",
        ("InvertedResidual",),
    ),
    _vision(
        "efficientnet_b0",
        "EfficientNetB0",
        "EfficientNet-B0 (torchvision, random weights; energyframe[models])",
        "torchvision.models:efficientnet_b0",
        ("MBConv",),
    ),
    _vision(
        "vit_b_16",
        "ViTB16",
        "ViT-B/16 (torchvision, random weights; energyframe[models])",
        "torchvision.models:vit_b_16",
        ("EncoderBlock",),
        FACTORY_OPTIONS=("image_size",),
        OPTIONS=VIT_OPTIONS,
    ),
    _vision(
        "replknet31b",
        "RepLKNet31B",
        "RepLKNet-31B (inference form, kernels 31/29/27/13; implemented here)",
        ".nets.replknet:replknet31b",
        ("RepLKBlock", "ConvFFN"),
    ),
)
VISION_CLASSES = define_models(VisionModel, VISION_MODELS, globals())


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


#: OPT-66B's two modes, one layer each
OPT66B_MODES = (
    ModelRow(
        "opt-66b-prefill",
        "OPT66BPrefill",
        "OPT-66B prefill per layer (hidden 9216, 72 heads, FFN 36864, 64 layers)",
        {"MODE": "prefill"},
    ),
    ModelRow(
        "opt-66b-decode",
        "OPT66BDecode",
        "OPT-66B decode per layer: one new token against a kv_len key/value cache",
        {"MODE": "decode"},
    ),
)
OPT66B_CLASSES = define_models(OPT66B, OPT66B_MODES, globals())
