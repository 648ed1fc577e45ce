"""vicuna-7b: its configuration, its errors, prefill and decode on the CPU, and tensor parallelism
over gloo (two real processes: the same logits as one, and as transformers' own model)."""

import os

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import WorkloadError
from energyframe.workloads.llama_tp import VicunaTP, llama_intermediate

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = {"hidden": 64, "layers": 2, "heads": 4, "vocab": 128, "seq_len": 7, "new_tokens": 3, "device": "cpu"}
LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def one_process(monkeypatch):
    """No launcher in the environment (as a plain pytest run usually has it)."""
    for name in LAUNCHER:
        monkeypatch.delenv(name, raising=False)


def test_config_is_vicuna_7b_as_published(one_process):
    config = VicunaTP().config()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (4096, 32, 32)
    assert (config.intermediate_size, config.vocab_size, config.num_key_value_heads) == (11008, 32000, 32)
    assert config.rms_norm_eps == 1e-6 and config.hidden_act == "silu" and not config.tie_word_embeddings
    theta = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
    assert theta == 10000.0
    defaults = transformers.LlamaConfig()  # Llama-7B, which Vicuna-7B fine-tunes
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        assert getattr(config, key) == getattr(defaults, key), key


def test_shrinking_follows_llamas_mlp_rule(one_process):
    assert llama_intermediate(4096) == 11008
    config = VicunaTP(hidden=64, layers=2, heads=4, vocab=128).config()
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers) == (64, 256, 2)
    assert VicunaTP(hidden=64, heads=4, intermediate=100).config().intermediate_size == 100


@pytest.mark.parametrize(
    "env,options,message",
    [
        (
            {"WORLD_SIZE": "4"},
            {"tp": 4, "hidden": 96, "heads": 6},
            "vicuna-7b: tp=4 does not divide the 6 attention heads; use tp=1, 2",
        ),
        (
            {"WORLD_SIZE": "2"},
            {"tp": 2, "hidden": 64, "heads": 4, "intermediate": 101},
            "vicuna-7b: tp=2 does not divide the MLP's 101 features; set intermediate to a multiple of tp",
        ),
        (
            {},
            {"tp": 2},
            "vicuna-7b: tp=2 runs one process per rank, 2 in all, but WORLD_SIZE is not set; "
            "run it under torchrun --nproc-per-node 2",
        ),
        (
            {"WORLD_SIZE": "4"},
            {"tp": 2},
            "vicuna-7b: tp=2 runs one process per rank, 2 in all, but WORLD_SIZE is 4; "
            "run it under torchrun --nproc-per-node 2",
        ),
        (
            {"WORLD_SIZE": "2"},
            {"tp": 1},
            "vicuna-7b: tp=1 runs in one process, but WORLD_SIZE is 2; run it without torchrun, or set tp=2",
        ),
    ],
)
def test_a_split_that_cannot_work_is_refused(one_process, monkeypatch, env, options, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(WorkloadError) as e:
        VicunaTP("vicuna-7b", **options)
    assert str(e.value) == message


def test_fewer_gpus_than_tp_is_refused(one_process, monkeypatch):
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= 8:
        pytest.skip("this machine has 8 GPUs: tp=8 fits")
    monkeypatch.setenv("WORLD_SIZE", "8")
    with pytest.raises(WorkloadError) as e:
        VicunaTP("vicuna-7b", tp=8, device="cuda")
    assert str(e.value) == (
        f"vicuna-7b: tp=8 needs 8 GPUs, one per rank, but torch sees {gpus}; "
        "use device=cpu to run the ranks on the CPU"
    )


def test_the_cli_prints_the_error_on_one_line(one_process, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "--power", "none", "--workload", "vicuna-7b:tp=2"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: vicuna-7b: tp=2 runs one process per rank, 2 in all, but WORLD_SIZE is not set; "
        "run it under torchrun --nproc-per-node 2\n"
    )
    assert not (tmp_path / "runs").exists()  # refused before anything started


def test_tp1_prefill_and_decode_per_token_on_the_cpu(one_process, tmp_path):
    spec = "vicuna-7b:" + ",".join(f"{k}={v}" for k, v in TINY.items()) + ",mode=both"
    result = ef.run(
        spec,
        power="none",
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunSettings(trials=2, min_window_s=0.02, warmup=1),
    )
    assert [s.phase for s in result.summaries] == ["prefill", "decode"]
    assert result.summary("prefill").work == {"tokens": 7.0}
    assert result.summary("decode").work == {"tokens": 3.0}
    rows = {r["phase"]: r for r in result.derived_table("tokens").rows}
    for phase, tokens in (("prefill", 7), ("decode", 3)):
        s = result.summary(phase)
        assert rows[phase]["latency_per_token_s"] == pytest.approx(s.time_per_iter_s.median / tokens)
        assert rows[phase]["rank"] == 0 and rows[phase]["tp"] == 1
    info = result.meta["workload"]["info"]
    assert info["heads_per_rank"] == 4 and info["all_reduces_per_forward"] == 0
    # run.json's info is read after teardown dropped the model: the count must survive it
    h, i, v, n = TINY["hidden"], info["intermediate"], TINY["vocab"], TINY["layers"]
    per_layer = 4 * h * h + 3 * h * i + 2 * h  # q, k, v, o; gate, up, down; two RMS norms
    assert info["parameters_on_this_rank"] == 2 * v * h + n * per_layer + h  # embeddings, head, final norm
    assert (tmp_path / "run" / "tokens.csv").exists()


def test_decode_on_the_kv_cache_matches_recomputing_the_sequence(one_process):
    w = VicunaTP(**TINY)
    w.setup()
    try:
        tokens = w.decode()  # new_tokens=3: the key/value buffers hold the prompt and 3 more
        assert tokens.shape == (1, 3)
        with pytest.raises(WorkloadError, match="4 decode steps do not fit"):
            w.decode(4)
        sequence = w.ids
        for _ in range(4):  # greedy, the whole sequence through the model each time, no cache
            nxt = w.logits(sequence)[:, -1:].argmax(-1)
            sequence = torch.cat([sequence, nxt], dim=1)
        # the prompt's forward chose the first new token; each decode forward feeds the last
        # token and chooses the next
        assert tokens.tolist() == sequence[:, 8:].tolist()
        # every decode starts again from the prompt: the same tokens twice
        assert w.decode().tolist() == tokens.tolist()
        assert w.prefill().shape == (1, 1, TINY["vocab"])
    finally:
        w.teardown()


def _rank(rank, port, spec, queue):
    """One rank of a two-process group on the CPU (run by torch.multiprocessing)."""
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    w = VicunaTP("vicuna-7b", tp=2, **spec)
    w.setup()
    try:
        layer = w.engine.sharded.layers[0]
        logits, tokens = w.logits().numpy().tolist(), w.decode().tolist()
        # measured over both ranks (beside the process group joined above): the measurement
        # agrees every phase's steps per window
        options = ",".join(f"{k}={v}" for k, v in spec.items())
        result = ef.run(
            f"vicuna-7b:tp=2,mode=both,{options}",
            power="none",
            reporters=[],
            settings=ef.RunSettings(trials=2, min_window_s=0.02, warmup=1),
        )
        windows = result.windows
        if "rank" in windows:  # rank 0 has every rank's windows
            windows = windows[windows["rank"] == rank]
        queue.put(
            {
                "rank": rank,
                "logits": logits,
                "tokens": tokens,
                "qkv_local": list(layer.qkv.shape),
                "down_local": list(layer.down.shape),
                "steps": [int(n) for n in windows["iterations"]],
                "phases": [s.phase for s in result.summaries],
                "backend": w.info()["backend"],
            }
        )
    finally:
        w.teardown()


@pytest.mark.slow
def test_tp2_over_gloo_gives_the_logits_of_tp1(one_process):
    import numpy as np
    from torch.distributed.elastic.utils.distributed import get_free_port

    spec = {**TINY, "window_s": 0.02}
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = get_free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, spec, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = sorted((queue.get() for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    single = VicunaTP(**spec)
    single.setup()
    reference, tokens, ids = single.logits().numpy(), single.decode().tolist(), single.ids
    single.teardown()
    torch.manual_seed(0)  # the weights every rank drew (seed=0)
    unsharded = transformers.AutoModelForCausalLM.from_config(single.config(), dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = unsharded(input_ids=ids, use_cache=False).logits.numpy()
    for r in results:
        # 2 of the 4 heads per rank: q, k and v 32 of the 64 output features each; down 128 of 256 inputs
        assert r["qkv_local"] == [3 * 32, 64] and r["down_local"] == [64, 128]
        assert r["backend"] == "gloo"
        np.testing.assert_allclose(np.array(r["logits"]), reference, rtol=1e-5, atol=1e-5)
        # and transformers' own forward of the unsharded model, every position
        np.testing.assert_allclose(np.array(r["logits"]), theirs, rtol=1e-4, atol=1e-4)
        assert r["tokens"] == tokens
    # the ranks agreed their steps: the same in every window, rank 0's part and rank 1's
    assert results[0]["steps"] == results[1]["steps"] and len(results[0]["steps"]) == 4
    assert min(results[0]["steps"]) >= 1
    assert results[0]["phases"] == ["prefill", "decode"]
