"""``vicuna-7b``: a Llama model at Vicuna-7B's real size (random weights, no downloads), split
over ``tp`` ranks with ``torch.distributed.tensor.parallel``.

The configuration is built here from Vicuna-7B's published numbers (v1.1/v1.3, a fine-tuned
Llama-7B): hidden 4096, 32 layers, 32 heads (no grouped-query attention), MLP 11008, vocabulary
32000, RMS-norm eps 1e-6, rotary theta 10000 — transformers' ``LlamaConfig`` defaults. Every
decoder layer is split Megatron-style: q, k, v, gate and up projections column-parallel (each
rank holds ``heads / tp`` heads and ``intermediate / tp`` MLP features), o and down projections
row-parallel, so each layer all-reduces twice per forward, after attention and after the MLP.
Embeddings, norms and the LM head are replicated.

``tp=1`` runs in one process. ``tp>1`` runs under ``torchrun --nproc-per-node TP``: one process
per rank, ``LOCAL_RANK`` picks the GPU, NCCL between GPUs (gloo between CPU processes). Phases:
``prefill`` (one forward over the prompt, writing the KV cache) and ``decode`` (``new_tokens``
greedy tokens, one forward each, against the prompt's KV cache).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import WorkloadError
from ..kit import extras
from ..model import DerivedTable, Phase, WorkloadContext
from ..options import Option
from ..plugin import Workload
from . import distributed
from .cache_keyword import find_cache_keyword
from .graph import DTYPE_OPTION, WINDOW_S_OPTION, device_sync, dtype_name, torch_device, torch_dtype

if TYPE_CHECKING:
    import torch

#: Vicuna-7B (v1.1/v1.3) as published: a Llama-7B
VICUNA_7B = {"hidden": 4096, "layers": 32, "heads": 32, "intermediate": 11008, "vocab": 32000}
RMS_NORM_EPS = 1e-6
ROPE_THETA = 10000.0
MAX_POSITIONS = 2048
TP_SIZES = ("1", "2", "4", "8")
#: the Megatron split of a Llama decoder layer: column-parallel in, row-parallel out
COLUMN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
ROW = ("self_attn.o_proj", "mlp.down_proj")
#: all-reduces per decoder layer per forward: after attention and after the MLP
ALL_REDUCES_PER_LAYER = 2

OPTIONS = (
    Option(
        "tp",
        "choice",
        "1",
        "tensor-parallel ranks; tp>1 runs under torchrun --nproc-per-node TP, one process per rank",
        choices=TP_SIZES,
    ),
    Option(
        "mode",
        "choice",
        "prefill",
        "prefill: one forward over the prompt; decode: new_tokens greedy tokens on its KV cache; both",
        choices=("prefill", "decode", "both"),
    ),
    Option("batch", "int", 1, "sequences", minimum=1),
    Option("seq_len", "int", 512, "prompt tokens per sequence", minimum=1),
    Option("new_tokens", "int", 16, "tokens generated per sequence and decode step", minimum=1),
    DTYPE_OPTION,
    Option("device", "str", "auto", "auto, cuda or cpu (with tp>1 each rank takes cuda:LOCAL_RANK)"),
    Option("weights", "path", None, "a local (unsplit) state dict to load (default: random weights)"),
    Option("seed", "int", 0, "seed of the random weights (the same on every rank)"),
    WINDOW_S_OPTION,
    Option("hidden", "int", None, "hidden size (override; shrinks the model)", minimum=8),
    Option("layers", "int", None, "decoder layers (override)", minimum=1),
    Option("heads", "int", None, "attention heads (override)", minimum=1),
    Option(
        "intermediate",
        "int",
        None,
        "MLP features (override; default with hidden: Llama's 8/3 x hidden, a multiple of 256)",
        minimum=1,
    ),
    Option("vocab", "int", None, "vocabulary size (override)", minimum=16),
)


def llama_intermediate(hidden: int, multiple_of: int = 256) -> int:
    """Llama's MLP width for a hidden size: 2/3 of 4 x hidden, rounded up (4096 -> 11008)."""
    return multiple_of * -(-int(8 * hidden / 3) // multiple_of)


class VicunaTP(Workload):
    """Vicuna-7B (a Llama) split over tp ranks; prefill and decode with a KV cache."""

    DESCRIPTION = (
        "Vicuna-7B (Llama: hidden 4096, 32 layers, 32 heads, MLP 11008) split over tp=1|2|4|8 ranks "
        "(torchrun), prefill and decode; random weights; energyframe[models]"
    )
    OPTIONS = OPTIONS
    SIZE: ClassVar[Mapping[str, int]] = VICUNA_7B

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        for module in ("transformers", "torch"):  # before anything starts
            extras.check(module, f"workload {self.name!r}")
        self.tp = int(self.options["tp"])
        self.sizes = self._sizes()
        self._check_split()
        self._check_world()
        self.device: torch.device | None = None
        self.model: Any = None  # a transformers model, made in setup
        self.ids: torch.Tensor | None = None
        self._joined = False
        self._prompt: list | None = None
        self._first: torch.Tensor | None = None
        self._parameters: int | None = None  # on this rank, counted at set-up
        self._cache_keyword = ""  # the model's keyword for its KV cache, found at set-up

    @property
    def world(self) -> WorkloadContext:
        """This process among the ranks (the workload's context)."""
        return self.context

    # -- configuration ------------------------------------------------------------------------
    def _sizes(self) -> dict[str, int]:
        sizes = dict(self.SIZE)
        o = self.options
        for key in ("hidden", "layers", "heads", "vocab", "intermediate"):
            if o[key] is not None:
                sizes[key] = o[key]
        if o["hidden"] is not None and o["intermediate"] is None:
            sizes["intermediate"] = llama_intermediate(sizes["hidden"])
        return sizes

    def _check_split(self) -> None:
        s, tp, name = self.sizes, self.tp, self.name
        if s["hidden"] % s["heads"]:
            raise WorkloadError(f"{name}: hidden {s['hidden']} is not a multiple of the {s['heads']} heads")
        if s["heads"] % tp:
            fits = ", ".join(t for t in TP_SIZES if s["heads"] % int(t) == 0)
            raise WorkloadError(
                f"{name}: tp={tp} does not divide the {s['heads']} attention heads; use tp={fits}"
            )
        if s["intermediate"] % tp:
            raise WorkloadError(
                f"{name}: tp={tp} does not divide the MLP's {s['intermediate']} features; "
                "set intermediate to a multiple of tp"
            )

    def _check_world(self) -> None:
        w, tp, name = self.world, self.tp, self.name
        if w.world_size != tp:
            where = f"WORLD_SIZE is {w.world_size}" if w.launched else "WORLD_SIZE is not set"
            if tp == 1:
                raise WorkloadError(
                    f"{name}: tp=1 runs in one process, but {where}; run it without torchrun, "
                    f"or set tp={w.world_size}"
                )
            raise WorkloadError(
                f"{name}: tp={tp} runs one process per rank, {tp} in all, but {where}; "
                f"run it under torchrun --nproc-per-node {tp}"
            )
        if tp > 1 and self.options["device"] in ("auto", "cuda"):
            import torch

            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if (gpus or self.options["device"] == "cuda") and gpus < tp:
                raise WorkloadError(
                    f"{name}: tp={tp} needs {tp} GPUs, one per rank, but torch sees {gpus}; "
                    "use device=cpu to run the ranks on the CPU"
                )

    def config(self):
        """The transformers ``LlamaConfig`` (Vicuna-7B's numbers, or the overrides)."""
        import transformers

        s, o = self.sizes, self.options
        return transformers.LlamaConfig(
            vocab_size=s["vocab"],
            hidden_size=s["hidden"],
            intermediate_size=s["intermediate"],
            num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"],
            num_key_value_heads=s["heads"],
            rms_norm_eps=RMS_NORM_EPS,
            rope_theta=ROPE_THETA,
            max_position_embeddings=max(MAX_POSITIONS, o["seq_len"] + o["new_tokens"]),
            tie_word_embeddings=False,
        )

    def dtype_name(self) -> str:
        return dtype_name(self.options["dtype"], self.device)

    # -- workload -----------------------------------------------------------------------------
    def setup(self) -> None:
        import torch

        transformers = extras.require("transformers", f"workload {self.name!r}", WorkloadError)
        if self.world.distributed:
            self.device = distributed.rank_device(self.options["device"], self.world)
            distributed.join(self.device)
            self._joined = True
        else:
            self.device = torch_device(self.options["device"], self.context)
        dtype = torch_dtype(self.dtype_name())
        config = self.config()
        torch.manual_seed(self.options["seed"])  # every rank draws the same weights
        try:
            with torch.device(self.device):
                model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
        except torch.cuda.OutOfMemoryError as e:
            raise WorkloadError(f"{self.name} does not fit on {self.device}: {e}") from e
        if self.options["weights"] is not None:
            state = torch.load(self.options["weights"], map_location=self.device)
            missing, unexpected = model.load_state_dict(state, strict=False)
            if missing or unexpected:
                raise WorkloadError(
                    f"weights {self.options['weights']}: missing {missing[:3]}, unexpected {unexpected[:3]}"
                )
        model = model.eval()
        if self.tp > 1:
            split(model, self.device, self.tp)
        self.model = model
        # counted here: info() is read for run.json after teardown has dropped the model
        self._parameters = sum(_local(p).numel() for p in model.parameters())
        o = self.options
        generator = torch.Generator().manual_seed(o["seed"])
        self.ids = torch.randint(0, config.vocab_size, (o["batch"], o["seq_len"]), generator=generator).to(
            self.device
        )
        self._cache_keyword = self._find_cache_keyword()

    def _find_cache_keyword(self) -> str:
        """The model's keyword for its KV cache in this transformers release (one token's forward
        per keyword tried; every rank tries the same ones in the same order)."""
        import torch
        from transformers import DynamicCache

        def call(keyword: str, cache) -> None:
            assert self.ids is not None  # set before this runs
            with torch.no_grad():
                self.model(input_ids=self.ids[:, :1], use_cache=True, logits_to_keep=1, **{keyword: cache})

        return find_cache_keyword(self.model.forward, call, lambda: DynamicCache(config=self.model.config))

    # the work ------------------------------------------------------------------------------
    def prefill(self):
        """One forward over the prompt, writing a fresh KV cache; the last position's logits."""
        import torch
        from transformers import DynamicCache

        with torch.no_grad():
            cache = DynamicCache(config=self.model.config)
            out = self.model(
                input_ids=self.ids, use_cache=True, logits_to_keep=1, **{self._cache_keyword: cache}
            )
        return out.logits, cache

    def prepare_decode(self) -> None:
        """Run the prompt once and keep its KV cache, which every decode step starts from."""
        logits, cache = self.prefill()
        self._prompt = cache_tensors(cache)
        self._first = logits[:, -1:].argmax(-1)

    def decode(self, n: int | None = None):
        """``n`` forwards of one token each (default ``new_tokens``), greedy, on a copy of the
        prompt's KV cache (the prompt's own tensors are left as they were): the first feeds the
        token the prompt's forward chose. Returns the ``n`` tokens they chose."""
        import torch

        if self._prompt is None:
            self.prepare_decode()
        assert self._prompt is not None  # set by prepare_decode
        n = self.options["new_tokens"] if n is None else n
        with torch.no_grad():
            cache = cache_from(self._prompt, self.model.config)
            token, tokens = self._first, []
            for _ in range(n):
                out = self.model(
                    input_ids=token, use_cache=True, logits_to_keep=1, **{self._cache_keyword: cache}
                )
                token = out.logits[:, -1:].argmax(-1)
                tokens.append(token)
        return torch.cat(tokens, dim=1)

    def logits(self, ids=None):
        """Every position's logits for ``ids`` (default: the prompt), without a cache."""
        import torch

        with torch.no_grad():
            return self.model(input_ids=self.ids if ids is None else ids, use_cache=False).logits

    # -- phases -------------------------------------------------------------------------------
    def work(self, phase: str) -> dict[str, float]:
        o = self.options
        return {"tokens": float(o["batch"] * (o["seq_len"] if phase == "prefill" else o["new_tokens"]))}

    def phases(self) -> Iterator[Phase]:
        modes = ("prefill", "decode") if self.options["mode"] == "both" else (self.options["mode"],)
        for mode in modes:
            yield self._phase(mode)

    def _phase(self, mode: str) -> Phase:
        o = self.options
        if mode == "prefill":
            step, note = (lambda: self.prefill()), f"a prompt of {o['seq_len']} tokens"
            teardown = None
        else:
            self.prepare_decode()
            step = lambda: self.decode()  # noqa: E731
            note = f"{o['new_tokens']} greedy tokens on a KV cache of {o['seq_len']}"

            def teardown() -> None:
                self._prompt = self._first = None

        note += f", tp={self.tp}"
        if self.world.distributed:
            # the measurement agrees the steps, warm-up and window edges over the ranks
            note += f", rank {self.world.rank} of {self.world.world_size}"
        return Phase(
            mode,
            step=step,
            sync=device_sync(self.device),
            work=self.work(mode),
            teardown=teardown,
            note=note,
        )

    def run_defaults(self) -> Mapping[str, Any]:
        window = self.options["window_s"]
        return {"min_window_s": window} if window is not None else {}

    def teardown(self) -> None:
        self.model = self._prompt = self._first = None
        if self._joined:
            self._joined = False
            distributed.leave()
        if self.device is not None and self.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()

    # -- reporting ----------------------------------------------------------------------------
    def derive(self, result) -> Sequence[DerivedTable]:
        rows = tokens_table(result, self.device, self.tp, self.world)
        if not rows:
            return ()
        return [
            DerivedTable(
                "tokens",
                f"{self.name} tp={self.tp}: per token",
                rows,
                note="energy_per_token_j: this rank's GPU (its channel, else the first primary channel); "
                "all_gpus: the sum over every GPU this run measured",
                display=(
                    "phase",
                    "rank",
                    "latency_per_token_s",
                    "energy_per_token_j",
                    "energy_per_token_j_all_gpus",
                    "gpus_measured",
                ),
            )
        ]

    def info(self) -> Mapping[str, Any]:
        import torch

        s = self.sizes
        out: dict[str, Any] = {
            "model": "vicuna-7b (llama)",
            "tp": self.tp,
            "rank": self.world.rank,
            "world_size": self.world.world_size,
            "hidden": s["hidden"],
            "layers": s["layers"],
            "heads": s["heads"],
            "heads_per_rank": s["heads"] // self.tp,
            "intermediate": s["intermediate"],
            "vocab": s["vocab"],
            "all_reduces_per_forward": ALL_REDUCES_PER_LAYER * s["layers"] if self.tp > 1 else 0,
            "dtype": self.dtype_name(),
            "torch": torch.__version__,
        }
        if self.device is not None:
            out["device"] = str(self.device)
            if self.device.type == "cuda":
                out["gpu"] = torch.cuda.get_device_name(self.device)
            if self.world.distributed:
                import torch.distributed as dist

                out["backend"] = dist.get_backend() if dist.is_initialized() else None
        if self._parameters is not None:
            out["parameters_on_this_rank"] = self._parameters
        return out


def split(model, device, tp: int) -> None:
    """Split every decoder layer over the ``tp`` ranks (column-parallel in, row-parallel out).

    Every rank holds the same full weights (same seed, or the same state dict), so each keeps
    its own slice instead of receiving it from rank 0."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        ParallelStyle,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh(device.type, (tp,))
    plan: dict[str, ParallelStyle] = {name: ColwiseParallel() for name in COLUMN}
    plan.update({name: RowwiseParallel() for name in ROW})
    takes = inspect.signature(parallelize_module).parameters
    local = {"src_data_rank": None} if "src_data_rank" in takes else {}
    for layer in model.model.layers:
        parallelize_module(layer, mesh, plan, **local)


def cache_tensors(cache) -> list[tuple[Any, Any]]:
    """A KV cache's (keys, values) per layer."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))  # transformers before 4.56


def cache_from(tensors: list[tuple[Any, Any]], config):
    """A new KV cache holding copies of ``tensors`` (per layer keys and values)."""
    from transformers import DynamicCache

    if hasattr(DynamicCache, "from_legacy_cache"):  # transformers before 5
        return DynamicCache.from_legacy_cache(tuple((k.clone(), v.clone()) for k, v in tensors))
    return DynamicCache(tensors, config=config)


def _local(p):
    return p.to_local() if hasattr(p, "to_local") else p


def tokens_table(result, device, tp: int, w: distributed.World | WorkloadContext) -> list[dict]:
    """Per phase: latency and energy per token, on this rank's GPU and summed over the GPUs
    the run measured."""
    import math

    own = distributed.own_channel(result, device)
    primary = list(result.meta.get("primary_channels", []))
    rows = []
    for phase in dict.fromkeys(s.phase for s in result.summaries):
        summaries = [s for s in result.summaries if s.phase == phase]
        tokens = (summaries[0].work or {}).get("tokens") if summaries else None
        if not tokens:
            continue
        by_channel = {s.channel: s for s in summaries}
        mine = by_channel.get(own) or next((by_channel[c] for c in primary if c in by_channel), summaries[0])
        gpus = [by_channel[c] for c in primary if c in by_channel and c.startswith("gpu")]
        row = {
            "phase": phase,
            "tp": tp,
            "rank": w.rank,
            "world_size": w.world_size,
            "tokens_per_iteration": tokens,
            "latency_per_token_s": mine.time_per_iter_s.median / tokens,
            "energy_per_token_j": mine.energy_per_iter_j.median / tokens,
            "channel": mine.channel,
            "energy_per_token_j_all_gpus": (
                sum(s.energy_per_iter_j.median for s in gpus) / tokens if gpus else math.nan
            ),
            "gpus_measured": len(gpus),
        }
        for s in gpus:
            row[f"energy_per_token_j_{s.channel}"] = s.energy_per_iter_j.median / tokens
        rows.append(row)
    return rows
