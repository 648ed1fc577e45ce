"""A Llama-shaped causal LM split Megatron-style over ``tp`` ranks, on fixed buffers: a prefill
and a one-token decode step that a CUDA graph captures, the collectives inside it.

Built from a transformers model whose modules have Llama's shape (``model.embed_tokens``,
``model.layers[i].self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``, two RMS norms per
layer, ``model.norm``, ``lm_head``, ``model.rotary_emb``: Llama, Vicuna, Mistral, Qwen2 ...).
Each rank keeps its slice of every layer (Megatron's split):

- q, k and v column-parallel, fused into one weight: ``heads / tp`` query heads and
  ``kv_heads / tp`` key/value heads per rank (grouped-query attention kept group by group);
- o row-parallel: the rank's heads' columns, then one all-reduce of the attention's output;
- gate and up column-parallel, fused into one weight (``intermediate / tp`` features); down
  row-parallel, then one all-reduce of the MLP's output;
- embeddings, norms and the LM head replicated (each rank computes them itself).

So a layer runs two all-reduces per forward and nothing else crosses ranks. The key/value cache
is a buffer of ``max_len`` positions per layer; a decode step writes at a position held in a
device tensor and attends over the whole buffer through a mask made on the device from it; the
next token is the argmax, written into the input buffer on the device. Nothing goes to the host
and no shape depends on a value, so a prefill and a decode step are each one fixed sequence of
kernels and collectives: a CUDA graph captures them (NCCL collectives inside), and on the CPU
the same calls run eagerly (gloo between processes).

Why not transformers' own forward split with ``torch.distributed.tensor.parallel``: DTensor
dispatches every op on the host (a 7B decode step took 185 ms on two H200s, 5 to 10 ms of it
GPU work), and the library's masks and cache are built per call, which a graph cannot capture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import WorkloadError

#: the modules a Llama-shaped model has, and each of its decoder layers
MODEL_PARTS = ("model.embed_tokens", "model.layers", "model.norm", "model.rotary_emb", "lm_head")
LAYER_PARTS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "input_layernorm",
    "post_attention_layernorm",
)
#: activations of the MLP's gate that are SiLU
SILU = ("silu", "swish")
#: the sharded forward's logits against transformers' own on a few tokens at set-up: relative
#: difference allowed, by element type (fp16 and bf16 round every layer's output)
AGREEMENT = {"float32": 1e-4, "float64": 1e-8, "float16": 3e-2, "bfloat16": 6e-2}
#: tokens of the set-up check
CHECK_TOKENS = 4


def _get(root: Any, path: str) -> Any:
    for name in path.split("."):
        root = getattr(root, name, None)
        if root is None:
            return None
    return root


def not_llama_shaped(model: Any) -> str | None:
    """Why ``model`` is not a Llama-shaped causal LM this module can split ("" parts missing, an
    activation or attention it does not run), or None when it is."""
    missing = _missing_parts(model)
    if missing is not None:
        return missing
    return _unsupported_config(model.config)


def _missing_parts(model: Any) -> str | None:
    """Which of a Llama's modules the model, or its decoder layers, lack (None: it has them all)."""
    missing = [p for p in MODEL_PARTS if _get(model, p) is None]
    if missing:
        return f"it has no {', '.join(missing)}"
    layers = list(model.model.layers)
    if not layers:
        return "it has no decoder layers"
    missing = sorted({p for layer in layers for p in LAYER_PARTS if _get(layer, p) is None})
    if missing:
        return f"its decoder layers have no {', '.join(missing)} (a mixture of experts, or another block)"
    return None


def _unsupported_config(config: Any) -> str | None:
    """What the config asks for that the split model does not run (None: nothing)."""
    act = str(getattr(config, "hidden_act", "silu"))
    if act not in SILU:
        return f"its MLP's activation is {act}, not SiLU"
    types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        return f"its layers attend in other ways than full attention ({', '.join(sorted(types))})"
    if int(getattr(config, "pretraining_tp", 1) or 1) != 1:
        return "its config splits linears for pretraining_tp"
    return None


def rms_norm(x, weight, eps: float):
    """Llama's RMS norm (fused where torch has one)."""
    import torch.nn.functional as F

    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    import torch

    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def _rotate(x, cos, sin):
    """Rotary embedding of ``x`` (``... x heads x head_dim``; cos and sin broadcast to it)."""
    import torch

    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@dataclass
class ShardLayer:
    """One decoder layer's slice on this rank (weights ``out x in``, as ``F.linear`` takes them)."""

    qkv: Any
    qkv_bias: Any
    o: Any
    o_bias: Any
    gate_up: Any
    gate_up_bias: Any
    down: Any
    down_bias: Any
    norm_in: Any
    norm_post: Any
    eps_in: float
    eps_post: float
    q_norm: Any = None  # per-head norms of queries and keys (Qwen3), or None
    k_norm: Any = None
    qk_eps: float = 1e-6


def _rows(t, part: int, parts: int):
    if t is None:
        return None
    size = t.shape[0] // parts
    return t[part * size : (part + 1) * size]


def _cat(*tensors):
    import torch

    if any(t is None for t in tensors):
        return None
    return torch.cat(tensors, dim=0).contiguous()


def _eps(norm: Any) -> float:
    for name in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(norm, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 1e-6


class ShardedLlama:
    """This rank's slice of a Llama-shaped model, its key/value buffers and its decode state.

    Args:
        model: a transformers causal LM of Llama's shape, full weights on this rank's device (every
            rank holds the same; each keeps its slice). It is not modified and may be dropped after.
        tp: ranks the layers are split over (1: no collective).
        rank: this rank, 0 .. tp-1.
        batch: sequences.
        max_len: positions of the key/value buffers (prompt and generated tokens).
        group: the process group of the all-reduces (None: the default group).
    """

    def __init__(self, model: Any, tp: int, rank: int, batch: int, max_len: int, group: Any = None) -> None:
        import torch

        why = not_llama_shaped(model)
        if why:
            raise WorkloadError(f"{type(model).__name__} is not Llama-shaped: {why}")
        config = model.config
        first = model.model.layers[0].self_attn
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(first, "head_dim", None) or config.hidden_size // self.heads)
        self.intermediate = int(config.intermediate_size)
        for what, n in (
            ("attention heads", self.heads),
            ("key/value heads", self.kv_heads),
            ("MLP features", self.intermediate),
        ):
            if n % tp:
                raise WorkloadError(f"tp={tp} does not divide the model's {n} {what}")
        self.tp, self.rank, self.group = tp, rank, group
        self.local_heads, self.local_kv = self.heads // tp, self.kv_heads // tp
        parameter = model.model.embed_tokens.weight
        self.dtype, self.device = parameter.dtype, parameter.device
        self.batch, self.max_len = batch, max_len
        with torch.no_grad():
            self.layers = [self._shard(layer) for layer in model.model.layers]
            self.embed = model.model.embed_tokens.weight.detach()
            self.norm = model.model.norm.weight.detach()
            self.norm_eps = _eps(model.model.norm)
            self.head = model.lm_head.weight.detach()
            self.head_bias = None if model.lm_head.bias is None else model.lm_head.bias.detach()
            positions = torch.arange(max_len, device=self.device)
            cos, sin = model.model.rotary_emb(
                torch.zeros((), dtype=self.dtype, device=self.device), positions[None]
            )
            self.cos, self.sin = cos[0].contiguous(), sin[0].contiguous()  # max_len x head_dim
        shape = (batch, self.local_kv, max_len, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.key_positions = positions
        self.mask_row = torch.zeros(max_len, dtype=self.dtype, device=self.device)
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=self.device)
        self.position = torch.zeros(1, dtype=torch.long, device=self.device)
        self.prompt_len = 0

    def _shard(self, layer: Any) -> ShardLayer:
        attn, mlp, r, tp = layer.self_attn, layer.mlp, self.rank, self.tp

        def w(linear):
            return linear.weight.detach()

        def b(linear):
            return None if linear.bias is None else linear.bias.detach()

        def columns(t):
            size = t.shape[1] // tp
            return t[:, r * size : (r + 1) * size].contiguous()

        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        return ShardLayer(
            qkv=_cat(
                _rows(w(attn.q_proj), r, tp), _rows(w(attn.k_proj), r, tp), _rows(w(attn.v_proj), r, tp)
            ),
            qkv_bias=_cat(
                _rows(b(attn.q_proj), r, tp), _rows(b(attn.k_proj), r, tp), _rows(b(attn.v_proj), r, tp)
            ),
            o=columns(w(attn.o_proj)),
            o_bias=b(attn.o_proj),
            gate_up=_cat(_rows(w(mlp.gate_proj), r, tp), _rows(w(mlp.up_proj), r, tp)),
            gate_up_bias=_cat(_rows(b(mlp.gate_proj), r, tp), _rows(b(mlp.up_proj), r, tp)),
            down=columns(w(mlp.down_proj)),
            down_bias=b(mlp.down_proj),
            norm_in=layer.input_layernorm.weight.detach(),
            norm_post=layer.post_attention_layernorm.weight.detach(),
            eps_in=_eps(layer.input_layernorm),
            eps_post=_eps(layer.post_attention_layernorm),
            q_norm=None if q_norm is None else q_norm.weight.detach(),
            k_norm=None if k_norm is None else k_norm.weight.detach(),
            qk_eps=_eps(q_norm) if q_norm is not None else 1e-6,
        )

    # -- what this rank holds --------------------------------------------------------------------
    def parameters(self) -> int:
        """Elements of the weights this rank holds."""
        tensors = [self.embed, self.norm, self.head, self.head_bias]
        for layer in self.layers:
            tensors += [v for v in vars(layer).values() if hasattr(v, "numel")]
        return sum(t.numel() for t in tensors if t is not None)

    def bytes_read_per_step(self) -> int:
        """Bytes of weights one decode step reads on this rank: every layer's slice, the norms and
        the LM head, and one row of the embeddings per sequence. Units: bytes."""
        size = self.embed.element_size()
        return (self.parameters() - self.embed.numel() + self.batch * self.embed.shape[1]) * size

    # -- the forward -----------------------------------------------------------------------------
    def _all_reduce(self, t) -> None:
        if self.tp > 1:
            import torch.distributed as dist

            dist.all_reduce(t, group=self.group)

    def _attention_inputs(self, layer: ShardLayer, x, cos, sin):
        """q (batch x heads x tokens x head_dim), k and v (with the key/value heads) of ``x``."""
        import torch.nn.functional as F

        b, s = x.shape[0], x.shape[1]
        qkv = F.linear(rms_norm(x, layer.norm_in, layer.eps_in), layer.qkv, layer.qkv_bias)
        hq, hk, d = self.local_heads, self.local_kv, self.head_dim
        q, k, v = qkv.split((hq * d, hk * d, hk * d), dim=-1)
        v = v.view(b, s, hk, d).transpose(1, 2)
        if layer.q_norm is not None:
            q = _rotate(rms_norm(q.view(b, s, hq, d), layer.q_norm, layer.qk_eps), cos, sin)
            k = _rotate(rms_norm(k.view(b, s, hk, d), layer.k_norm, layer.qk_eps), cos, sin)
            return q.transpose(1, 2), k.transpose(1, 2), v
        # queries and keys rotated together: one set of kernels instead of two
        qk = _rotate(qkv[..., : (hq + hk) * d].view(b, s, hq + hk, d), cos, sin)
        return qk[:, :, :hq].transpose(1, 2), qk[:, :, hq:].transpose(1, 2), v

    def _grouped(self, t):
        """Key/value heads repeated for their groups of query heads."""
        groups = self.local_heads // self.local_kv
        return t if groups == 1 else t.repeat_interleave(groups, dim=1)

    def _finish_layer(self, layer: ShardLayer, h, attended):
        """The attention's output projection (all-reduced), the residuals and the MLP."""
        import torch.nn.functional as F

        b, s = h.shape[0], h.shape[1]
        out = F.linear(attended.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim), layer.o)
        self._all_reduce(out)
        if layer.o_bias is not None:
            out = out + layer.o_bias
        h = h + out
        gate, up = F.linear(
            rms_norm(h, layer.norm_post, layer.eps_post), layer.gate_up, layer.gate_up_bias
        ).chunk(2, dim=-1)
        out = F.linear(F.silu(gate) * up, layer.down)
        self._all_reduce(out)
        if layer.down_bias is not None:
            out = out + layer.down_bias
        return h + out

    def _head(self, h):
        import torch.nn.functional as F

        return F.linear(rms_norm(h, self.norm, self.norm_eps), self.head, self.head_bias)

    def forward(self, ids, keep_cache: bool = True, last_only: bool = False):
        """Causal forward over ``ids`` (``batch x tokens``, positions 0 ..) from an empty cache;
        its keys and values are written into the buffers when ``keep_cache``. Returns every
        position's logits, or the last position's (``last_only``: the LM head runs on it alone,
        as ``generate`` runs it)."""
        import torch.nn.functional as F

        s = ids.shape[1]
        if s > self.max_len:
            raise WorkloadError(f"{s} tokens do not fit the key/value buffers of {self.max_len}")
        cos, sin = self.cos[:s].view(1, s, 1, -1), self.sin[:s].view(1, s, 1, -1)
        h = F.embedding(ids, self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = self._attention_inputs(layer, h, cos, sin)
            if keep_cache:
                self.keys[i][:, :, :s].copy_(k)
                self.values[i][:, :, :s].copy_(v)
            attended = F.scaled_dot_product_attention(q, self._grouped(k), self._grouped(v), is_causal=True)
            h = self._finish_layer(layer, h, attended)
        return self._head(h[:, -1:] if last_only else h)

    def prefill(self, ids):
        """The prompt's forward: the cache written, the next token chosen (into ``token``), and
        decoding set to go on after the prompt. Returns the last position's logits."""
        logits = self.forward(ids, last_only=True)
        self.prompt_len = ids.shape[1]
        self.token.copy_(logits.argmax(dim=-1))
        self.position.fill_(self.prompt_len)
        return logits

    def restart(self, first_token) -> None:
        """Decoding from right after the prompt again, fed ``first_token`` (``batch x 1``, on the
        device): what a replay of a whole decode starts with."""
        self.token.copy_(first_token)
        self.position.fill_(self.prompt_len)

    def decode_step(self):
        """One token: ``token`` at ``position`` through every layer against the cache; the next
        token written into ``token`` and the position advanced. Returns the logits."""
        import torch.nn.functional as F

        position = self.position
        cos = self.cos.index_select(0, position).view(1, 1, 1, -1)
        sin = self.sin.index_select(0, position).view(1, 1, 1, -1)
        mask = self.mask_row.masked_fill(self.key_positions > position, -math.inf).view(1, 1, 1, -1)
        h = F.embedding(self.token, self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = self._attention_inputs(layer, h, cos, sin)
            self.keys[i].index_copy_(2, position, k)
            self.values[i].index_copy_(2, position, v)
            keys, values = self._grouped(self.keys[i]), self._grouped(self.values[i])
            attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            h = self._finish_layer(layer, h, attended)
        logits = self._head(h)
        self.token.copy_(logits[:, -1:].argmax(dim=-1))
        self.position.add_(1)
        return logits

    def check_against(self, model: Any, ids) -> float:
        """Relative difference of this rank's logits over ``ids`` (no cache) from ``model``'s own
        (the full model this one was split from): a model that is not what its modules' names
        say (another norm, a scaled embedding) is refused by it at set-up."""
        import torch

        with torch.no_grad():
            ours = self.forward(ids, keep_cache=False).float()
            theirs = model(input_ids=ids, use_cache=False).logits.float()
        scale = theirs.norm().item() or 1.0
        return (ours - theirs).norm().item() / scale

    def tolerance(self) -> float:
        return AGREEMENT.get(str(self.dtype).replace("torch.", ""), 1e-2)
