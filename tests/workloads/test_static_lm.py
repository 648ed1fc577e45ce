"""The capturable language-model path (fixed masks and key/value cache): the same logits and
tokens as transformers' own forward and generate on tiny random models, and no value read on
the host (it runs on meta tensors, where any .item() fails)."""

import pytest

import energyframe as ef
from energyframe.workloads.static_lm import StaticLM

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONFIGS = {
    "bloom": lambda: transformers.BloomConfig(vocab_size=1000, hidden_size=64, n_layer=2, n_head=4),
    "opt": lambda: transformers.OPTConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        ffn_dim=256,
        max_position_embeddings=2048,
    ),
    # OPT-350m's shape: 512-d embeddings projected in and out, layer norm after attention
    "opt-post-ln": lambda: transformers.OPTConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        ffn_dim=256,
        word_embed_proj_dim=32,
        do_layer_norm_before=False,
        max_position_embeddings=2048,
    ),
}


def family(name):
    return name.split("-")[0]


def tiny(name, device="cpu"):
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(CONFIGS[name]()).eval()
    model.generation_config.pad_token_id = 0
    return model


@pytest.mark.parametrize("name", CONFIGS)
def test_prefill_logits_are_transformers_own(name):
    model = tiny(name)
    ids = torch.randint(0, 1000, (2, 7))
    with torch.no_grad():
        expected = model(ids, use_cache=False).logits
        got = StaticLM(model, family(name), ids).prefill()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", CONFIGS)
def test_decode_gives_transformers_tokens_and_logits(name):
    model = tiny(name)
    ids = torch.randint(0, 1000, (2, 5))
    static = StaticLM(model, family(name), ids, new_tokens=6)
    with torch.no_grad():
        last = static.generate()
        expected = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        # the whole sequence at once (no cache): the logits the last decode step must reproduce
        full = model(torch.cat([ids, static.generated[:, :-1]], dim=1), use_cache=False).logits
    assert torch.equal(static.generated, expected[:, 5:])
    torch.testing.assert_close(last[:, -1], full[:, -1], rtol=1e-4, atol=1e-5)
    # a second run starts over: positions and cache are reset in place
    first = static.generated.clone()
    with torch.no_grad():
        static.generate()
    assert torch.equal(static.generated, first)


@pytest.mark.parametrize("name", ["bloom", "opt"])
def test_no_value_goes_to_the_host(name):
    """On meta tensors nothing has a value: a path that reads one (.item(), nonzero, a stopping
    check) fails, as transformers' generate does; the static path runs to the end."""
    model = tiny(name, device="meta")
    ids = torch.zeros(1, 5, dtype=torch.long, device="meta")
    static = StaticLM(model, family(name), ids, new_tokens=3)
    with torch.no_grad():
        assert static.generate().shape == (1, 1, 1000)
        assert static.prefill().shape == (1, 5, 1000)
        with pytest.raises(RuntimeError, match="meta"):
            model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False)


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="no static path for model family 'gpt2'"):
        StaticLM(tiny("opt"), "gpt2", torch.zeros(1, 3, dtype=torch.long))


TINY_BLOOM = "bloom:hidden=64,layers=2,heads=4,vocab=1000"


@pytest.mark.parametrize(
    "options,phase,path,tokens",
    [
        ("forward=static", "forward", "static", 5),
        ("mode=decode,new_tokens=3,forward=static", "generate", "static", 3),
        ("mode=decode,new_tokens=3", "generate", "transformers", 3),
        # a graph on the CPU runs eagerly, and the path a graph needs is chosen all the same
        ("execution=graph", "forward", "static", 5),
    ],
)
def test_the_workload_on_the_cpu(options, phase, path, tokens):
    result = ef.run(
        f"{TINY_BLOOM},{options}",
        power="none",
        reporters=[],
        settings=ef.RunSettings(trials=1, min_window_s=0.01),
    )
    assert list(result.windows["phase"].unique()) == [phase]
    assert result.summary(phase).work == {"tokens": float(tokens)}
    assert result.meta["workload"]["info"]["forward"] == path


class _Layer:
    """A decoder layer whose cache keyword is one no transformers release has used yet."""

    def __init__(self):
        self.calls = 0

    def forward(self, hidden, attention_mask=None, kv_state=None, use_cache=False, position_ids=None):
        self.calls += 1
        if kv_state is not None:
            kv_state.update(hidden, hidden, 0)
        return hidden


class _Cache:
    def __init__(self):
        self.writes = 0

    def update(self, key, value, layer_idx):
        self.writes += 1
        return key, value


def test_the_cache_keyword_is_found_by_what_the_layer_does():
    from energyframe.workloads.cache_keyword import find_cache_keyword

    layer = _Layer()
    keyword = find_cache_keyword(layer.forward, lambda kw, cache: layer.forward(1.0, **{kw: cache}), _Cache)
    assert keyword == "kv_state"
    assert layer.calls == 2  # nothing hints at a cache: signature order, attention_mask, then kv_state
    # tried likeliest first: a parameter annotated as a cache goes before the others

    def annotated(hidden, flag=None, store: _Cache | None = None):
        if store is not None:
            store.update(hidden, hidden, 0)

    tried = []
    assert (
        find_cache_keyword(annotated, lambda kw, c: (tried.append(kw), annotated(1.0, **{kw: c})), _Cache)
        == "store"
    )
    assert tried == ["store"]


def test_a_layer_that_writes_no_cache_is_named():
    from energyframe.errors import WorkloadError
    from energyframe.workloads.cache_keyword import find_cache_keyword

    def forward(hidden, attention_mask=None, use_cache=False):
        return hidden

    with pytest.raises(
        WorkloadError,
        match=r"wrote no key/value cache under any of its arguments \(attention_mask, use_cache\)",
    ):
        find_cache_keyword(forward, lambda kw, cache: forward(1.0, **{kw: cache}), _Cache)
