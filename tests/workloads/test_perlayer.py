"""The per-layer wrapper workload: options passed to the model, the spec the CLI builds, the
removed per_layer=true, and the named models' table against pyproject's entry points."""

import importlib.metadata as md

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import OptionError, PluginNotFoundError, UsageError
from energyframe.kit import registry
from energyframe.workloads import lm, models
from energyframe.workloads.perlayer import PerLayer, per_layer_models, per_layer_spec

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

TINY = ef.RunSettings(trials=1, min_window_s=0.01, idle_s=0.0)


def make(spec):
    return registry.create(registry.WORKLOADS, spec)


def test_model_options_pass_through_and_are_checked():
    w = make("per-layer:model=resnet18,batch=2,image_size=64,granularity=block,validate=true")
    assert w.options == {
        "model": "resnet18",
        "granularity": "block",
        "validate": True,
        "l2": "rotate",
        "unroll": 100,
        "window_s": None,
        "lead_s": 0.0,
        "prepare": "each",
        "activations": "reuse",
        "kernel_gaps": False,
    }
    assert (
        w.model.name == "resnet18" and w.model.options["batch"] == 2 and w.model.options["image_size"] == 64
    )


@pytest.mark.parametrize(
    "spec,message",
    [
        (
            "per-layer:model=resnet18,bacth=2",
            "unknown option 'bacth' for per-layer:model=resnet18. Valid options: model, granularity, validate, "
            "l2, unroll, window_s, lead_s, prepare, activations, kernel_gaps (per-layer); batch, channels_last, device, dtype, image_size, weights, whole_unroll "
            "(resnet18)",
        ),
        (  # a whole-model option means nothing per layer
            "per-layer:model=resnet18,execution=graph",
            "unknown option 'execution' for per-layer:model=resnet18. Valid options: model, granularity, validate, "
            "l2, unroll, window_s, lead_s, prepare, activations, kernel_gaps (per-layer); batch, channels_last, device, dtype, image_size, weights, whole_unroll "
            "(resnet18)",
        ),
        (
            "per-layer:model=resnet18,batch=two",
            "option 'batch' of workload 'resnet18' expects an integer, got 'two'",
        ),
        ("per-layer:batch=2", "workload 'per-layer' needs option 'model'"),
    ],
)
def test_bad_options_name_the_valid_ones(spec, message):
    with pytest.raises(OptionError) as e:
        make(spec)
    assert str(e.value).startswith(message)


def test_only_models_with_a_per_layer_mode_are_taken():
    names = per_layer_models()
    assert {"resnet50", "vit_b_16", "replknet31b", "opt-66b-decode"} <= set(names)
    assert "matmul" not in names and "bloom-560m" not in names
    with pytest.raises(OptionError) as e:
        make("per-layer:model=matmul")
    assert (
        str(e.value) == f"workload 'matmul' has no per-layer mode. Models that have one: {', '.join(names)}"
    )
    with pytest.raises(PluginNotFoundError, match="unknown workload 'resnet51'. Did you mean 'resnet50'"):
        make("per-layer:model=resnet51")


@pytest.mark.parametrize(
    "spec,validate,expected",
    [
        ("resnet50", False, "per-layer:model=resnet50"),
        ("resnet50:batch=64", True, "per-layer:model=resnet50,batch=64,validate=true"),
        ("opt-66b-decode:kv_len=100,layers=2", False, "per-layer:model=opt-66b-decode,kv_len=100,layers=2"),
        (
            "per-layer:model=vit_b_16,granularity=block",
            True,
            "per-layer:model=vit_b_16,granularity=block,validate=true",
        ),
    ],
)
def test_per_layer_spec(spec, validate, expected):
    assert per_layer_spec(spec, validate) == expected
    make(expected)  # a spec the registry takes


@pytest.mark.parametrize(
    "spec,message",
    [
        (None, "--per-layer needs --workload MODEL"),
        ("resnet50:per_layer=true", "resnet50: option 'per_layer' has no place in a per-layer spec"),
        ("resnet50:model=x", "resnet50: option 'model' has no place in a per-layer spec"),
    ],
)
def test_per_layer_spec_refuses(spec, message):
    with pytest.raises(UsageError) as e:
        per_layer_spec(spec)
    assert str(e.value).startswith(message)


def test_a_made_model_can_be_wrapped():
    model = models.ResNet18(name="resnet18", image_size=32)
    w = PerLayer(model=model, granularity="block")
    assert w.model is model and w.options["model"] == "resnet18"
    with pytest.raises(OptionError, match=r"options \['batch'\] belong to the model"):
        PerLayer(model=model, batch=2)


def test_per_layer_true_is_refused_and_names_the_wrapper():
    with pytest.raises(OptionError) as e:
        make("resnet18:per_layer=true,image_size=32")
    assert str(e.value) == (
        "resnet18: per_layer=true was removed in 0.x; measure layer by layer with per-layer:model=resnet18 "
        "(the same run; energyframe run --per-layer)"
    )
    with pytest.raises(OptionError) as e:
        make("resnet18:validate=true")
    assert str(e.value) == (
        "resnet18: validate is an option of the per-layer wrapper; use per-layer:model=resnet18,validate=true"
    )
    with pytest.raises(OptionError) as e:  # the Python API too
        models.ResNet18(granularity="block")
    assert str(e.value) == (
        "ResNet18: granularity is an option of the per-layer wrapper; use "
        "ef.PerLayer(model=ResNet18(...), granularity='block')"
    )


def _shape(result):
    """What must not depend on how the per-layer run was asked for: phases, tables, columns,
    rows' identities, run settings."""
    tables = {}
    for name in ("layers", "summary"):
        t = result.derived_table(name)
        keys = ("stage", "type", "inputs", "count", "weight_copies", "execution")
        tables[name] = (
            t.title,
            t.note,
            tuple(t.display or ()),
            [sorted(r) for r in t.rows],
            [tuple(r.get(k) for k in keys) for r in t.rows],
        )
    summary = result.derived_table("summary").rows[0]
    fixed = {
        k: summary[k]
        for k in (
            "pipeline",
            "stages",
            "calls",
            "granularity",
            "unique_units",
            "deduplicated_calls",
            "l2",
            "validated_against",
        )
    }
    config = {k: v for k, v in result.meta["config"].items() if "s_used" not in k}
    return list(result.windows["phase"].unique()), tables, fixed, config


@pytest.mark.slow
def test_the_wrapper_measures_the_model_layer_by_layer(tmp_path):
    options = "image_size=32,granularity=block,validate=true,unroll=2,whole_unroll=2"
    new = ef.run(
        f"per-layer:model=resnet18,{options}", power="none", reporters=[], out=tmp_path / "a", settings=TINY
    )
    phases, tables, fixed, _ = _shape(new)
    assert phases[-1] == "(whole model)" and len(phases) == fixed["unique_units"] + 1
    assert fixed["pipeline"] == "resnet18_b1_fp32" and fixed["granularity"] == "block"
    assert new.meta["config"]["trials"] == 1  # the run's own settings win over the pipeline defaults
    info = new.meta["workload"]["info"]
    assert info["model"] == "resnet18" and info["units"] == fixed["unique_units"] and info["parameters"] > 0


@pytest.mark.slow
def test_the_wrapper_on_the_cli(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["run", "--power", "none", "--workload", "per-layer:model=resnet18,bacth=1"])
    assert r.exit_code == 2 and r.output.startswith(
        "Error: unknown option 'bacth' for per-layer:model=resnet18."
    )
    r = runner.invoke(
        main,
        [
            "run",
            "--power",
            "none",
            "--workload",
            "per-layer:model=resnet18,image_size=32,granularity=block,unroll=2",
            "--trials",
            "1",
            "--min-window",
            "0.01",
            "--idle",
            "0",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "resnet18_b1_fp32: per layer, per call" in r.output
    assert "resnet18_b1_fp32: pipeline totals per item" in r.output


def test_named_models_are_the_rows_of_their_tables():
    entry_points = {ep.name: ep.value for ep in md.entry_points(group="energyframe.workloads")}
    rows = [
        (models, models.VISION_MODELS, models.VisionModel),
        (models, models.OPT66B_MODES, models.OPT66B),
        (lm, lm.LANGUAGE_MODELS, lm.LanguageModel),
    ]
    names = []
    for module, table, base in rows:
        for row in table:
            names.append(row.entry)
            cls = getattr(module, row.class_name)
            assert entry_points[row.entry] == f"{module.__name__}:{row.class_name}"
            assert registry.load(registry.WORKLOADS, row.entry) is cls
            assert (
                issubclass(cls, base)
                and cls.DESCRIPTION == row.description
                and cls.__name__ == row.class_name
            )
    assert len(names) == len(set(names)) == 14
    assert models.ViTB16.FACTORY_OPTIONS == ("image_size",) and models.ResNet50.BLOCKS == ("Bottleneck",)
    assert lm.OPT350M.SIZE["proj"] == 512 and lm.Bloom560M.SIZE == lm.Bloom.SIZE
