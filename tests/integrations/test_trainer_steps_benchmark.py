"""benchmarks/trainer_steps.py runs end to end on the CPU (``--dry-run``: the replay source at
300 W, tiny sizes), so that its GPU run is not the first time it runs."""

import json

import pytest

from tests.conftest import load_benchmark

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow  # two Trainer runs


def test_dry_run(tmp_path, capsys):
    summary = load_benchmark("trainer_steps").main([str(tmp_path), "--dry-run", "--steps", "6"])
    assert all(summary["checks"].values()), summary
    assert summary["steps_logged"] == 6 and summary["evals_logged"] == 2
    assert summary["live_j"] == pytest.approx(summary["final_j"], rel=1e-9)
    assert summary["step_power_w_median"] == pytest.approx(300.0, rel=1e-6)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["checks"] == summary["checks"] and (tmp_path / "run" / "run.json").is_file()
    assert "check: every step logged once" in capsys.readouterr().out
