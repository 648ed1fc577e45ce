"""Any model by name or by code: torchvision:name=, timm:name=, hf:arch=, torch:factory= and
ef.Model; their blocks found from the module tree; per-layer, trace and replay on the CPU."""

import json
import math
import textwrap

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import OptionError, WorkloadError
from energyframe.kit import registry
from energyframe.replay.capture import capture
from energyframe.replay.workload import ReplayWorkload
from energyframe.workloads.blocks import find_blocks
from energyframe.workloads.perlayer import PerLayer, per_layer_models, per_layer_spec

torch = pytest.importorskip("torch")
nn = torch.nn

TINY = ef.RunSettings(trials=1, min_window_s=0.01, idle_s=0.0)
TINY_LLAMA = (
    "hf:arch=LlamaForCausalLM,hidden_size=64,intermediate_size=128,num_hidden_layers=2,"
    "num_attention_heads=4,num_key_value_heads=2,vocab_size=256,seq_len=8"
)


class Block(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.norm1, self.norm2 = Norm(d), Norm(d)  # two of one class held as parts: not blocks

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.norm2(self.norm1(x)))))


class Norm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.scale = nn.Linear(d, d)

    def forward(self, x):
        return self.scale(self.ln(x))


class Stage(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(n)])

    def forward(self, x):
        return self.blocks(x)


class Net(nn.Module):
    """Stages of blocks; a head once; a container subclass (Sequential) repeated."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(8, 16)
        self.stages = nn.ModuleList([Stage(2), Stage(3)])
        self.proj = nn.Sequential(nn.Sequential(nn.Linear(16, 16)), nn.Sequential(nn.Linear(16, 16)))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.head(self.proj(x))


def test_blocks_are_the_innermost_classes_repeated_side_by_side_in_a_container():
    found = find_blocks(Net())
    # Stage repeats too, but holds Block; Norm occurs twice per block as parts, not side by side
    # in a container; Sequential is a container, never a block
    assert found.names == ("Block",)
    assert found.describe() == "found: Block x5"
    assert find_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU())).describe() == (
        "none found (no repeated module class)"
    )


@pytest.mark.parametrize(
    "make,blocks",
    [
        (lambda: __import__("torchvision").models.convnext_tiny(), "found: CNBlock x18"),
        (lambda: __import__("torchvision").models.efficientnet_b0(), "found: MBConv x16"),
        (lambda: __import__("timm").create_model("convnext_atto"), "found: ConvNeXtBlock x12"),
    ],
    ids=["tv-convnext", "tv-efficientnet", "timm-convnext"],
)
def test_blocks_of_real_networks(make, blocks):
    pytest.importorskip("timm")
    with torch.device("meta"):
        assert find_blocks(make()).describe() == blocks


def make(spec):
    return registry.create_workload(spec)


def test_torchvision_and_timm_by_name_are_checked_before_anything_starts():
    w = make("torchvision:name=convnext_tiny,batch=2,image_size=64")
    assert w.name == "torchvision" and w.label() == "convnext_tiny" and w.options["batch"] == 2
    with pytest.raises(OptionError) as e:
        make("torchvision:name=convnxt_tiny")
    assert str(e.value).startswith("torchvision has no model 'convnxt_tiny' (") and str(e.value).endswith(
        "known; close: convnext_tiny, convnext_base, convnext_small, convnext_large)"
    )
    pytest.importorskip("timm")
    assert make("timm:name=convnext_atto").label() == "convnext_atto"
    with pytest.raises(OptionError, match=r"^timm has no model 'resnet_5' \(\d+ known; close: resnet50"):
        make("timm:name=resnet_5")


def test_a_missing_library_names_the_extra(monkeypatch):
    from energyframe.kit import extras

    real = extras.installed
    monkeypatch.setattr(extras, "installed", lambda m: m != "timm" and real(m))
    r = CliRunner().invoke(main, ["run", "--power", "none", "--workload", "timm:name=convnext_atto"])
    assert r.exit_code == 2
    assert r.output.endswith("Error: workload 'timm' needs timm: pip install 'energyframe[models]'\n")


def test_the_cli_refuses_an_unknown_name_in_one_line():
    r = CliRunner().invoke(main, ["run", "--power", "none", "--workload", "torchvision:name=resnet5"])
    assert r.exit_code == 2 and r.output.startswith("Error: torchvision has no model 'resnet5' (")
    assert "Traceback" not in r.output and r.output.count("\n") == 1


def test_hf_config_overrides_are_typed_and_checked():
    w = make(f"{TINY_LLAMA},rms_norm_eps=1e-5,tie_word_embeddings=true")
    assert w.label() == "LlamaForCausalLM"
    assert w.overrides["hidden_size"] == 64 and w.overrides["rms_norm_eps"] == 1e-5
    assert w.overrides["tie_word_embeddings"] is True
    assert make("hf:arch=gpt2,n_layer=1").label() == "GPT2LMHeadModel"  # a model type: its causal LM
    cases = {
        "hf:arch=LamaForCausalLM": "transformers has no architecture 'LamaForCausalLM': give a model class "
        "(LlamaForCausalLM, GPT2LMHeadModel, ...) or a model type (llama, gpt2, ...); close: LlamaForCausalLM",
        "hf:arch=llama,hiden_size=3": "unknown option 'hiden_size' for workload 'hf': neither an option nor an "
        "attribute of LlamaConfig (close: hidden_size, hidden_act)",
        "hf:arch=llama,hidden_size=wide": "option 'hidden_size' of workload 'hf' expects an integer (its "
        "config's default is 4096), got 'wide'",
        "hf:arch=llama,mode=decode,execution=graph": "hf: execution=graph captures a forward pass; mode=decode "
        "runs transformers' generate, which checks its stopping criteria on the host (use execution=eager or compile, "
        "or tp=1: decode steps on fixed buffers, each one graph)",
        "hf:seq_len=3": "hf needs option 'arch' (or weights=DIR, a checkpoint with its config)",
    }
    for spec, message in cases.items():
        with pytest.raises(OptionError) as e:
            make(spec)
        assert str(e.value).startswith(message), spec


def test_hf_builds_the_configured_model_with_its_inputs():
    w = make(TINY_LLAMA + ",batch=2")
    w.setup()
    assert w.model.config.hidden_size == 64 and w.model.config.num_hidden_layers == 2
    assert w.args[0].shape == (2, 8) and set(w.kwargs) == {"use_cache", "attention_mask"}
    mask = w.kwargs["attention_mask"]
    assert mask.shape == (2, 1, 8, 8) and torch.equal(mask[0, 0], torch.ones(8, 8, dtype=torch.bool).tril())
    assert w.work() == {"tokens": 16.0} and w.block_names() == ("LlamaDecoderLayer",)
    assert w.info()["config_overrides"]["num_key_value_heads"] == 2
    vit = make("hf:arch=ViTModel,hidden_size=32,num_hidden_layers=1,num_attention_heads=2,intermediate_size=64,image_size=32,patch_size=8")
    vit.setup()  # image_size is the input's and the config's (its position embeddings)
    assert vit.args[0].shape == (1, 3, 32, 32) and vit.work() == {"images": 1.0}
    vit.model(*vit.args, **vit.kwargs)


def test_a_causal_lm_gets_its_mask_so_its_forward_never_reads_the_host():
    from torch.utils._python_dispatch import TorchDispatchMode

    class HostReads(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, a=(), k=None):
            if "_local_scalar_dense" in str(func):
                self.ops.append(str(func))
            return func(*a, **(k or {}))

    w = make(TINY_LLAMA)
    w.setup()
    with torch.no_grad(), HostReads() as reads:
        given = w.model(*w.args, **w.kwargs).logits
    # the mask changes nothing: the same logits as transformers' own causal attention
    without = w.model(*w.args, use_cache=False).logits
    assert reads.ops == [] and torch.allclose(given, without, atol=1e-5)
    with torch.no_grad(), HostReads() as reads:
        w.model(*w.args, use_cache=False)
    assert reads.ops  # what the mask avoids: transformers' host check in an eager forward


def test_hf_weights_from_a_local_checkpoint(tmp_path):
    w = make(TINY_LLAMA)
    w.setup()
    w.model.save_pretrained(tmp_path / "ckpt")
    loaded = make(f"hf:weights={tmp_path / 'ckpt'},seq_len=4,num_hidden_layers=1")  # arch from config.json
    loaded.setup()
    assert loaded.label() == "LlamaForCausalLM" and loaded.model.config.num_hidden_layers == 1
    same = loaded.model.model.embed_tokens.weight
    assert torch.equal(same, w.model.model.embed_tokens.weight)


def test_hf_decode_generates_new_tokens():
    w = make(TINY_LLAMA + ",mode=decode,new_tokens=3")
    w.setup()
    (phase,) = w.phases()
    assert phase.name == "generate" and w.work() == {"tokens": 3.0}
    phase.step()


FACTORY = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            return x + self.b(torch.relu(self.a(x)))

    def make(batch=3, device=None):
        net = nn.Sequential(nn.Linear(4, 8), nn.Sequential(Block(), Block()), nn.Linear(8, 2))
        return net, torch.randn(batch, 4)

    def kwargs_only():
        return nn.Linear(4, 2), (), {"input": torch.randn(5, 4)}

    def not_a_model():
        return "model", torch.randn(1)
    """
)


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    (tmp_path / "my_nets.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)  # the working directory is searched first
    return tmp_path


def test_a_factory_gives_the_model_and_its_inputs(factory_module):
    w = make("torch:factory=my_nets:make,batch=6")
    w.setup()
    assert w.label() == "make" and w.args[0].shape == (6, 4) and w.work() == {"items": 6.0}
    assert w.dtype_name() == "fp32" and w.block_names() == ("Block",)
    w = make(f"torch:factory={factory_module / 'my_nets.py'}:kwargs_only,dtype=fp32")
    w.setup()
    assert set(w.kwargs) == {"input"} and w.work() == {"items": 5.0}


@pytest.mark.parametrize(
    "factory,message",
    [
        ("my_nets", "factory 'my_nets' must be module:function (mypkg.nets:make or nets.py:make)"),
        ("no_such_module:make", "factory 'no_such_module:make': cannot import no_such_module: "
         "ModuleNotFoundError: No module named 'no_such_module'"),
        ("my_nets:nothing", "factory 'my_nets:nothing': my_nets has no function 'nothing'"),
        ("gone.py:make", "factory file 'gone.py' does not exist"),
    ],
)
def test_a_bad_factory_is_refused_before_anything_starts(factory_module, factory, message):
    r = CliRunner().invoke(main, ["run", "--power", "none", "--workload", f"torch:factory={factory}"])
    assert r.exit_code == 2 and r.output == f"Error: {message}\n"


def test_a_factory_that_returns_no_model_says_so(factory_module):
    w = make("torch:factory=my_nets:not_a_model")
    with pytest.raises(WorkloadError, match=r"^factory my_nets:not_a_model returned a str as the model"):
        w.setup()


def test_the_new_models_have_a_per_layer_mode_and_take_their_options():
    assert {"torchvision", "timm", "hf", "torch"} <= set(per_layer_models())
    spec = per_layer_spec("torchvision:name=convnext_tiny,image_size=32", validate=True)
    assert spec == "per-layer:model=torchvision,name=convnext_tiny,image_size=32,validate=true"
    w = make(spec)
    assert w.model.label() == "convnext_tiny" and w.model.options["image_size"] == 32
    w = make(per_layer_spec(TINY_LLAMA))  # the config's keys pass through to the model
    assert w.model.overrides["hidden_size"] == 64
    with pytest.raises(OptionError, match=r"^unknown option 'execution' for per-layer:model=hf\."):
        make("per-layer:model=hf,arch=gpt2,execution=graph")
    with pytest.raises(OptionError, match=r"^unknown option 'n_layr' for workload 'hf'"):
        make("per-layer:model=hf,arch=gpt2,n_layr=1")


def test_ef_model_is_a_workload_wherever_one_is_accepted():
    net, x = Net(), torch.randn(3, 8)
    result = ef.run(ef.Model(net, x, name="net"), power="none", reporters=[], settings=TINY)
    assert list(result.windows["phase"].unique()) == ["forward"]
    assert result.summary("forward").work == {"items": 3.0}
    info = result.meta["workload"]["info"]
    assert info["model"] == "net" and info["blocks"] == "found: Block x5" and info["dtype"] == "fp32"
    assert ef.Model(net, {"x": x}, work={"rows": 3}).work() == {"rows": 3}
    with pytest.raises(WorkloadError, match="^ef.Model needs a torch.nn.Module, not str"):
        ef.Model("net", x)
    with pytest.raises(OptionError, match="^unknown option 'bacth' for workload 'Net'"):
        ef.Model(net, x, bacth=2)


@pytest.mark.slow
def test_ef_model_per_layer_with_validation_and_asked_blocks(tmp_path):
    net, x = Net(), torch.randn(3, 8)
    model = ef.Model(net, x, name="net", blocks=["Stage"], whole_unroll=2)
    result = ef.run(
        PerLayer(model=model, validate=True, granularity="block", unroll=2),
        power="none",
        reporters=[],
        out=tmp_path / "run",
        settings=TINY,
    )
    summary = result.derived_table("summary").rows[0]
    assert summary["blocks"] == "asked for: Stage x2" and summary["granularity"] == "block"
    layers = result.derived_table("layers").rows
    assert {r["type"] for r in layers} >= {"Stage", "Linear"}
    assert sum(r["count"] for r in layers if r["type"] == "Stage") == 2
    closure = {r["term"]: r for r in result.derived_table("closure").rows}
    assert math.isfinite(summary["latency_diff_pct"]) and "whole model" in closure


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec,blocks",
    [
        ("torchvision:name=convnext_tiny,image_size=32", "found: CNBlock x18"),
        (TINY_LLAMA, "found: LlamaDecoderLayer x2"),
    ],
    ids=["torchvision", "hf"],
)
def test_per_layer_of_a_model_by_name_on_the_cli(tmp_path, spec, blocks):
    r = CliRunner().invoke(
        main,
        ["run", "--power", "none", "--workload", f"{spec},unroll=2,whole_unroll=2", "--per-layer", "--validate",
         "--trials", "1", "--min-window", "0.01", "--idle", "0", "--out", str(tmp_path / "r")],
    )
    assert r.exit_code == 0, r.output
    summary = ef.RunResult.load(tmp_path / "r").derived_table("summary").rows[0]
    assert summary["blocks"] == blocks and math.isfinite(summary["latency_diff_pct"])
    assert (tmp_path / "r" / "closure.csv").exists()


@pytest.mark.slow
def test_trace_and_replay_of_a_model_made_in_python(tmp_path):
    net, x = Net(), torch.randn(3, 8)
    meta = capture(ef.Model(net, x), tmp_path / "trace", steps=2, warmup=1)
    assert meta["workload"] is None and meta["workload_name"] == "Net" and meta["unique_leaf_ops"] > 3
    result = ef.run(
        ReplayWorkload(trace=str(tmp_path / "trace"), full=ef.Model(net, x), unroll=2),
        power="none",
        reporters=[],
        settings=TINY,
    )
    comparison = result.derived_table("comparison").rows[0]
    assert comparison["workload"] == "(python) Net" and comparison["full_model_inference_us"] > 0
    assert comparison["replayed_ops"] == meta["unique_leaf_ops"] and comparison["not_rebuilt_ops"] == 0
    # without the model, the trace of one made in Python has no full model to measure
    result = ef.run(f"replay:trace={tmp_path / 'trace'},unroll=2", power="none", reporters=[], settings=TINY)
    assert "(full model)" not in set(result.windows["phase"])


@pytest.mark.slow
def test_trace_and_replay_of_an_hf_model_on_the_cli(tmp_path):
    r = CliRunner().invoke(main, ["trace", "--workload", TINY_LLAMA, "--out", str(tmp_path / "t"), "--steps", "2"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "t" / "trace_meta.json").read_text())["workload"] == TINY_LLAMA
    result = ef.run(f"replay:trace={tmp_path / 't'},unroll=2,limit=5", power="none", reporters=[], settings=TINY)
    comparison = result.derived_table("comparison").rows[0]
    assert comparison["workload"] == TINY_LLAMA and comparison["full_model_inference_us"] > 0


@pytest.mark.slow
def test_the_benchmark_runs_its_steps_on_a_tiny_model(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "any_model.py"
    spec = importlib.util.spec_from_file_location("any_model_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--dry-run", "--only", "2", "--only", "4"]) == 0
    out = capsys.readouterr().out
    assert "| hf:arch=LlamaForCausalLM | 1 | " in out and "FAILED" not in out
    # an encoder-decoder: its closure, not replayed
    assert "| hf:arch=BartModel | 2 | " in out and "| +nan % n/a | +nan % n/a |" in out
