"""The Hugging Face Trainer's ``EnergyCallback`` on a GPU with NVML (``pytest -m gpu``): every
optimizer step's energy is logged once, finite, with a positive bound; the live figures agree with
the saved run's within its bound; the steps, the evaluation inside them and the gaps between them
add up to one window spanning them all (benchmarks/trainer_steps.py, which prints the figures)."""

import pytest

from tests.conftest import load_benchmark

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")


def test_every_step_logged_with_its_bound_and_the_steps_add_up(tmp_path):
    assert torch.cuda.is_available(), "this test needs a CUDA GPU"
    bench = load_benchmark("trainer_steps")
    summary = bench.main([str(tmp_path), "--steps", "20"])
    assert summary["channel"] == "gpu0" and summary["step_j_median"] > 0
    failed = [name for name, ok in summary["checks"].items() if not ok]
    assert not failed, f"{failed}: {summary}"
    assert summary["logs_before_the_end"] > 0  # figures arrived while training ran, not only at its end
