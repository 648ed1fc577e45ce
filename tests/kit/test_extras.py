"""The optional packages (extras): a missing one is one line naming the extra, before anything
starts where it can be; by-product PNGs are skipped with a warning; ``list`` needs none of them.

"Not installed" is faked at the lowest layer: ``sys.modules[name] = None`` makes both
``importlib.util.find_spec`` and ``import`` see no such module, as in an environment without it.
"""

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import UsageError, WorkloadError
from energyframe.kit import extras
from energyframe.sweeps.plots import draw_all
from energyframe.sweeps.results import SweepResult
from energyframe.workloads import models
from tests.fakes import ListWorkload, SignalSource, busy_phase

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def without(monkeypatch):
    """Make modules look uninstalled for the rest of the test."""

    def hide(*names):
        for name in names:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                monkeypatch.delitem(sys.modules, loaded)
            monkeypatch.setitem(sys.modules, name, None)

    return hide


def test_require_names_the_extra(without):
    without("matplotlib")
    assert not extras.installed("matplotlib")
    with pytest.raises(UsageError) as e:
        extras.require("matplotlib", "the power-trace plot")
    assert str(e.value) == "the power-trace plot needs matplotlib: pip install 'energyframe[plots]'"
    with pytest.raises(
        WorkloadError, match=r"^workload 'x' needs torchvision: pip install 'energyframe\[models\]'$"
    ):
        without("torchvision")
        extras.require("torchvision", "workload 'x'", WorkloadError)


def test_an_installed_module_that_fails_to_import_is_reported_with_its_cause(tmp_path, monkeypatch):
    # what PyPI's torchvision does beside a torch it was not built for
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    for loaded in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert extras.installed("torchvision")
    with pytest.raises(WorkloadError) as e:
        extras.require("torchvision", "workload 'resnet50'", WorkloadError)
    assert str(e.value) == (
        "workload 'resnet50' needs torchvision, which is installed but fails to import: RuntimeError: "
        "operator torchvision::nms does not exist (torchvision must be the release built for the "
        "installed torch)"
    )


@pytest.mark.parametrize(
    "spec,module",
    [("resnet50", "torchvision"), ("vit_b_16", "torchvision"), ("bloom-560m", "transformers")],
)
def test_a_model_workload_without_its_extra_exits_2_before_anything_starts(tmp_path, without, spec, module):
    without(module)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--power", "none", "--workload", spec, "--out", str(out)])
    assert result.exit_code == 2
    assert result.output == f"Error: workload '{spec}' needs {module}: pip install 'energyframe[models]'\n"
    assert not out.exists()


def test_models_implemented_here_need_no_extra(without):
    without("torchvision", "transformers")
    models.RepLKNet31B(name="replknet31b")  # no error: it is built from nets/, not torchvision
    models.OPT66BPrefill(name="opt-66b-prefill")


def test_the_plot_command_without_matplotlib(tmp_path, without):
    out = tmp_path / "run"
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu")],
        reporters=[],
        out=out,
        settings=ef.RunSettings(trials=1, min_window_s=0.05, warmup_s=0.0),
    )
    without("matplotlib")
    result = CliRunner().invoke(main, ["plot", str(out)])
    assert result.exit_code == 2
    assert result.output == "Error: the power-trace plot needs matplotlib: pip install 'energyframe[plots]'\n"
    assert not (out / "power-trace.png").exists()


def test_the_plot_reporter_without_matplotlib_is_refused_before_the_run(tmp_path, without):
    without("matplotlib")
    out = tmp_path / "run"
    with pytest.raises(UsageError, match=r"^the plot reporter needs matplotlib: pip install 'energyframe\[plots\]'$"):
        ef.run(ListWorkload([busy_phase()]), power="none", reporters=["plot"], out=out,
               settings=ef.RunSettings(trials=1, min_window_s=0.05, warmup_s=0.0))
    assert not out.exists()  # nothing was started


def test_sweep_plots_are_skipped_with_a_warning(tmp_path, without, caplog):
    saved = SweepResult.load(FIXTURES / "sweep" / "h100-sgemm.json")
    without("matplotlib")
    with caplog.at_level(logging.WARNING, logger="energyframe"):
        assert draw_all(saved, tmp_path) == []
        saved.save(tmp_path)
    assert (tmp_path / "benchmark_results.json").exists() and not list(tmp_path.glob("*.png"))
    assert "sweep plots (*.png) not written: it needs matplotlib: pip install 'energyframe[plots]'" in (
        caplog.text
    )


def test_trace_import_skips_the_timeline_with_a_warning(tmp_path, without, caplog):
    from energyframe.replay.capture import summarize_trace

    without("matplotlib")
    with caplog.at_level(logging.WARNING, logger="energyframe"):
        meta = summarize_trace(FIXTURES / "kineto-h200" / "bloom-tiny.json.gz", tmp_path / "t")
    assert meta["unique_kernels"] == 44 and (tmp_path / "t" / "kernels.jsonl").exists()
    assert not (tmp_path / "t" / "timeline.png").exists()
    assert "timeline.png not written: it needs matplotlib: pip install 'energyframe[plots]'" in caplog.text


def test_list_shows_the_model_workloads_without_the_extras():
    # a fresh process where the extras' packages do not exist at all
    probe = textwrap.dedent(
        """
        import sys
        for name in ("torchvision", "transformers", "matplotlib"):
            sys.modules[name] = None
        from energyframe.cli import main
        try:
            main(["list", "workloads"])
        except SystemExit:
            pass
        """
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    for name in ("resnet50", "vit_b_16", "bloom-560m", "opt-125m", "replknet31b"):
        assert f"\n  {name}  [energyframe " in proc.stdout, name
    assert "FAILED TO LOAD" not in proc.stdout
