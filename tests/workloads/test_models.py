"""Named models: per-layer pipelines built from each (on meta tensors: no memory, no compute),
and a per-layer run with validation end to end on the CPU."""

from collections import Counter

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.workloads import models
from energyframe.workloads.perlayer import PerLayer

torch = pytest.importorskip("torch")


def decomposed(cls, **options):
    workload = PerLayer(model=cls(name=cls.__name__, device="meta", dtype="fp16", **options))
    workload.setup()
    c = Counter()
    for unit in workload.decomposition.units:
        c[unit.type_name] += unit.count
    return workload.decomposition, c


@pytest.mark.parametrize(
    "cls,convs,calls",
    [
        (models.ResNet18, 20, 68),
        (models.ResNet50, 53, 174),
        (models.MobileNetV3Small, 52, 155),
        (models.EfficientNetB0, 81, 238),
        (models.RepLKNet31B, 130, 311),
    ],
)
def test_convnets_decompose_into_their_layers(cls, convs, calls):
    d, c = decomposed(cls)
    assert c["Conv2d"] == convs
    assert d.calls == calls
    assert d.deduplicated == calls - len(d.units) > 0


def test_replknet31b_has_the_papers_shape():
    d, c = decomposed(models.RepLKNet31B)
    large = {
        u.module.kernel_size[0]: u.count
        for u in d.units
        if u.type_name == "Conv2d" and u.module.groups > 1 and u.module.kernel_size[0] > 3
    }
    assert large == {31: 2, 29: 2, 27: 18, 13: 2}  # one large depthwise conv per RepLK block
    assert c["GELU"] == 24  # one ConvFFN per RepLK block: depths 2/2/18/2
    widths = {u.module.in_channels for u in d.units if u.type_name == "Conv2d" and u.module.groups > 1}
    assert widths == {128, 256, 512, 1024}


def test_vit_image_size_option():
    d, c = decomposed(models.ViTB16, image_size=384)
    conv = next(u for u in d.units if u.type_name == "Conv2d")
    assert conv.args[0].shape == (1, 3, 384, 384)
    assert c["LayerNorm"] == 25


@pytest.mark.parametrize("cls,new_tokens", [(models.OPT66BPrefill, 512), (models.OPT66BDecode, 1)])
def test_opt66b_one_layer_measured_and_counted_64_times(cls, new_tokens):
    d, c = decomposed(cls)
    assert c["Linear"] == 64 * 6 + 1  # q, k, v, out, fc1, fc2 per layer; the LM head once
    assert c["LayerNorm"] == 64 * 2 + 1
    assert c["ReLU"] == 64 and c["Embedding"] == 2
    fc1 = next(u for u in d.units if u.path == "layers.0.fc1")
    assert fc1.module.weight.shape == (36864, 9216)
    assert fc1.args[0].shape == (1, new_tokens, 9216)
    assert fc1.measured_calls == 1 and fc1.count == 64
    head = next(u for u in d.units if u.path == "lm_head")
    assert head.count == 1 and head.module.weight.shape == (50272, 9216)


def test_opt66b_decode_attends_to_the_cache():
    d, c = decomposed(models.OPT66BDecode, kv_len=100)
    cat = next(u for u in d.units if u.type_name == "aten.cat")
    assert [m.shape for m in cat.args[0]] == [(1, 72, 100, 128), (1, 72, 1, 128)]
    assert cat.count == 128  # keys and values, 64 layers


@pytest.mark.slow
def test_per_layer_run_with_validation_on_the_cpu(tmp_path):
    result = ef.run(
        "per-layer:model=resnet18,image_size=32,granularity=leaf,validate=true,unroll=2,whole_unroll=2",
        power="none",
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunSettings(trials=2, min_window_s=0.01),
    )
    layers = result.derived_table("layers").rows
    summary = result.derived_table("summary").rows[0]
    assert sum(r["count"] for r in layers) == summary["calls"] == 68
    assert summary["unique_units"] == len(layers) == 28 and summary["deduplicated_calls"] == 40
    assert summary["sum_latency_s"] == pytest.approx(sum(r["count"] * r["latency_s"] for r in layers))
    assert summary["whole_latency_s"] > 0
    assert summary["latency_diff_pct"] == pytest.approx(
        100 * (summary["sum_latency_s"] / summary["whole_latency_s"] - 1)
    )
    assert "(whole model)" in set(result.windows["phase"])
    assert (tmp_path / "run" / "layers.csv").exists() and (tmp_path / "run" / "summary.csv").exists()
    assert result.meta["config"]["min_window_s_used"] == 0.01


@pytest.mark.slow
def test_whole_model_eager_on_the_cpu():
    result = ef.run(
        "resnet18:image_size=32",
        power="none",
        reporters=[],
        settings=ef.RunSettings(trials=2, min_window_s=0.05, warmup_s=0.0),
    )
    assert list(result.windows["phase"].unique()) == ["forward"]
    assert result.summary("forward").work == {"images": 1.0}


@pytest.mark.slow
def test_per_layer_flags_on_the_cli(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["run", "--power", "none", "--workload", "matmul", "--per-layer"])
    assert r.exit_code == 2 and r.output.endswith(
        "Error: workload 'matmul' has no per-layer mode. Models that have one: efficientnet_b0, hf, "
        "mobilenet_v3_small, opt-66b-decode, opt-66b-prefill, replknet31b, resnet18, resnet50, timm, torch, "
        "torchvision, vit_b_16\n"
    )
    r = runner.invoke(main, ["run", "--power", "none", "--workload", "resnet18", "--validate"])
    assert r.exit_code == 2 and "add --per-layer" in r.output
    r = runner.invoke(
        main,
        [
            "run",
            "--power",
            "none",
            "--workload",
            "resnet18:image_size=32,unroll=2",
            "--per-layer",
            "--trials",
            "1",
            "--min-window",
            "0.01",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "resnet18_b1_fp32: per layer, per call" in r.output
    assert "resnet18_b1_fp32: pipeline totals per item" in r.output
