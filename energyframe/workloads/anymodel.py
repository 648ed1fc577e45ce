"""Any model, by code: ``ef.Model(module, inputs)`` and ``torch:factory=pkg.module:function``.

Both are measured as the named models are (``models.ModelWorkload``): the whole forward pass
(``execution=eager|graph|compile``), layer by layer through the ``per-layer`` wrapper, traced and
replayed. ``GenericModel`` is their base and that of the models by name (``zoo.py``: torchvision
and timm; ``hf.py``: transformers): the blocks per-layer measures are found from the module tree
(``blocks.py``) unless ``blocks=`` names them, and run.json says which and how.

``torch:factory=mypkg.nets:make`` imports ``mypkg.nets`` (the working directory is searched
first; ``path/to/file.py:make`` loads a file) and calls ``make`` once the run sets up. It returns
the model and its example inputs: ``(model, inputs)`` or ``(model, args, kwargs)``, where
``inputs`` is a tensor, a tuple of arguments or a dict of keyword arguments. Of ``batch``,
``device`` and ``dtype``, the factory is given those its signature names; the model and every
tensor of its inputs are then moved to the run's device (and, with ``dtype=`` other than
``keep``, their floating-point tensors converted).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import OptionError, WorkloadError
from ..options import Option
from .graph import dtype_name, torch_device, torch_dtype
from .models import DEVICE, EXECUTION, WHOLE_UNROLL, ModelWorkload

#: the whole-model and per-layer options every model by name or code takes
BLOCKS_OPTION = Option(
    "blocks",
    "list",
    None,
    "per-layer blocks: module class names (default: found, the module classes that repeat side by "
    "side in a container, innermost)",
)
KEEP_DTYPE_OPTION = Option(
    "dtype",
    "choice",
    "keep",
    "element type: keep (as the model was made), auto (fp16 on a GPU, fp32 on the CPU), fp16, bf16, fp32",
    choices=("keep", "auto", "fp16", "bf16", "fp32"),
)
WHOLE_OPTIONS = (WHOLE_UNROLL, EXECUTION, DEVICE, BLOCKS_OPTION)


def _moved(value: Any, device, dtype) -> Any:
    """``value`` with every tensor moved to ``device`` (and floating-point ones to ``dtype``)."""
    import torch

    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            return value.to(device=device, dtype=dtype)
        return value.to(device=device)
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _moved(v, device, dtype) for k, v in value.items()}
    return value


def split_inputs(inputs: Any, owner: str) -> tuple[tuple, dict]:
    """Example inputs as ``(args, kwargs)``: a tensor is one argument, a tuple or list the
    arguments, a dict the keyword arguments, a pair ``(tuple, dict)`` both."""
    import torch

    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    raise WorkloadError(
        f"{owner}: example inputs must be a tensor, a tuple of arguments or a dict of keyword "
        f"arguments, not {type(inputs).__name__}"
    )


def first_batch(args: Sequence[Any], kwargs: Mapping[str, Any]) -> float:
    """The leading dimension of the first tensor input: items per forward pass (NaN if none)."""
    import torch

    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return float(value.shape[0])
    return math.nan


class GenericModel(ModelWorkload):
    """Base of the models by name or by code: blocks found or asked for, the model's own dtype,
    a label for tables (``convnext_tiny``, ``LlamaForCausalLM``) apart from the plugin name."""

    #: how the model's blocks were decided (``blocks.FoundBlocks``), once built
    found_blocks: Any = None

    def label(self) -> str:
        """The model's own name, for tables and run.json."""
        return self.name

    def dtype_name(self) -> str:
        name = self.options["dtype"]
        if name != "keep":
            return dtype_name(name, self.device)
        model = getattr(self, "model", None)
        floats = [p.dtype for p in model.parameters() if p.is_floating_point()] if model is not None else []
        if not floats:
            return "keep"
        return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(
            str(floats[0]).replace("torch.", ""), str(floats[0]).replace("torch.", "")
        )

    def target_dtype(self):
        """The torch dtype the model is converted to, or ``None`` for ``dtype=keep``."""
        name = self.options["dtype"]
        return None if name == "keep" else torch_dtype(dtype_name(name, self.device))

    def build_model(self) -> None:
        """Build the model and its inputs on the device; load ``weights``; decide the blocks."""
        import torch

        from .blocks import asked_blocks, find_blocks

        self.device = torch_device(self.options["device"])
        try:
            self.model, self.args, self.kwargs = self.build(self.device, self.target_dtype())
        except torch.cuda.OutOfMemoryError as e:
            raise WorkloadError(f"{self.label()} does not fit on {self.device}: {e}") from e
        if self.options.get("weights") is not None:
            self.load_weights(self.options["weights"])
        asked = self.options["blocks"]
        self.found_blocks = asked_blocks(self.model, asked) if asked else find_blocks(self.model)

    def block_names(self) -> tuple[str, ...]:
        return self.found_blocks.names if self.found_blocks is not None else ()

    def blocks_note(self) -> str:
        return self.found_blocks.describe() if self.found_blocks is not None else ""

    def load_weights(self, path: Path) -> None:
        """A state dict (``torch.save``'s file, or ``.safetensors``) into the model."""
        import torch

        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device=str(self.device))
        else:
            state = torch.load(path, map_location=self.device)
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise WorkloadError(f"weights {path}: missing {missing[:3]}, unexpected {unexpected[:3]}")

    def work(self) -> Mapping[str, float]:
        items = first_batch(self.args, self.kwargs) if hasattr(self, "args") else math.nan
        return {"items": items} if math.isfinite(items) else {}

    def pipeline_name(self) -> str:
        return f"{self.label()}_{self.dtype_name()}"

    def info(self) -> Mapping[str, Any]:
        out = dict(super().info())
        out["model"] = self.label()
        out["dtype"] = self.dtype_name()
        if self.found_blocks is not None:
            out["blocks"] = self.blocks_note()
        return out


def _call_factory(factory: Callable[..., Any], offered: Mapping[str, Any], owner: str) -> Any:
    """Call ``factory`` with those of ``offered`` its signature names."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C function: nothing to offer
        parameters = {}  # type: ignore[assignment]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    given = {k: v for k, v in offered.items() if (k in parameters or takes_any) and v is not None}
    return factory(**given)


def _unpack(made: Any, owner: str) -> tuple[Any, tuple, dict]:
    """A factory's ``(model, inputs)`` or ``(model, args, kwargs)``."""
    import torch

    if isinstance(made, tuple) and len(made) == 3 and isinstance(made[2], dict):
        model, args, kwargs = made
        args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    elif isinstance(made, tuple) and len(made) == 2:
        model, inputs = made
        args, kwargs = split_inputs(inputs, owner)
    else:
        raise WorkloadError(
            f"{owner} must return (model, inputs) or (model, args, kwargs), not {type(made).__name__}"
        )
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(f"{owner} returned a {type(model).__name__} as the model, not a torch.nn.Module")
    return model, args, kwargs


def import_factory(path: str) -> Callable[..., Any]:
    """``pkg.module:function`` (the working directory searched first) or ``file.py:function``.

    Raises:
        OptionError: not ``module:function``, a module or file that cannot be imported, or no
            such function in it (one line, with the cause).
    """
    module_name, sep, attribute = path.rpartition(":")
    if not sep or not module_name or not attribute:
        raise OptionError(f"factory {path!r} must be module:function (mypkg.nets:make or nets.py:make)")
    try:
        if module_name.endswith(".py"):
            module = _load_file(Path(module_name))
        else:
            cwd = str(Path.cwd())
            added = cwd not in sys.path
            if added:
                sys.path.insert(0, cwd)
            try:
                module = importlib.import_module(module_name)
            finally:
                if added:
                    sys.path.remove(cwd)
    except OptionError:
        raise
    except Exception as e:  # the user's module failed to import: say why, in one line
        raise OptionError(f"factory {path!r}: cannot import {module_name}: {type(e).__name__}: {e}") from e
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise OptionError(f"factory {path!r}: {module_name} has no function {attribute!r}")
    return factory


def _load_file(file: Path) -> Any:
    if not file.is_file():
        raise OptionError(f"factory file {str(file)!r} does not exist")
    spec = importlib.util.spec_from_file_location(f"energyframe_factory_{file.stem}", file)
    assert spec is not None and spec.loader is not None  # a .py file always has a loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FactoryModel(GenericModel):
    """``torch:factory=pkg.module:function``: the model and example inputs a function returns."""

    DESCRIPTION = (
        "any PyTorch model from a function of yours, factory=pkg.module:function returning "
        "(model, inputs); per-layer, trace and replay as the named models"
    )
    OPTIONS = (
        Option("factory", "str", required=True, help="pkg.module:function or path/file.py:function"),
        Option("batch", "int", None, "passed to the factory if it takes batch", minimum=1),
        KEEP_DTYPE_OPTION,
        Option("weights", "path", None, "a local state dict to load (default: the factory's weights)"),
        *WHOLE_OPTIONS,
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self.factory = import_factory(self.options["factory"])  # a typo is refused before anything starts

    def label(self) -> str:
        return self.options["factory"].rpartition(":")[2]

    def build(self, device, dtype):
        owner = f"factory {self.options['factory']}"
        offered = {"batch": self.options["batch"], "device": device, "dtype": dtype}
        model, args, kwargs = _unpack(_call_factory(self.factory, offered, owner), owner)
        model = model.eval().to(device=device)
        if dtype is not None:
            model = model.to(dtype=dtype)
        return model, _moved(args, device, dtype), _moved(kwargs, device, dtype)


class Model(GenericModel):
    """Your own module and example inputs, wherever a workload is accepted::

        ef.run(ef.Model(net, x), power=["nvml"])
        ef.run(ef.PerLayer(model=ef.Model(net, x), validate=True), power=["nvml"])

    Args:
        module: a ``torch.nn.Module``.
        inputs: a tensor, a tuple of arguments, or a dict of keyword arguments.
        kwargs: keyword arguments beside a tuple of ``inputs``.
        name: the model's name in tables and run.json (default: the module's class name).
        work: work per forward pass by unit (``{"images": 8}``); default: the first input's
            leading dimension as ``items``.
        **options: ``dtype`` (default ``keep``), ``device``, ``execution``, ``whole_unroll``,
            ``blocks``, as the ``torch`` workload takes them.
    """

    DESCRIPTION = "a torch.nn.Module and its example inputs, from Python (ef.Model(module, inputs))"
    OPTIONS = (KEEP_DTYPE_OPTION, *WHOLE_OPTIONS)

    def __init__(
        self,
        module: Any,
        inputs: Any = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        work: Mapping[str, float] | None = None,
        **options: Any,
    ) -> None:
        import torch

        if not isinstance(module, torch.nn.Module):
            raise WorkloadError(f"ef.Model needs a torch.nn.Module, not {type(module).__name__}")
        super().__init__(name or type(module).__name__, **options)
        args, more = split_inputs(inputs, f"ef.Model({self.name})")
        self.module, self._args, self._kwargs = module, args, {**more, **(kwargs or {})}
        self._work = dict(work) if work is not None else None

    def build(self, device, dtype):
        model = self.module.eval().to(device=device)
        if dtype is not None:
            model = model.to(dtype=dtype)
        return model, _moved(self._args, device, dtype), _moved(self._kwargs, device, dtype)

    def work(self) -> Mapping[str, float]:
        return self._work if self._work is not None else super().work()
