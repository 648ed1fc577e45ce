"""OPT decoder layers at any size, for per-layer measurement without downloading a checkpoint.

``OPTSlice`` is an OPT model with one decoder layer: token and position embeddings, the layer
(pre-LayerNorm attention and ReLU feed-forward, as OPT-66B), the final LayerNorm and the LM
head. Measured once and counted ``layers`` times, it gives the model's totals. Attention uses
``scaled_dot_product_attention`` (what current transformers uses by default); decoding appends
to a key/value cache with ``torch.cat``, as transformers' dynamic cache does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class OPTConfig:
    hidden: int = 9216
    heads: int = 72
    ffn: int = 36864
    layers: int = 64
    vocab: int = 50272
    max_positions: int = 2048


OPT_66B = OPTConfig()


class OPTAttention(nn.Module):
    def __init__(self, config: OPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.head_dim = config.hidden // config.heads
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(config.hidden, config.hidden)
        self.k_proj = nn.Linear(config.hidden, config.hidden)
        self.v_proj = nn.Linear(config.hidden, config.hidden)
        self.out_proj = nn.Linear(config.hidden, config.hidden)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, past_k=None, past_v=None):
        b, t, hidden = x.shape
        q = self._heads(self.q_proj(x) * self.scaling)
        k = self._heads(self.k_proj(x))
        v = self._heads(self.v_proj(x))
        if past_k is not None:
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=past_k is None and t > 1, scale=1.0)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, hidden))


class OPTDecoderLayer(nn.Module):
    def __init__(self, config: OPTConfig) -> None:
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden)
        self.self_attn = OPTAttention(config)
        self.final_layer_norm = nn.LayerNorm(config.hidden)
        self.fc1 = nn.Linear(config.hidden, config.ffn)
        self.activation = nn.ReLU()
        self.fc2 = nn.Linear(config.ffn, config.hidden)

    def forward(self, x, past_k=None, past_v=None):
        x = x + self.self_attn(self.self_attn_layer_norm(x), past_k, past_v)
        return x + self.fc2(self.activation(self.fc1(self.final_layer_norm(x))))


class OPTSlice(nn.Module):
    """Embeddings, one decoder layer (``layers.0``), final LayerNorm, LM head."""

    def __init__(self, config: OPTConfig = OPT_66B) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab, config.hidden)
        self.embed_positions = nn.Embedding(config.max_positions + 2, config.hidden)  # OPT's offset of 2
        self.layers = nn.ModuleList([OPTDecoderLayer(config)])
        self.final_layer_norm = nn.LayerNorm(config.hidden)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)

    def forward(self, input_ids, positions, past_k=None, past_v=None):
        x = self.embed_tokens(input_ids) + self.embed_positions(positions + 2)
        x = self.layers[0](x, past_k, past_v)
        return self.lm_head(self.final_layer_norm(x))


def example_inputs(config: OPTConfig, batch: int, mode: str, prompt_len: int, kv_len: int, device, dtype):
    """(args) for ``OPTSlice``: a prompt (prefill) or one new token with a cache (decode)."""
    if mode == "prefill":
        ids = torch.randint(0, config.vocab, (batch, prompt_len), device=device)
        positions = torch.arange(prompt_len, device=device).expand(batch, prompt_len)
        return (ids, positions)
    head_dim = config.hidden // config.heads
    ids = torch.randint(0, config.vocab, (batch, 1), device=device)
    positions = torch.full((batch, 1), kv_len, device=device)
    shape = (batch, config.heads, kv_len, head_dim)
    return (
        ids,
        positions,
        torch.randn(shape, device=device, dtype=dtype),
        torch.randn(shape, device=device, dtype=dtype),
    )
