"""``mlflow``: read back through MlflowClient over the sqlite store it wrote: params, a metric per
phase, a metric per window stepped by trial (equal to windows.csv), the run directory as
artifacts; the active run is logged into; a missing mlflow is one line."""

import math

import pandas as pd
import pytest

from energyframe.errors import UsageError
from energyframe.kit import registry
from energyframe.reporters.mlflow import ARTIFACT_PATH, MlflowReporter
from tests.reporters.conftest import WATTS

mlflow = pytest.importorskip("mlflow")
pytestmark = pytest.mark.slow  # MLflow creates its sqlite tables (alembic) for each new store


def windows_of(run_dir, phase):
    w = pd.read_csv(run_dir / "windows.csv")
    return w[w["phase"] == phase].sort_values("trial")


def test_a_saved_run_goes_to_a_store_beside_it(saved_run, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    result, run_dir = saved_run
    reporter = registry.create(registry.REPORTERS, "mlflow:experiment=ef-test")
    reporter.report(result, run_dir)
    uri = f"sqlite:///{run_dir.parent / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("ef-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    assert run.data.params["workload"] == "(measured block)" and run.data.params["power"] == "replay"
    assert run.data.params["run_dir"] == str(run_dir)
    steps = windows_of(run_dir, "train-step")
    median = result.summary("train-step").energy_per_iter_j.median
    assert run.data.metrics["train-step/replay/energy_per_iter_j"] == pytest.approx(median)
    assert run.data.metrics["train-step/replay/mean_power_w"] == pytest.approx(WATTS)
    history = client.get_metric_history(run.info.run_id, "window/train-step/replay/energy_j")
    assert [m.step for m in history] == list(steps["trial"])
    assert [m.value for m in history] == pytest.approx(list(steps["energy_j"]), rel=1e-12)
    # a phase name MLflow refuses ("<", ">") is logged with those characters as "_"
    assert len(client.get_metric_history(run.info.run_id, "window/eval _1_/replay/duration_s")) == 3
    files = {f.path for f in client.list_artifacts(run.info.run_id, ARTIFACT_PATH)}
    assert files == {f"{ARTIFACT_PATH}/{n}" for n in ("run.json", "windows.csv", "samples.parquet")}
    assert (run_dir.parent / "mlartifacts").is_dir() and not list(tmp_path.glob("mlruns"))


def test_the_active_run_is_logged_into(saved_run, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result, run_dir = saved_run
    uri = f"sqlite:///{tmp_path / 'active.db'}"
    mlflow.set_tracking_uri(uri)
    try:
        experiment_id = mlflow.create_experiment("mine", artifact_location=(tmp_path / "art").as_uri())
        with mlflow.start_run(experiment_id=experiment_id) as active:
            mlflow.log_param("lr", "0.1")
            MlflowReporter("mlflow", artifacts=False).report(result, run_dir)
    finally:
        mlflow.set_tracking_uri("")
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(active.info.run_id)
    assert run.data.params["lr"] == "0.1" and run.data.params["status"] == "complete"
    assert math.isfinite(run.data.metrics["eval _1_/replay/energy_per_iter_j"])
    assert not (run_dir.parent / "mlflow.db").exists()


def test_a_run_not_saved_without_a_uri_is_not_logged(saved_run, tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    result, _ = saved_run
    MlflowReporter("mlflow").report(result, None)
    assert "mlflow: not logged: the run was not saved and no tracking URI was given" in caplog.text
    assert list(tmp_path.iterdir()) == [tmp_path / "runs"]


def test_without_mlflow_the_reporter_is_refused_before_the_run(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "mlflow", None)
    with pytest.raises(UsageError) as e:
        registry.create(registry.REPORTERS, "mlflow")
    assert str(e.value) == "reporter 'mlflow' needs mlflow: pip install 'energyframe[integrations]'"


def test_the_reporter_contract(monkeypatch):
    from energyframe.testing import check_reporter

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    check_reporter(MlflowReporter)  # every kind of result, saved and not, nothing in the cwd
