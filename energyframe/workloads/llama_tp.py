"""``vicuna-7b``: a Llama model at Vicuna-7B's real size (random weights, no downloads), split
over ``tp`` ranks Megatron-style, its prefill and decode each one CUDA graph replay.

The configuration is built here from Vicuna-7B's published numbers (v1.1/v1.3, a fine-tuned
Llama-7B): hidden 4096, 32 layers, 32 heads (no grouped-query attention), MLP 11008, vocabulary
32000, RMS-norm eps 1e-6, rotary theta 10000 — transformers' ``LlamaConfig`` defaults. Every
decoder layer is split as Megatron splits it (``sharded_llama.py``): q, k, v, gate and up
column-parallel (each rank holds ``heads / tp`` heads and ``intermediate / tp`` MLP features,
fused into one q-k-v and one gate-up weight), o and down row-parallel, so each layer all-reduces
twice per forward, after attention and after the MLP. Embeddings, norms and the LM head are
replicated. A decode step is captured in a CUDA graph, the all-reduces inside it
(``tensor_parallel.py``), so the host does not bound it; ``tp=1`` takes the same path on one GPU.

``tp=1`` runs in one process. ``tp>1`` runs under ``torchrun --nproc-per-node TP``: one process
per rank, ``LOCAL_RANK`` picks the GPU, NCCL between GPUs (gloo between CPU processes). Phases:
``prefill`` (one forward over the prompt, writing the KV cache) and ``decode`` (``new_tokens``
greedy tokens, one forward each, against the prompt's KV cache).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import WorkloadError
from ..kit import extras
from ..model import DerivedTable, Phase, WorkloadContext
from ..options import Option
from ..plugin import Workload
from . import distributed
from .graph import DTYPE_OPTION, WINDOW_S_OPTION, dtype_name, torch_device, torch_dtype
from .tensor_parallel import TensorParallelLM, check_world

if TYPE_CHECKING:
    import torch

#: Vicuna-7B (v1.1/v1.3) as published: a Llama-7B
VICUNA_7B = {"hidden": 4096, "layers": 32, "heads": 32, "intermediate": 11008, "vocab": 32000}
RMS_NORM_EPS = 1e-6
ROPE_THETA = 10000.0
MAX_POSITIONS = 2048
TP_SIZES = ("1", "2", "4", "8")
#: all-reduces per decoder layer per forward: after attention and after the MLP
ALL_REDUCES_PER_LAYER = 2
#: how a phase's step runs
EXECUTION = Option(
    "execution",
    "choice",
    "graph",
    "graph: each phase's step one CUDA graph replay (collectives inside), as a serving stack runs "
    "it; eager: the same calls one by one (what energyframe trace profiles); the CPU runs both eagerly",
    choices=("graph", "eager"),
)

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
    EXECUTION,
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
        self.engine: TensorParallelLM | None = None
        #: the first phase's CUDA graph (execution=graph), once phases() made it
        self.whole_captured: Any = None
        self._joined = False
        self._info: dict[str, Any] = {}  # the engine's, kept past teardown for run.json

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
        check_world(self.name, self.tp, self.world, self.options["device"])

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
        o = self.options
        generator = torch.Generator().manual_seed(o["seed"])
        ids = torch.randint(0, config.vocab_size, (o["batch"], o["seq_len"]), generator=generator).to(
            self.device
        )
        engine = TensorParallelLM(
            self.name, self.tp, self.world.rank, o["batch"], o["seq_len"], o["new_tokens"], o["execution"]
        )
        engine.build(model.eval(), ids)
        del model  # this rank keeps its slice only
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.engine = engine

    @property
    def ids(self):
        """The prompt, ``batch x seq_len`` token ids (set up)."""
        return self._engine().ids

    def _engine(self) -> TensorParallelLM:
        if self.engine is None:
            raise WorkloadError(f"{self.name} is not set up")
        return self.engine

    # the work ------------------------------------------------------------------------------
    def prefill(self):
        """One forward over the prompt, writing the KV cache; the last position's logits."""
        return self._engine().prefill()

    def decode(self, n: int | None = None):
        """``n`` decode steps (default ``new_tokens``) after the prompt, greedy; the tokens they chose."""
        return self._engine().decode(n)

    def logits(self, ids=None):
        """Every position's logits for ``ids`` (default: the prompt), without a cache."""
        return self._engine().logits(ids)

    # -- phases -------------------------------------------------------------------------------
    def work(self, phase: str) -> dict[str, float]:
        return self._engine().work(phase)

    def phases(self) -> Iterator[Phase]:
        modes = ("prefill", "decode") if self.options["mode"] == "both" else (self.options["mode"],)
        note = ""
        if self.world.distributed:
            # the measurement agrees the steps, warm-up and window edges over the ranks
            note = f"rank {self.world.rank} of {self.world.world_size}"
        engine = self._engine()
        phases = engine.phases(modes, note)
        self.whole_captured = engine.captured(modes[0])  # what replay profiles
        return iter(phases)

    def run_defaults(self) -> Mapping[str, Any]:
        window = self.options["window_s"]
        return {"min_window_s": window} if window is not None else {}

    def teardown(self) -> None:
        if self.engine is not None:
            self._info = self.engine.info()
            self.engine.teardown()
        if self._joined:
            self._joined = False
            distributed.leave()
        if self.device is not None and self.device.type == "cuda":
            import torch

            torch.cuda.empty_cache()

    # -- reporting ----------------------------------------------------------------------------
    def derive(self, result) -> Sequence[DerivedTable]:
        engine = self.engine
        if engine is None:
            return ()
        return engine.derive(result, self.world)

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
        out.update(self.engine.info() if self.engine is not None else self._info)
        return out
