"""Any image classifier by name: ``torchvision:name=convnext_tiny`` and ``timm:name=...``.

Random weights, built on the device, no download (``weights=PATH`` loads a local state dict):
the same options as the named vision models (``batch``, ``dtype``, ``image_size``,
``channels_last``, ``execution``, ``whole_unroll``, ``device``), and ``blocks=`` for per-layer.
torchvision and timm come with ``energyframe[models]``; the name is
checked against the library's own list before anything starts, with the closest names.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from ..errors import OptionError, WorkloadError
from ..kit import extras
from ..options import Option
from .anymodel import WHOLE_OPTIONS, GenericModel
from .graph import DTYPE_OPTION

ZOO_OPTIONS = (
    Option("batch", "int", 1, "batch size", minimum=1),
    DTYPE_OPTION,
    Option("channels_last", "bool", True, "NHWC memory format for inputs and weights"),
    Option("weights", "path", None, "a local state dict to load (default: random weights)"),
    *WHOLE_OPTIONS,
)


def _unknown_name(library: str, name: str, names: list[str]) -> OptionError:
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
    hint = f"; close: {', '.join(close)}" if close else ""
    return OptionError(f"{library} has no model {name!r} ({len(names)} known{hint})")


class ZooModel(GenericModel):
    """An image classifier from a library's registry of architectures."""

    LIBRARY = ""

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        super().__init__(name, **options)
        names = self.known_names()
        if self.options["name"] not in names:
            raise _unknown_name(self.LIBRARY, self.options["name"], names)

    def required_modules(self) -> tuple[str, ...]:
        return (self.LIBRARY, "torch")

    def known_names(self) -> list[str]:
        raise NotImplementedError

    def label(self) -> str:
        return self.options["name"]

    def pipeline_name(self) -> str:
        return f"{self.label()}_b{self.options['batch']}_{self.dtype_name()}"

    def library(self):
        return extras.require(self.LIBRARY, f"workload {self.name!r}", WorkloadError)

    def make(self) -> tuple[Any, int]:
        """The model with random weights, and the input height and width it takes."""
        raise NotImplementedError

    def build(self, device, dtype):
        import torch

        o = self.options
        with torch.device(device):  # built in place: no copy of the weights through host memory
            model, size = self.make()
        model = model.eval().to(dtype=dtype)
        x = torch.randn(o["batch"], 3, size, size, device=device, dtype=dtype)
        if o["channels_last"]:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        self.image_size = size
        return model, (x,), {}

    def work(self) -> Mapping[str, float]:
        return {"images": float(self.options["batch"])}

    def info(self) -> Mapping[str, Any]:
        out = dict(super().info())
        out["library"] = self.LIBRARY
        if hasattr(self, "image_size"):
            out["image_size"] = self.image_size
        return out


class TorchvisionModel(ZooModel):
    """``torchvision:name=NAME``: any classifier of ``torchvision.models.list_models()``."""

    DESCRIPTION = (
        "any torchvision classifier by name (name=convnext_tiny, swin_t, ...); random weights; "
        "energyframe[models]"
    )
    LIBRARY = "torchvision"
    OPTIONS = (
        Option(
            "name", "str", required=True, help="a torchvision classifier (torchvision.models.list_models())"
        ),
        *ZOO_OPTIONS,
        Option("image_size", "int", 224, "input height and width", minimum=32),
    )

    def known_names(self) -> list[str]:
        models = self.library().models
        return sorted(models.list_models(module=models))

    def make(self) -> tuple[Any, int]:
        models = self.library().models
        name, size = self.options["name"], self.options["image_size"]
        model = models.get_model(name, weights=None)
        if getattr(model, "image_size", size) != size:
            # a ViT is made for one image size, which its builder takes
            model = models.get_model(name, weights=None, image_size=size)
        return model, size


class TimmModel(ZooModel):
    """``timm:name=NAME``: any model of ``timm.list_models()``."""

    DESCRIPTION = "any timm model by name (name=convnext_tiny, vit_small_patch16_224, ...); random weights; energyframe[models]"
    LIBRARY = "timm"
    OPTIONS = (
        Option("name", "str", required=True, help="a timm model (timm.list_models())"),
        *ZOO_OPTIONS,
        Option("image_size", "int", None, "input height and width (default: the model's own)", minimum=32),
    )

    def known_names(self) -> list[str]:
        return list(self.library().list_models())

    def make(self) -> tuple[Any, int]:
        timm = self.library()
        name, size = self.options["name"], self.options["image_size"]
        model = timm.create_model(name, pretrained=False)
        own = int(model.pretrained_cfg.get("input_size", (3, 224, 224))[-1])
        if size is None or size == own:
            return model, own
        try:  # models made for one size (ViT) take it; convolutional ones take any size as is
            return timm.create_model(name, pretrained=False, img_size=size), size
        except TypeError:
            return model, size
