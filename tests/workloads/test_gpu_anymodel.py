"""Models by name on a real GPU (``pytest -m gpu``): a torchvision ConvNeXt, a timm ViT and a
Llama-shaped transformers config, whole as one CUDA graph and layer by layer against it. The
validation figures (closure within 5 %, replay within 10 %) come from benchmarks/any_model.py;
these tests check that each model is captured whole and that its units add up to it."""

import math

import pytest

import energyframe as ef

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

LLAMA = (
    "hf:arch=LlamaForCausalLM,hidden_size=1024,intermediate_size=2816,num_hidden_layers=8,"
    "num_attention_heads=16,num_key_value_heads=4,vocab_size=32000,seq_len=256"
)
MODELS = ["torchvision:name=convnext_tiny,batch=32", "timm:name=vit_small_patch16_224,batch=32", LLAMA]


@pytest.fixture(scope="module", autouse=True)
def gpu():
    assert torch.cuda.is_available(), "these tests need a CUDA GPU"


@pytest.mark.parametrize("spec", MODELS, ids=["torchvision", "timm", "hf"])
def test_the_whole_model_is_one_cuda_graph(spec):
    if spec.startswith("timm:"):
        pytest.importorskip("timm")
    result = ef.run(f"{spec},execution=graph", power=["nvml:gpus=0"], reporters=[])
    info = result.meta["workload"]["info"]
    # transformers checks its masks on the host when no stream captures: the capture is tried anyway
    # why it ran otherwise, if it did (once seen failing after the whole suite's earlier tests,
    # 2026-11-29, passing alone: docs/validation.md)
    assert info["execution"] == "cuda graph", info
    assert result.summary("forward", "gpu0").energy_per_iter_j.median > 0


@pytest.mark.parametrize("spec", MODELS, ids=["torchvision", "timm", "hf"])
def test_units_found_in_an_unknown_model_add_up_to_it(spec):
    if spec.startswith("timm:"):
        pytest.importorskip("timm")
    name, _, options = spec.partition(":")
    result = ef.run(f"per-layer:model={name},{options},validate=true", power=["nvml:gpus=0"], reporters=[])
    summary = result.derived_table("summary").rows[0]
    layers = result.derived_table("layers").rows
    assert summary["blocks"].startswith("found: ")
    assert sum(1 for r in layers if r["execution"] != "cuda graph") <= 1  # at most a host-syncing glue op
    assert math.isfinite(summary["latency_diff_pct"]) and math.isfinite(summary["energy_diff_pct"])
    # a decomposition that lost a kind of layer would be off by tens of percent
    assert abs(summary["latency_diff_pct"]) < 10 and abs(summary["energy_diff_pct"]) < 10


#: issue 38's encoder rows: Σ units had been 46-65 % short of the whole model; BART's layers
#: check on the host for an overflow in fp16, which failed its capture (-77 %)
ENCODERS = [
    "hf:arch=BertModel,seq_len=128,batch=16",
    "hf:arch=DistilBertModel,seq_len=256,batch=8",
    "hf:arch=BartModel,seq_len=128,batch=8",
]


@pytest.mark.parametrize("spec", ENCODERS, ids=["bert", "distilbert", "bart"])
def test_an_encoders_units_add_up_to_it_with_the_defaults(spec):
    name, _, options = spec.partition(":")
    result = ef.run(f"per-layer:model={name},{options},validate=true", power=["nvml:gpus=0"], reporters=[])
    summary = result.derived_table("summary").rows[0]
    closure = {r["term"]: r for r in result.derived_table("closure").rows}
    print(summary["latency_diff_pct"], summary["energy_diff_pct"], closure["residual"]["cause"])
    # the whole model ran as one graph, and its profile split the residual into measured parts
    assert closure["whole model"]["cause"].endswith("one CUDA graph")
    assert closure["residual"]["cause"].startswith(("within the noise", "measured"))
    assert abs(summary["latency_diff_pct"]) <= 5 and abs(summary["energy_diff_pct"]) <= 5
