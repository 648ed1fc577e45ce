"""Language models at their real sizes with random weights (no downloads): BLOOM and OPT.

``mode=prefill`` measures one forward pass over ``seq_len`` prompt tokens (the earlier tool's
default of 5); ``mode=decode`` measures generating ``new_tokens`` tokens greedily after the
prompt, and per token. Any size by config: ``bloom:hidden=2048,layers=24,heads=16`` or the named
sizes (``bloom-560m``, ``opt-125m``, ``opt-350m``, ``opt-1.3b``). ``weights=PATH`` loads a local
state dict. Built with transformers' ``from_config`` (``energyframe[models]``); imported only
when the workload is set up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .. import extras
from ..errors import WorkloadError
from ..interfaces import Phase
from ..options import Option
from .graph import device_sync
from .models import ModelWorkload

LM_OPTIONS = (
    Option(
        "mode",
        "choice",
        "prefill",
        "prefill: one forward over the prompt; decode: generate new_tokens",
        choices=("prefill", "decode"),
    ),
    Option("batch", "int", 1, "sequences", minimum=1),
    Option("seq_len", "int", 5, "prompt tokens per sequence", minimum=1),
    Option("new_tokens", "int", 16, "tokens generated per sequence (decode)", minimum=1),
    Option(
        "dtype",
        "choice",
        "auto",
        "element type (auto: fp16 on a GPU, fp32 on the CPU)",
        choices=("auto", "fp16", "bf16", "fp32"),
    ),
    Option(
        "execution",
        "choice",
        "eager",
        "eager, a CUDA graph of the forward (prefill), or torch.compile",
        choices=("eager", "graph", "compile"),
    ),
    Option("weights", "path", None, "a local state dict to load (default: random weights)"),
    Option("device", "str", "auto", "cuda, cuda:N, cpu or auto"),
    Option("hidden", "int", None, "hidden size (override)", minimum=8),
    Option("layers", "int", None, "decoder layers (override)", minimum=1),
    Option("heads", "int", None, "attention heads (override)", minimum=1),
    Option("vocab", "int", None, "vocabulary size (override)", minimum=16),
)


class LanguageModel(ModelWorkload):
    """A causal LM from a transformers config; prefill or greedy decode."""

    FAMILY: ClassVar[str] = ""
    SIZE: ClassVar[Mapping[str, int]] = {}
    OPTIONS = LM_OPTIONS

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        extras.check("transformers", f"workload {self.name!r}")  # before anything starts

    def _transformers(self):
        """The transformers module, or a ``WorkloadError`` naming the extra."""
        return extras.require("transformers", f"workload {self.name!r}", WorkloadError)

    def config(self):
        transformers = self._transformers()
        sizes = dict(self.SIZE)
        for key in ("hidden", "layers", "heads", "vocab"):
            if self.options[key] is not None:
                sizes[key] = self.options[key]
        if self.FAMILY == "bloom":
            return transformers.BloomConfig(
                vocab_size=sizes["vocab"],
                hidden_size=sizes["hidden"],
                n_layer=sizes["layers"],
                n_head=sizes["heads"],
            )
        ffn = sizes.get("ffn", 4 * sizes["hidden"])
        if self.options["hidden"] is not None:
            ffn = 4 * sizes["hidden"]
        return transformers.OPTConfig(
            vocab_size=sizes["vocab"],
            hidden_size=sizes["hidden"],
            num_hidden_layers=sizes["layers"],
            num_attention_heads=sizes["heads"],
            ffn_dim=ffn,
            word_embed_proj_dim=sizes.get("proj", sizes["hidden"]),
            do_layer_norm_before=sizes.get("pre_ln", 1) == 1,
            max_position_embeddings=2048,
        )

    def build(self, device, dtype):
        import torch

        transformers = self._transformers()
        config = self.config()
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        model = model.eval()
        o = self.options
        ids = torch.randint(0, config.vocab_size, (o["batch"], o["seq_len"]), device=device)
        return model, (ids,), {}

    def setup(self) -> None:
        super().setup()
        self.model.generation_config.pad_token_id = 0

    def work(self) -> Mapping[str, float]:
        o = self.options
        tokens = o["seq_len"] if o["mode"] == "prefill" else o["new_tokens"]
        return {"tokens": float(o["batch"] * tokens)}

    def phases(self) -> Sequence[Phase]:
        if self.options["mode"] == "prefill":
            return [self._whole_phase()]
        import torch

        model, (ids,), n = self.model, self.args, self.options["new_tokens"]

        def generate() -> None:
            with torch.no_grad():
                model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)

        return [
            Phase(
                "generate",
                step=generate,
                sync=device_sync(self.device),
                work=self.work(),
                note=f"prompt of {self.options['seq_len']} + {n} new tokens, greedy",
            )
        ]

    def _forward(self, state) -> None:
        self.model(*self.args, use_cache=False)

    def pipeline_name(self) -> str:
        return f"{self.name}_{self.options['mode']}"

    def info(self) -> Mapping[str, Any]:
        out = dict(super().info())
        out.update(mode=self.options["mode"], seq_len=self.options["seq_len"])
        if hasattr(self, "model"):
            out["config"] = {
                k: v
                for k, v in self.model.config.to_dict().items()
                if k
                in (
                    "hidden_size",
                    "n_layer",
                    "num_hidden_layers",
                    "n_head",
                    "num_attention_heads",
                    "vocab_size",
                    "ffn_dim",
                )
            }
        return out


class Bloom(LanguageModel):
    DESCRIPTION = (
        "BLOOM of any size by config (hidden, layers, heads, vocab); random weights; energyframe[models]"
    )
    FAMILY = "bloom"
    SIZE = {"hidden": 1024, "layers": 24, "heads": 16, "vocab": 250880}


class Bloom560M(Bloom):
    DESCRIPTION = "BLOOM-560M (hidden 1024, 24 layers, 16 heads, vocabulary 250880); random weights; energyframe[models]"


class OPT(LanguageModel):
    DESCRIPTION = (
        "OPT of any size by config (hidden, layers, heads, vocab); random weights; energyframe[models]"
    )
    FAMILY = "opt"
    SIZE = {"hidden": 768, "layers": 12, "heads": 12, "vocab": 50272}


class OPT125M(OPT):
    DESCRIPTION = "OPT-125m (hidden 768, 12 layers, 12 heads); random weights; energyframe[models]"


class OPT350M(OPT):
    DESCRIPTION = "OPT-350m (hidden 1024, 24 layers, 16 heads, 512-d embeddings, post-LN); random weights; energyframe[models]"
    SIZE = {"hidden": 1024, "layers": 24, "heads": 16, "vocab": 50272, "proj": 512, "pre_ln": 0}


class OPT1_3B(OPT):
    DESCRIPTION = "OPT-1.3b (hidden 2048, 24 layers, 32 heads); random weights; energyframe[models]"
    SIZE = {"hidden": 2048, "layers": 24, "heads": 32, "vocab": 50272}
