"""Per-layer units recorded as the CUDA graphs run the model (capture_view.py): transformers
builds attention masks under a capture that an eager forward leaves out, so units recorded
eagerly measured another attention than the whole model's graph (BERT and DistilBERT 46-65 %
short on an H200). On the CPU, with the capture seen: Σ units' ops equal the whole model's."""

from collections import Counter

import pytest

from energyframe.workloads.capture_view import seen_as_captured
from energyframe.workloads.hf import HFModel
from energyframe.workloads.layers import decompose
from energyframe.workloads.torchops import is_free

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

#: tiny encoder and encoder-decoder configs, two layers (or one each side) of the real structure
ENCODERS = {
    "BertModel": "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,vocab_size=100",
    "DistilBertModel": "dim=32,n_layers=2,n_heads=2,hidden_dim=64,vocab_size=100",
    "RobertaModel": "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64,vocab_size=100",
    "BartModel": (
        "d_model=32,encoder_layers=1,decoder_layers=1,encoder_attention_heads=2,decoder_attention_heads=2,"
        "encoder_ffn_dim=64,decoder_ffn_dim=64,vocab_size=100"
    ),
    "T5Model": "d_model=32,d_kv=16,d_ff=64,num_layers=1,num_decoder_layers=1,num_heads=2,vocab_size=100",
}


def build(arch: str, padding_mask: bool = False) -> HFModel:
    options = dict(kv.split("=") for kv in ENCODERS[arch].split(","))
    model = HFModel("hf", arch=arch, batch="2", seq_len="8", device="cpu", **options)
    model.build_model()
    if padding_mask:  # what a tokenizer gives: nothing padded
        model.kwargs["attention_mask"] = torch.ones(2, 8, dtype=torch.long)
    return model


class _Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """Every op that launches work, with the shapes and dtypes of its tensor arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket)
        if not (is_free(name) or getattr(func, "is_view", False)):
            tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
            self.seen[(name, tuple((tuple(t.shape), str(t.dtype)) for t in tensors))] += 1
        return out


def ops_of(call) -> Counter:
    mode = _Ops()
    with torch.no_grad(), seen_as_captured(), mode:
        call()
    return mode.seen


def units_ops(model: HFModel, granularity: str, as_captured: bool) -> Counter:
    """Σ over the units of their calls in the forward x the ops one call runs (as a graph would)."""
    found = decompose(model.model, model.args, model.kwargs, granularity, model.block_names(), as_captured)
    total: Counter = Counter()
    for unit in found.units:
        make, call = unit.call_factory(torch.device("cpu"))
        state = make(torch.device("cpu"))
        for key, n in ops_of(lambda call=call, state=state: call(state)).items():
            total[key] += n * unit.count
    return total


def test_the_capture_is_seen_inside_and_restored_after_even_on_error():
    import torch.cuda.graphs as graphs

    before = (torch.cuda.is_current_stream_capturing, graphs.is_current_stream_capturing)
    with seen_as_captured():
        assert torch.cuda.is_current_stream_capturing() is True
        assert graphs.is_current_stream_capturing() is True
    assert (torch.cuda.is_current_stream_capturing, graphs.is_current_stream_capturing) == before
    with pytest.raises(ZeroDivisionError), seen_as_captured():
        1 / 0  # noqa: B018
    assert (torch.cuda.is_current_stream_capturing, graphs.is_current_stream_capturing) == before
    with seen_as_captured(active=False):
        assert torch.cuda.is_current_stream_capturing is before[0]


@pytest.mark.parametrize("granularity", ["leaf", "block"])
@pytest.mark.parametrize("arch", sorted(ENCODERS))
def test_units_recorded_as_captured_run_every_op_of_the_models_graph(arch, granularity):
    model = build(arch)
    whole = ops_of(lambda: model.model(*model.args, **model.kwargs))
    assert units_ops(model, granularity, as_captured=True) == whole


def test_a_padding_mask_reaches_every_unit_as_the_graph_builds_it():
    model = build("BertModel", padding_mask=True)
    whole = ops_of(lambda: model.model(*model.args, **model.kwargs))
    sdpa = [key for key in whole if "scaled_dot_product" in key[0]]
    # the graph's attention takes the mask: q, k, v and a 2 x 1 x 8 x 8 bias
    assert sdpa and all(len(shapes) == 4 and shapes[3][0] == (2, 1, 8, 8) for (_, shapes) in sdpa)
    assert units_ops(model, "block", as_captured=True) == whole
    # recorded eagerly, the host saw nothing padded: the units got no mask, and their attention
    # ran without one, where the model's graph builds the mask and attends through it
    eager = units_ops(model, "block", as_captured=False)
    assert eager != whole
    assert all(len(shapes) == 3 for (name, shapes) in eager if "scaled_dot_product" in name)


def test_a_per_layer_run_on_a_gpu_records_its_units_as_captured(monkeypatch):
    from energyframe.workloads import layers
    from energyframe.workloads.perlayer import PerLayer

    asked = []

    def recording(*args, as_captured=False, **kwargs):
        asked.append(as_captured)
        return decompose(*args, **kwargs)

    monkeypatch.setattr(layers, "decompose", recording)
    w = PerLayer(model="hf", arch="BertModel", batch=2, seq_len=8, device="cpu", granularity="block",
                 **dict(kv.split("=") for kv in ENCODERS["BertModel"].split(",")))
    w.model.build_model()
    w._decompose("block")
    w.model.device = torch.device("cuda", 0)  # what the graphs would run on; nothing runs there here
    w._decompose("block")
    assert asked == [False, True]
