"""benchmarks/transformers_validation.py's sections on tiny models on the CPU (timing only): the
script a GPU run depends on runs through and writes its tables."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


def load():
    path = Path(__file__).parents[2] / "benchmarks" / "transformers_validation.py"
    spec = importlib.util.spec_from_file_location("transformers_validation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_closure_kernel_and_vicuna_sections_run_on_tiny_models(tmp_path, monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    bench = load()
    assert bench.main([str(tmp_path), "--dry-run", "--only", "encoders,kernels,vicuna"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["model"] for r in summary["encoders"]] == ["BertModel", "BartModel"]
    assert all("error" not in r and r["residual_cause"] for r in summary["encoders"])
    (kernels,) = summary["kernels"]
    assert kernels["units"] > 0 and kernels["whole_execution"] == "cpu"
    assert set(summary["vicuna"]["rows"]) == {"prefill", "decode"}
    md = (tmp_path / "summary.md").read_text()
    assert "### per-layer closure, encoders" in md and "| decode |" in md


def test_unknown_sections_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        load().main([str(tmp_path), "--only", "encoders,nonsense"])
