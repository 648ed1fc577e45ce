"""Language models at their real sizes with random weights (no downloads): BLOOM and OPT.

``mode=prefill`` measures one forward pass over ``seq_len`` prompt tokens (the earlier tool's
default of 5); ``mode=decode`` measures generating ``new_tokens`` tokens greedily after the
prompt, and per token. ``forward=static`` (what ``execution=graph`` uses) runs both through
``static_lm``: fixed masks and key/value cache, nothing sent to the host, so a CUDA graph can
capture a prefill or a whole decode; ``forward=transformers`` is the library's own forward and
``generate``. Any size by config: ``bloom:hidden=2048,layers=24,heads=16`` or the named
sizes (``bloom-560m``, ``opt-125m``, ``opt-350m``, ``opt-1.3b``). ``weights=PATH`` loads a local
state dict. Built with transformers' ``from_config`` (``energyframe[models]``); imported only
when the workload is set up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..errors import WorkloadError
from ..kit import extras
from ..model import Phase
from ..options import Option
from .graph import DTYPE_OPTION, device_sync
from .models import ModelRow, ModelWorkload, define_models

BLOOM_560M = {"hidden": 1024, "layers": 24, "heads": 16, "vocab": 250880}
OPT_125M = {"hidden": 768, "layers": 12, "heads": 12, "vocab": 50272}

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
    DTYPE_OPTION,
    Option(
        "execution",
        "choice",
        "eager",
        "eager, a CUDA graph (of the prefill, or of a whole decode), or torch.compile",
        choices=("eager", "graph", "compile"),
    ),
    Option(
        "forward",
        "choice",
        "auto",
        "transformers: the model's own forward and generate (masks built per call, host checks); "
        "static: fixed masks and key/value cache, no host sync (capturable); auto: static for "
        "execution=graph, else transformers",
        choices=("auto", "transformers", "static"),
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
    PER_LAYER = False

    def required_modules(self) -> tuple[str, ...]:
        return ("transformers", "torch")

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

    def forward_path(self) -> str:
        """``static`` or ``transformers``: what ``forward=auto`` means for this execution."""
        path = self.options["forward"]
        if path == "auto":
            return "static" if self.options["execution"] == "graph" else "transformers"
        return path

    def setup(self) -> None:
        super().setup()
        self.model.generation_config.pad_token_id = 0
        self.static = None
        if self.forward_path() == "static":
            from .static_lm import StaticLM

            o = self.options
            self.static = StaticLM(
                self.model, self.FAMILY, self.args[0], o["new_tokens"] if o["mode"] == "decode" else 0
            )

    def work(self) -> Mapping[str, float]:
        o = self.options
        tokens = o["seq_len"] if o["mode"] == "prefill" else o["new_tokens"]
        return {"tokens": float(o["batch"] * tokens)}

    def _forward(self, state) -> None:
        """One step: a prefill, or a whole greedy decode (prompt + new_tokens), by ``forward``."""
        if self.static is not None:
            if self.options["mode"] == "prefill":
                self.static.prefill()
            else:
                self.static.generate()
            return
        (ids,) = self.args
        if self.options["mode"] == "prefill":
            self.model(ids, use_cache=False)
        else:
            n = self.options["new_tokens"]
            self.model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)

    def phases(self) -> Sequence[Phase]:
        import torch

        o = self.options
        name = "forward" if o["mode"] == "prefill" else "generate"
        note = f"{self.forward_path()} forward"
        if o["mode"] == "decode":
            note = f"prompt of {o['seq_len']} + {o['new_tokens']} new tokens, greedy, {note}"
        if o["execution"] == "graph":
            self.whole_captured = self.whole_graph()
            phase = self.whole_captured.phase(name, self.work())
            return [dataclasses.replace(phase, note=f"{phase.note or 'cuda graph'}; {note}")]
        step_fn = self._forward
        if o["execution"] == "compile":
            step_fn = torch.compile(self._forward)

        def step() -> None:
            with torch.no_grad():
                step_fn(None)

        return [
            Phase(
                name,
                step=step,
                sync=device_sync(self.device),
                work=self.work(),
                note=f"{o['execution']}; {note}",
            )
        ]

    def pipeline_name(self) -> str:
        return f"{self.name}_{self.options['mode']}"

    def info(self) -> Mapping[str, Any]:
        out = dict(super().info())
        out.update(mode=self.options["mode"], seq_len=self.options["seq_len"], forward=self.forward_path())
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


#: the language models: entry name, class, description, family and size (a row per entry point)
LANGUAGE_MODELS = (
    ModelRow(
        "bloom",
        "Bloom",
        "BLOOM of any size by config (hidden, layers, heads, vocab); random weights; energyframe[models]",
        {"FAMILY": "bloom", "SIZE": BLOOM_560M},
    ),
    ModelRow(
        "bloom-560m",
        "Bloom560M",
        "BLOOM-560M (hidden 1024, 24 layers, 16 heads, vocabulary 250880); random weights; energyframe[models]",
        {"FAMILY": "bloom", "SIZE": BLOOM_560M},
    ),
    ModelRow(
        "opt",
        "OPT",
        "OPT of any size by config (hidden, layers, heads, vocab); random weights; energyframe[models]",
        {"FAMILY": "opt", "SIZE": OPT_125M},
    ),
    ModelRow(
        "opt-125m",
        "OPT125M",
        "OPT-125m (hidden 768, 12 layers, 12 heads); random weights; energyframe[models]",
        {"FAMILY": "opt", "SIZE": OPT_125M},
    ),
    ModelRow(
        "opt-350m",
        "OPT350M",
        "OPT-350m (hidden 1024, 24 layers, 16 heads, 512-d embeddings, post-LN); random weights; energyframe[models]",
        {
            "FAMILY": "opt",
            "SIZE": {"hidden": 1024, "layers": 24, "heads": 16, "vocab": 50272, "proj": 512, "pre_ln": 0},
        },
    ),
    ModelRow(
        "opt-1.3b",
        "OPT1_3B",
        "OPT-1.3b (hidden 2048, 24 layers, 32 heads); random weights; energyframe[models]",
        {"FAMILY": "opt", "SIZE": {"hidden": 2048, "layers": 24, "heads": 32, "vocab": 50272}},
    ),
)
LANGUAGE_CLASSES = define_models(LanguageModel, LANGUAGE_MODELS, globals())
