"""``hf:arch=...``: any transformers architecture, built from its configuration with overrides.

    energyframe run --workload hf:arch=LlamaForCausalLM,hidden_size=2048,num_hidden_layers=16,seq_len=512

``arch`` is a model class (``LlamaForCausalLM``, ``GPT2LMHeadModel``, ``BertModel``) or a model
type (``llama``, ``qwen2``: its causal LM where it has one, else its base model). Every key that is
not an option below is an attribute of the architecture's configuration (``hidden_size``,
``num_hidden_layers``, ...), converted to the type of the configuration's default and refused,
with the closest attribute names, when the configuration has no such attribute. Random weights,
built on the device; nothing is downloaded. ``weights=DIR`` loads a local checkpoint (a
``save_pretrained`` directory: its config, the overrides on top, and its weights), and
``weights=FILE`` a state dict into the configured model.

The model is given what its ``main_input_name`` says: token ids (``batch`` x ``seq_len``, and the
same as decoder ids for an encoder-decoder) or images (``batch`` x channels x ``image_size``\\ ²).
``mode=prefill`` measures one forward pass without a key/value cache; ``mode=decode`` generates
``new_tokens`` greedily (transformers' ``generate``, eager or compiled: it checks its stopping
criteria on the host, so no CUDA graph).

``tp=N`` measures a Llama-shaped causal LM (``LlamaForCausalLM``, ``MistralForCausalLM``,
``Qwen2ForCausalLM``, ...) as a serving stack runs it: split Megatron-style over N ranks
(``torchrun --nproc-per-node N``; ``tp=1`` on one GPU), its prefill and each decode one CUDA graph
replay (``tensor_parallel.py``), ``mode=prefill``, ``decode`` or ``both``. The random weights are
drawn from seed 0, the same on every rank.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import OptionError, WorkloadError
from ..kit import extras
from ..model import DerivedTable, Phase
from ..options import Option, _to_bool
from .anymodel import WHOLE_OPTIONS, GenericModel
from .graph import DTYPE_OPTION, Captured, device_sync

HF_OPTIONS = (
    Option(
        "arch",
        "str",
        None,
        "a transformers model class (LlamaForCausalLM, GPT2LMHeadModel, ...) or model type (llama, "
        "qwen2, ...); every other key is an attribute of its config (hidden_size=1024, ...); "
        "default with weights=DIR: the checkpoint's",
    ),
    Option(
        "mode",
        "choice",
        "prefill",
        "prefill: one forward pass; decode: generate new_tokens greedily; both (with tp): prefill, then decode",
        choices=("prefill", "decode", "both"),
    ),
    Option(
        "tp",
        "int",
        None,
        "split a Llama-shaped causal LM Megatron-style over tp ranks (torchrun --nproc-per-node tp; 1: "
        "one GPU), prefill and decode each one CUDA graph replay; execution=eager runs the same calls one by one",
        minimum=1,
    ),
    Option("batch", "int", 1, "sequences or images", minimum=1),
    Option("seq_len", "int", 5, "tokens per sequence", minimum=1),
    Option("new_tokens", "int", 16, "tokens generated per sequence (decode)", minimum=1),
    Option(
        "image_size",
        "int",
        None,
        "input height and width of a vision model (default: its config's)",
        minimum=8,
    ),
    DTYPE_OPTION,
    Option(
        "weights",
        "path",
        None,
        "a local checkpoint directory (save_pretrained) or state dict file (default: random weights)",
    ),
    *WHOLE_OPTIONS,
)
#: inputs a model can be given, by its ``main_input_name``
TEXT, IMAGES = "input_ids", "pixel_values"


def _transformers(feature: str, error: type = OptionError):
    return extras.require("transformers", feature, error)


def resolve_arch(arch: str, feature: str) -> tuple[Any, Any]:
    """``(model class, config class)`` for a model class name or a model type.

    Raises:
        OptionError: neither, with the closest names.
    """
    transformers = _transformers(feature)
    from transformers.models.auto import modeling_auto

    cls = getattr(transformers, arch, None) if arch[:1].isupper() else None
    if cls is not None and getattr(cls, "config_class", None) is not None:
        return cls, cls.config_class
    mappings = (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, modeling_auto.MODEL_MAPPING_NAMES)
    if arch in transformers.CONFIG_MAPPING:
        for mapping in mappings:
            if arch in mapping:
                cls = getattr(transformers, mapping[arch])
                return cls, cls.config_class
    names = [*transformers.CONFIG_MAPPING.keys(), *mappings[0].values(), *mappings[1].values()]
    known = sorted({n for n in names if isinstance(n, str)})
    close = difflib.get_close_matches(arch, known, n=5, cutoff=0.6)
    raise OptionError(
        f"transformers has no architecture {arch!r}: give a model class (LlamaForCausalLM, "
        f"GPT2LMHeadModel, ...) or a model type (llama, gpt2, ...)"
        + (f"; close: {', '.join(close)}" if close else "")
    )


def _typed(value: Any, default: Any, key: str, owner: str) -> Any:
    """A spec's string as the type of the config's default for ``key``."""
    if not isinstance(value, str) or isinstance(default, str):
        return value
    try:
        if isinstance(default, bool):
            return _to_bool(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        if default is None:
            return _guess(value)
    except ValueError as e:
        expects = {bool: "true or false", int: "an integer", float: "a number"}.get(type(default), "a value")
        raise OptionError(
            f"option {key!r} of {owner} expects {expects} (its config's default is {default!r}), got {value!r}"
        ) from e
    raise OptionError(f"option {key!r} of {owner} is a {type(default).__name__}, which a spec cannot set")


def _guess(value: str) -> Any:
    for convert in (int, float, _to_bool):
        try:
            return convert(value)
        except ValueError:
            pass
    return value


def config_overrides(config_class: Any, given: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """``given`` checked against the attributes of ``config_class()`` and typed as their defaults.

    Raises:
        OptionError: a key the configuration does not have (with the closest ones), or a value of
            the wrong type.
    """
    default = config_class()
    known = default.to_dict()
    out = {}
    for key, value in given.items():
        if key not in known and not hasattr(default, key):
            close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
            raise OptionError(
                f"unknown option {key!r} for {owner}: neither an option nor an attribute of "
                f"{config_class.__name__}" + (f" (close: {', '.join(close)})" if close else "")
            )
        out[key] = _typed(value, getattr(default, key, None), key, owner)
    return out


def _causal_sdpa(model) -> bool:
    """Whether the model attends causally through SDPA: its attention modules say they are
    causal (``is_causal``), and its config asks for SDPA."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    return any(getattr(m, "is_causal", False) is True for m in model.modules())


def causal_mask(batch: int, length: int, device):
    """The causal mask of ``length`` tokens, ``batch x 1 x length x length`` (True: attend).

    Given to a causal LM explicitly, so that its eager forward, its trace, its units and its CUDA
    graph run the same kernels: without one, transformers checks on the host (``.all()``) whether
    it may leave causality to SDPA, which it then does in an eager forward, but it builds this
    mask when a CUDA stream is capturing (no host reads there), and SDPA runs another kernel."""
    import torch

    return torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None].expand(batch, 1, length, length)


@contextlib.contextmanager
def _default_dtype(dtype) -> Iterator[None]:
    """Parameters made in this block are of ``dtype`` (no fp32 copy of a large model)."""
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


class HFModel(GenericModel):
    """A transformers architecture from its config with overrides, random weights."""

    DESCRIPTION = (
        "any transformers architecture from its config (arch=LlamaForCausalLM, gpt2, qwen2, ...; "
        "config keys as options: hidden_size=1024, ...); random weights; energyframe[models]"
    )
    OPTIONS = HF_OPTIONS
    ACCEPTS_OVERRIDES = True

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        given, overrides = self._declared_and_config(options)
        super().__init__(name, **given)
        o = self.options
        weights = o["weights"]
        checkpoint = weights is not None and Path(weights).is_dir()
        if o["arch"] is None and not checkpoint:
            raise OptionError(
                f"{self.name} needs option 'arch' (or weights=DIR, a checkpoint with its config)"
            )
        self.tp = o["tp"]
        self._check_execution(options)
        self.checkpoint = Path(weights) if checkpoint else None
        self.model_class, config_class = self._classes()
        if o["image_size"] is not None and hasattr(config_class(), "image_size"):
            overrides.setdefault("image_size", o["image_size"])  # a ViT's position embeddings
        self.overrides = config_overrides(config_class, overrides, f"workload {self.name!r}")

    @classmethod
    def _declared_and_config(cls, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The options the workload declares (and its name), and the rest: the config's keys."""
        declared = {o.name for o in cls.OPTIONS}
        given = {k: v for k, v in options.items() if k in declared or k == "name"}
        return given, {k: v for k, v in options.items() if k not in given}

    def _check_execution(self, given: Mapping[str, Any]) -> None:
        """The split path's checks with tp=N; without, refuse what only it can run, and a graph
        of transformers' generate."""
        o = self.options
        if self.tp is not None:
            self._check_tp(given)
        elif o["mode"] == "both":
            raise OptionError(f"{self.name}: mode=both measures a split model (tp=N); without tp give prefill or decode")
        elif o["mode"] == "decode" and o["execution"] == "graph":
            raise OptionError(
                f"{self.name}: execution=graph captures a forward pass; mode=decode runs transformers' "
                "generate, which checks its stopping criteria on the host (use execution=eager or compile, "
                "or tp=1: decode steps on fixed buffers, each one graph)"
            )

    def _check_tp(self, given: Mapping[str, Any]) -> None:
        """tp=N: the split path's execution (graph unless eager is asked for) and its ranks."""
        from .tensor_parallel import check_world

        o = self.options
        if o["execution"] == "compile":
            raise OptionError(f"{self.name}: tp= runs each step as one CUDA graph (execution=graph) or eagerly, not compiled")
        o["execution"] = "eager" if given.get("execution") == "eager" else "graph"
        check_world(self.name, self.tp, self.context, o["device"])
        self.engine: Any = None
        self._joined = False

    def required_modules(self) -> tuple[str, ...]:
        return ("transformers", "torch")

    def _classes(self) -> tuple[Any, Any]:
        arch = self.options["arch"]
        feature = f"workload {self.name!r}"
        if arch is not None:
            return resolve_arch(arch, feature)
        transformers = _transformers(feature)
        config = transformers.AutoConfig.from_pretrained(self.checkpoint, local_files_only=True)
        names = list(getattr(config, "architectures", None) or [])
        if not names:
            raise OptionError(f"{self.checkpoint}/config.json names no architecture: give arch=")
        return resolve_arch(names[0], feature)

    def label(self) -> str:
        return self.model_class.__name__

    def pipeline_name(self) -> str:
        return f"{self.label()}_b{self.options['batch']}_{self.dtype_name()}"

    def config(self):
        """The configuration: the class's defaults (or the checkpoint's) and the overrides."""
        if self.checkpoint is not None:
            transformers = _transformers(f"workload {self.name!r}", WorkloadError)
            return transformers.AutoConfig.from_pretrained(
                self.checkpoint, local_files_only=True, **self.overrides
            )
        return self.model_class.config_class(**self.overrides)

    def build(self, device, dtype):
        import torch

        config = self.config()
        if self.checkpoint is not None:
            model = self.model_class.from_pretrained(
                self.checkpoint, config=config, dtype=dtype, local_files_only=True
            )
            model = model.to(device)
        else:
            with torch.device(device), _default_dtype(dtype):
                model = self.model_class(config)
        model = model.eval()
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.pad_token_id = 0  # random ids have no padding; silences a warning
        args, kwargs = self._inputs(model, config, device, dtype)
        return model, args, kwargs

    def whole_graph(self) -> Captured:
        """As the named models', but capture is tried even though an eager forward synchronises:
        transformers checks its masks on the host (``.all()``) only when no stream captures."""
        return Captured(
            lambda device: None, self._forward, self.options["whole_unroll"], self.device, check_sync=False
        )

    def load_weights(self, path: Path) -> None:
        if self.checkpoint is None:  # a checkpoint directory was loaded in build
            super().load_weights(path)

    def _inputs(self, model, config, device, dtype) -> tuple[tuple, dict]:
        o = self.options
        kind = getattr(model, "main_input_name", TEXT)
        ids, kwargs = self._made_up_input(kind, config, device, dtype)
        parameters = inspect.signature(model.forward).parameters
        if o["mode"] == "prefill" and "use_cache" in parameters:
            kwargs["use_cache"] = False
        if kind == TEXT and o["mode"] == "prefill" and "attention_mask" in parameters and _causal_sdpa(model):
            kwargs["attention_mask"] = causal_mask(o["batch"], o["seq_len"], device)
        self.input_kind = kind
        return (ids,), kwargs

    def _made_up_input(self, kind: str, config, device, dtype) -> tuple[Any, dict[str, Any]]:
        """Random token ids (also the decoder's, for an encoder-decoder) or random images, as the
        model's main input names them.

        Raises:
            WorkloadError: the model takes another kind of input.
        """
        import torch

        o = self.options
        if kind == TEXT:
            ids = torch.randint(0, int(config.vocab_size), (o["batch"], o["seq_len"]), device=device)
            kwargs: dict[str, Any] = {}
            if getattr(config, "is_encoder_decoder", False):
                kwargs["decoder_input_ids"] = ids
            return ids, kwargs
        if kind == IMAGES:
            size = o["image_size"] or int(getattr(config, "image_size", 224))
            channels = int(getattr(config, "num_channels", 3))
            return torch.randn(o["batch"], channels, size, size, device=device, dtype=dtype), {}
        raise WorkloadError(
            f"{self.label()} takes {kind}, which hf: does not make up (it makes input_ids and "
            "pixel_values); give the model and its inputs with torch:factory= or ef.Model"
        )

    def work(self) -> Mapping[str, float]:
        o = self.options
        if getattr(self, "input_kind", TEXT) == IMAGES:
            return {"images": float(o["batch"])}
        tokens = o["seq_len"] if o["mode"] == "prefill" else o["new_tokens"]
        return {"tokens": float(o["batch"] * tokens)}

    def setup(self) -> None:
        if self.tp is not None:
            self._set_up_split()
            return
        super().setup()
        if self.options["mode"] == "decode" and not self.model.can_generate():
            raise WorkloadError(
                f"{self.label()} cannot generate (mode=decode): it has no language-model head"
            )

    def _set_up_split(self) -> None:
        """tp=N: the model built on this rank's device (seed 0 on every rank: the same weights
        everywhere), this rank's slice kept, the model dropped."""
        import torch

        from . import distributed
        from .tensor_parallel import TensorParallelLM

        w = self.context
        if w.distributed:
            device = distributed.rank_device(self.options["device"], w)
            distributed.join(device)
            self._joined = True
        torch.manual_seed(0)
        self.build_model()
        o = self.options
        self.config_diff = self.model.config.to_diff_dict()
        engine = TensorParallelLM(self.name, self.tp, w.rank, o["batch"], o["seq_len"], o["new_tokens"], o["execution"])
        engine.build(self.model, self.args[0])
        self.engine = engine
        del self.model, self.args, self.kwargs  # this rank keeps its slice only
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.empty_cache()

    def phases(self) -> Iterable[Phase]:
        if self.tp is not None:
            modes = ("prefill", "decode") if self.options["mode"] == "both" else (self.options["mode"],)
            w = self.context
            phases = self.engine.phases(modes, f"rank {w.rank} of {w.world_size}" if w.distributed else "")
            self.whole_captured = self.engine.captured(modes[0])  # what replay profiles
            return phases
        if self.options["mode"] == "prefill":
            return super().phases()
        import torch

        (ids,) = self.args
        n = self.options["new_tokens"]
        generate = self.model.generate
        if self.options["execution"] == "compile":
            self.model.forward = torch.compile(self.model.forward)

        def step() -> None:
            with torch.no_grad():
                generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)

        note = f"{self.options['execution']}; prompt of {self.options['seq_len']} + {n} new tokens, greedy"
        return [Phase("generate", step=step, sync=device_sync(self.device), work=self.work(), note=note)]

    def derive(self, result) -> Sequence[DerivedTable]:
        if self.tp is not None:
            return self.engine.derive(result, self.context) if self.engine is not None else ()
        return super().derive(result)

    def teardown(self) -> None:
        if self.tp is None:
            super().teardown()
            return
        if self.engine is not None:
            self._split_info = self.engine.info()
            self.engine.teardown()
        if self._joined:
            from . import distributed

            self._joined = False
            distributed.leave()

    def info(self) -> Mapping[str, Any]:
        if self.tp is not None:
            return self._split_info_now()
        out = dict(super().info())
        out.update(arch=self.label(), mode=self.options["mode"], config_overrides=dict(self.overrides))
        if hasattr(self, "model"):
            out["config"] = self.model.config.to_diff_dict()
        return out

    def _split_info_now(self) -> dict[str, Any]:
        w = self.context
        out: dict[str, Any] = {
            "model": self.label(),
            "arch": self.label(),
            "mode": self.options["mode"],
            "tp": self.tp,
            "rank": w.rank,
            "world_size": w.world_size,
            "dtype": self.dtype_name(),
            "config_overrides": dict(self.overrides),
            "config": getattr(self, "config_diff", None),
        }
        if self.device is not None:
            out["device"] = str(self.device)
        engine_info = self.engine.info() if self.engine is not None else getattr(self, "_split_info", {})
        out.update(engine_info)
        return out
