"""``tensorboard``: read back with TensorBoard's EventAccumulator: a scalar per phase and one per
window stepped by trial, equal to windows.csv; the default folder is RUN_DIR/tensorboard."""

import pandas as pd
import pytest

from energyframe.errors import UsageError
from energyframe.kit import registry
from energyframe.testing import check_reporter
from tests.reporters.conftest import WATTS

pytest.importorskip("tensorboard")
from energyframe.reporters.tensorboard import TensorBoardReporter  # noqa: E402


def scalars(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()
    return {tag: [(s.step, s.value) for s in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_scalars_per_phase_and_per_window(saved_run):
    result, run_dir = saved_run
    registry.create(registry.REPORTERS, "tensorboard").report(result, run_dir)
    logged = scalars(run_dir / "tensorboard")
    w = pd.read_csv(run_dir / "windows.csv")
    for phase in ("train-step", "eval <1>"):
        mine = w[w["phase"] == phase].sort_values("trial")
        name = phase.replace("<", "_").replace(">", "_")
        energies = logged[f"window/{name}/replay/energy_j"]
        assert [step for step, _ in energies] == list(mine["trial"])
        # TensorBoard keeps 32-bit floats
        assert [v for _, v in energies] == pytest.approx(list(mine["energy_j"]), rel=1e-6)
        (power,) = logged[f"{name}/replay/mean_power_w"]
        assert power == (0, pytest.approx(WATTS, rel=1e-6))


def test_a_logdir_of_ones_own_and_the_contract(saved_run, tmp_path):
    result, _ = saved_run
    TensorBoardReporter("tensorboard", logdir=str(tmp_path / "tb")).report(result, None)
    assert "train-step/replay/energy_per_iter_j" in scalars(tmp_path / "tb")
    check_reporter(TensorBoardReporter)


def test_without_tensorboard_the_reporter_is_refused_before_the_run(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tensorboard", None)
    with pytest.raises(UsageError, match=r"^reporter 'tensorboard' needs tensorboard: pip install 'energyframe\[integrations\]'$"):
        registry.create(registry.REPORTERS, "tensorboard")
