"""A forward pass and a greedy decode of BLOOM and OPT that a CUDA graph can capture.

transformers' own forward builds its attention masks on every call, and its ``generate`` checks
its stopping criteria on the host, so neither can be captured (some versions' mask code also
synchronises with the host). This path calls the model's own modules — embeddings, decoder
layers, final norm, LM head, so the kernels are the model's — around everything that varies:

- the attention masks (and BLOOM's ALiBi bias) are made once, at set-up, for the fixed shapes;
  during a decode only the row of the token being fed changes, made on the device from a
  position tensor (``key_positions <= position``), never from a host value;
- the key/value cache (``StaticKV``) is a fixed buffer per layer, written in place at positions
  held in a device tensor (``index_copy_``), and attention runs over its full length, masked;
- the next token is the argmax of the logits, written into the input buffer of the next step on
  the device; the position is advanced with ``add_``.

No value goes to the host, no shape depends on a value: prefill and a whole decode (the prompt
and ``new_tokens - 1`` further forwards, as ``generate(max_new_tokens=...)`` runs) are each one
capturable sequence of kernels, and on the CPU the same calls run eagerly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cache_keyword import find_cache_keyword

if TYPE_CHECKING:
    import torch


class StaticKV:
    """Keys and values of every layer in buffers of a fixed length; ``write_at`` (a device
    tensor of positions) says where the current step's tokens go.

    Duck-types the ``update(key, value, layer_idx, ...)`` that transformers' attention calls.
    """

    def __init__(self, layers: int, batch: int, heads: int, length: int, head_dim: int, dtype, device):
        import torch

        shape = (batch, heads, length, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.write_at: torch.Tensor | None = None

    def update(self, key, value, layer_idx: int, *args: Any, **kwargs: Any):
        assert self.write_at is not None, "StaticKV.update before write_at was set"
        self.keys[layer_idx].index_copy_(2, self.write_at, key)
        self.values[layer_idx].index_copy_(2, self.write_at, value)
        return self.keys[layer_idx], self.values[layer_idx]


class StaticLM:
    """Prefill (``prefill()``) and greedy decode (``generate()``) of a BLOOM or OPT model on
    fixed buffers.

    Args:
        model: a transformers ``BloomForCausalLM`` or ``OPTForCausalLM`` in eval mode.
        family: ``bloom`` or ``opt``.
        ids: the prompt, ``batch x seq_len`` token ids on the model's device.
        new_tokens: tokens ``generate()`` produces (0: prefill only, no cache).
    """

    def __init__(self, model, family: str, ids, new_tokens: int = 0) -> None:
        import torch

        if family not in ("bloom", "opt"):
            raise ValueError(f"no static path for model family {family!r}; there is one for bloom, opt")
        self.model, self.family = model, family
        config = model.config
        parameter = next(model.parameters())
        dtype, device = parameter.dtype, ids.device
        batch, prompt = ids.shape
        self.prompt = ids
        self.new_tokens = new_tokens
        self.length = prompt + new_tokens if new_tokens else prompt  # keys attended to
        self.min = torch.finfo(dtype).min
        self.prompt_positions = torch.arange(prompt, device=device)
        self.key_positions = torch.arange(self.length, device=device)
        # query i (at position i) sees keys 0..i: an additive mask, 0 or the dtype's minimum
        visible = self.key_positions[None, :] <= self.prompt_positions[:, None]
        self.prompt_mask = self._additive(visible, dtype)[None, None]  # 1 x 1 x prompt x length
        heads = config.n_head if family == "bloom" else config.num_attention_heads
        if family == "bloom":
            from transformers.models.bloom.modeling_bloom import build_alibi_tensor

            # no padding: the bias depends on the key position only, so one tensor serves all steps
            self.alibi = build_alibi_tensor(
                torch.ones(batch, self.length, device=device, dtype=torch.long), heads, dtype
            )
            self.layers = list(model.transformer.h)
        else:
            decoder = model.model.decoder
            self.layers = list(decoder.layers)
            self.offset = getattr(decoder.embed_positions, "offset", 2)
            # sdpa with no mask runs causal attention (what transformers chooses for an unpadded
            # prompt); eager attention needs the mask
            self.causal_prompt = getattr(config, "_attn_implementation", "eager") == "sdpa" and not new_tokens
        self.cache = None
        self.cache_argument = ""  # the layers' keyword for the cache, found below when one is kept
        if new_tokens:
            head_dim = config.hidden_size // heads

            def kv(layers: int) -> StaticKV:
                return StaticKV(layers, batch, heads, self.length, head_dim, dtype, device)

            self.cache_argument = self._find_cache_argument(lambda: kv(1))
            self.cache = kv(len(self.layers))
            self.token = torch.zeros(batch, 1, dtype=torch.long, device=device)
            self.position = torch.zeros(1, dtype=torch.long, device=device)
            self.generated = torch.zeros(batch, new_tokens, dtype=torch.long, device=device)
            self.mask_row = torch.full((self.length,), self.min, dtype=dtype, device=device)

    def _additive(self, visible, dtype):
        import torch

        return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill(~visible, self.min)

    # -- the model's own modules, around fixed masks and buffers ---------------------------------
    def forward(self, ids, positions, mask):
        """Logits of every position of ``ids`` (at ``positions``), attending through ``mask``
        (None: causal attention over ``ids`` alone) to the cache, if there is one."""
        if self.cache is not None:
            self.cache.write_at = positions
        hidden = self._embed(ids, positions)
        for layer in self.layers:
            hidden = _first(self._layer(layer, hidden, positions, mask, self.cache))
        return self._head(hidden)

    def _embed(self, ids, positions):
        if self.family == "bloom":
            t = self.model.transformer
            return t.word_embeddings_layernorm(t.word_embeddings(ids))
        import torch.nn.functional as F

        decoder = self.model.model.decoder
        hidden = decoder.embed_tokens(ids)
        if decoder.project_in is not None:
            hidden = decoder.project_in(hidden)
        return hidden + F.embedding(positions[None] + self.offset, decoder.embed_positions.weight)

    def _layer(self, layer, hidden, positions, mask, cache, keyword: str | None = None):
        """One decoder layer; ``cache`` goes under ``keyword`` (default: the one found)."""
        kwargs = {keyword or self.cache_argument: cache} if cache is not None else {}
        if self.family == "bloom":
            return layer(hidden, alibi=self.alibi, attention_mask=mask, use_cache=cache is not None, **kwargs)
        return layer(
            hidden, attention_mask=mask, position_ids=positions[None], use_cache=cache is not None, **kwargs
        )

    def _head(self, hidden):
        if self.family == "bloom":
            return self.model.lm_head(self.model.transformer.ln_f(hidden))
        decoder = self.model.model.decoder
        if decoder.final_layer_norm is not None:
            hidden = decoder.final_layer_norm(hidden)
        if decoder.project_out is not None:
            hidden = decoder.project_out(hidden)
        return self.model.lm_head(hidden)

    def _find_cache_argument(self, make_cache) -> str:
        """The first layer's cache keyword, found by which argument it writes keys into."""
        import torch

        layer, positions = self.layers[0], self.prompt_positions

        def call(keyword, cache) -> None:
            cache.write_at = positions
            with torch.no_grad():
                self._layer(
                    layer, self._embed(self.prompt, positions), positions, self.prompt_mask, cache, keyword
                )

        return find_cache_keyword(layer.forward, call, make_cache)

    def prefill(self):
        """One forward pass over the prompt (writing the cache when there is one)."""
        mask = None if self.family == "opt" and self.causal_prompt else self.prompt_mask
        return self.forward(self.prompt, self.prompt_positions, mask)

    def generate(self):
        """The prompt, then ``new_tokens - 1`` forwards of one token each, greedy; the tokens
        end in ``generated``. Returns the last step's logits."""
        if not self.new_tokens:
            raise ValueError("generate() needs new_tokens > 0")
        logits = self.prefill()
        self._take(logits, 0)
        self.position.fill_(self.prompt.shape[1])
        for step in range(1, self.new_tokens):
            mask = self.mask_row.masked_fill(self.key_positions <= self.position, 0.0)
            logits = self.forward(self.token, self.position, mask.view(1, 1, 1, -1))
            self._take(logits, step)
            self.position.add_(1)
        return logits

    def _take(self, logits, step: int) -> None:
        self.token.copy_(logits[:, -1:].argmax(dim=-1))
        self.generated[:, step : step + 1].copy_(self.token)


def _first(out):
    """A decoder layer's hidden states (some versions return a tuple)."""
    return out[0] if isinstance(out, tuple) else out
