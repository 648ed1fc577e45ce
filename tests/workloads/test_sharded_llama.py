"""A Llama-shaped model split Megatron-style (sharded_llama.py, tensor_parallel.py): the same
logits as transformers' own forward, at tp=1 and over two gloo processes at tp=2; greedy decode
on the fixed buffers as recomputing the sequence; nothing read back to the host; models of
another shape refused."""

import os

import pytest

import energyframe as ef
from energyframe.errors import OptionError, WorkloadError
from energyframe.workloads.sharded_llama import ShardedLlama, not_llama_shaped
from energyframe.workloads.tensor_parallel import TensorParallelLM, memory_bandwidth_bps

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
#: Llama-shaped families: plain, grouped-query attention, q-k-v biases (Qwen2), per-head q and k
#: norms with a head size of its own (Qwen3), Mistral
SHAPED = {
    "llama": ("LlamaForCausalLM", {"num_key_value_heads": 4}),
    "llama-gqa": ("LlamaForCausalLM", {"num_key_value_heads": 2}),
    "qwen2": ("Qwen2ForCausalLM", {"num_key_value_heads": 2}),
    "qwen3": ("Qwen3ForCausalLM", {"num_key_value_heads": 2, "head_dim": 8}),
    "mistral": ("MistralForCausalLM", {"num_key_value_heads": 2}),
}


@pytest.fixture
def one_process(monkeypatch):
    for name in LAUNCHER:
        monkeypatch.delenv(name, raising=False)


def make(arch: str, **more):
    torch.manual_seed(0)
    cls = getattr(transformers, arch)
    return cls(cls.config_class(**SIZES, vocab_size=128, max_position_embeddings=64, **more)).eval()


def greedy(model, ids, steps: int):
    """The sequence grown by ``steps`` greedy tokens, the whole sequence through the model each time."""
    with torch.no_grad():
        for _ in range(steps):
            ids = torch.cat([ids, model(input_ids=ids, use_cache=False).logits[:, -1:].argmax(-1)], dim=1)
    return ids


@pytest.mark.parametrize("family", sorted(SHAPED))
def test_one_rank_gives_transformers_logits_and_greedy_tokens(family):
    arch, more = SHAPED[family]
    model = make(arch, **more)
    ids = torch.randint(0, 128, (2, 7))
    sharded = ShardedLlama(model, 1, 0, batch=2, max_len=11)
    with torch.no_grad():
        theirs = model(input_ids=ids, use_cache=False).logits
        torch.testing.assert_close(sharded.forward(ids, keep_cache=False), theirs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(sharded.prefill(ids), theirs[:, -1:], rtol=1e-5, atol=1e-5)
        chosen, logits = [], None
        for _ in range(4):  # positions 7 .. 10 of the 11-long buffers
            logits = sharded.decode_step()
            chosen.append(sharded.token.clone())
    sequence = greedy(model, ids, 5)
    # the prompt chose token 7; each step fed the last token and chose the next
    assert torch.cat(chosen, dim=1).tolist() == sequence[:, 8:12].tolist()
    with torch.no_grad():
        last = model(input_ids=sequence[:, :11], use_cache=False).logits[:, -1:]
    torch.testing.assert_close(logits, last, rtol=1e-5, atol=1e-5)


def test_a_decode_reads_nothing_back_to_the_host():
    # .item(), bool(t), torch.equal: each forbids a CUDA graph (and costs a sync per call)
    host_reads = {"aten._local_scalar_dense", "aten.is_nonzero", "aten.equal", "aten.item"}

    class NoHostReads(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            assert str(func.overloadpacket) not in host_reads, f"{func} reads a value on the host"
            return func(*args, **(kwargs or {}))

    sharded = ShardedLlama(make("LlamaForCausalLM", num_key_value_heads=2), 1, 0, batch=1, max_len=10)
    ids = torch.randint(0, 128, (1, 6))
    with torch.no_grad(), NoHostReads():
        sharded.prefill(ids)
        first = sharded.token.clone()
        sharded.restart(first)
        for _ in range(3):
            sharded.decode_step()


def test_other_shapes_are_refused_with_the_reason():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64))
    assert not_llama_shaped(gpt2).startswith("it has no model.embed_tokens")
    gelu = make("LlamaForCausalLM", hidden_act="gelu")
    assert not_llama_shaped(gelu) == "its MLP's activation is gelu, not SiLU"
    with pytest.raises(WorkloadError, match="tp=3 does not divide the model's 4 attention heads"):
        ShardedLlama(make("LlamaForCausalLM"), 3, 0, batch=1, max_len=8)


def test_a_model_that_only_looks_llama_shaped_is_caught_by_its_logits():
    # the right module names, another norm: a LayerNorm (mean subtracted, with a bias) where
    # Llama has an RMS norm
    model = make("LlamaForCausalLM")
    for layer in model.model.layers:
        norm = torch.nn.LayerNorm(64)
        torch.nn.init.normal_(norm.bias)
        layer.input_layernorm = norm
    engine = TensorParallelLM("hf", 1, 0, batch=1, seq_len=6, new_tokens=2, execution="eager")
    with pytest.raises(WorkloadError, match="gives other logits than the model itself"):
        engine.build(model, torch.randint(0, 128, (1, 6)))


def test_the_decode_floor_is_the_weights_over_the_gpus_bandwidth():
    assert memory_bandwidth_bps("NVIDIA H200") == 4.8e12
    assert memory_bandwidth_bps("NVIDIA H100 80GB HBM3") == 3.35e12
    assert memory_bandwidth_bps("NVIDIA GH200 480GB") == 4.0e12  # the longer name wins over H200
    assert memory_bandwidth_bps("a CPU") != memory_bandwidth_bps("a CPU")  # NaN: unknown
    sharded = ShardedLlama(make("LlamaForCausalLM"), 1, 0, batch=1, max_len=8)
    layer = 64 * (64 * 3 + 64) + 3 * 64 * 128 + 2 * 64  # q, k, v, o; gate, up, down; two norms
    assert sharded.parameters() == 2 * 128 * 64 + 2 * layer + 64
    # a token reads every layer, the final norm and the LM head, and one row of the embeddings
    assert sharded.bytes_read_per_step() == 4 * (2 * layer + 64 + 128 * 64 + 64)


HF_TINY = (
    "hf:arch=Qwen2ForCausalLM,hidden_size=64,intermediate_size=128,num_hidden_layers=2,"
    "num_attention_heads=4,num_key_value_heads=2,vocab_size=128,seq_len=6,new_tokens=3"
)


def test_hf_tp1_measures_prefill_and_decode_per_token(one_process, tmp_path):
    result = ef.run(
        f"{HF_TINY},tp=1,mode=both",
        power="none",
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunSettings(trials=2, min_window_s=0.02, idle_s=0.0),
    )
    assert [s.phase for s in result.summaries] == ["prefill", "decode"]
    assert result.summary("decode").work == {"tokens": 3.0}
    rows = {r["phase"]: r for r in result.derived_table("tokens").rows}
    assert rows["decode"]["latency_per_token_s"] > 0 and rows["decode"]["weights_read_per_token_bytes"] > 0
    info = result.meta["workload"]["info"]
    assert info["tp"] == 1 and info["execution"] == "graph" and info["decode_execution"] == "eager (cpu)"
    assert info["logits_check_difference"] < 1e-5


@pytest.mark.parametrize(
    "spec,message",
    [
        (f"{HF_TINY},tp=2", "tp=2 runs one process per rank, 2 in all, but WORLD_SIZE is not set"),
        (f"{HF_TINY},mode=both", "mode=both measures a split model (tp=N)"),
        (f"{HF_TINY},tp=1,execution=compile", "tp= runs each step as one CUDA graph"),
    ],
)
def test_hf_split_options_that_cannot_work_are_refused(one_process, spec, message):
    with pytest.raises((OptionError, WorkloadError), match=message.replace("(", r"\(").replace(")", r"\)")):
        ef.run(spec, power="none", reporters=[])


def test_per_layer_refuses_a_split_model(one_process):
    from energyframe.workloads.perlayer import PerLayer

    options = dict(kv.split("=") for kv in HF_TINY.removeprefix("hf:").split(","))
    with pytest.raises(OptionError, match="per-layer takes the model whole"):
        PerLayer(model="hf", tp=1, **options)


def test_a_bert_is_not_split(one_process):
    with pytest.raises(WorkloadError, match="BertForMaskedLM is not Llama-shaped"):
        ef.run(
            "hf:arch=BertForMaskedLM,hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
            "intermediate_size=64,vocab_size=100,seq_len=6,tp=1",
            power="none",
            reporters=[],
        )


def _rank(rank, port, queue):
    """One rank of a two-process group on the CPU (run by torch.multiprocessing)."""
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    from energyframe.kit import registry
    from energyframe.options import parse_spec

    w = registry.create_workload(parse_spec(f"{HF_TINY},tp=2,mode=both,device=cpu"))
    w.setup()
    try:
        layer = w.engine.sharded.layers[0]
        queue.put(
            {
                "rank": rank,
                "ids": w.engine.ids.tolist(),
                "logits": w.engine.logits().tolist(),
                "tokens": w.engine.decode().tolist(),
                "qkv": list(layer.qkv.shape),
                "qkv_bias": list(layer.qkv_bias.shape),
                "down": list(layer.down.shape),
            }
        )
    finally:
        w.teardown()


@pytest.mark.slow
def test_tp2_over_gloo_gives_the_unsharded_models_logits(one_process):
    from torch.distributed.elastic.utils.distributed import get_free_port

    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = get_free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted((queue.get() for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # the unsharded model, as every rank drew it (seed 0) and its own forward
    torch.manual_seed(0)
    options = dict(kv.split("=") for kv in HF_TINY.removeprefix("hf:").split(","))
    config = transformers.Qwen2Config(
        **{k: int(v) for k, v in options.items() if k not in ("arch", "seq_len", "new_tokens")}
    )
    model = transformers.Qwen2ForCausalLM(config).eval()
    ids = torch.tensor(results[0]["ids"])
    with torch.no_grad():
        theirs = model(input_ids=ids, use_cache=False).logits
    sequence = greedy(model, ids, 4)
    for r in results:
        assert r["ids"] == results[0]["ids"]
        # 2 of the 4 query heads and 1 of the 2 key/value heads per rank, 16 features each; down
        # 64 of the 128 MLP features
        assert r["qkv"] == [2 * 16 + 16 + 16, 64] and r["qkv_bias"] == [64] and r["down"] == [64, 64]
        torch.testing.assert_close(torch.tensor(r["logits"]), theirs, rtol=1e-4, atol=1e-4)
        assert r["tokens"] == sequence[:, 7:10].tolist()
