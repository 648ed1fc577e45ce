"""``mlflow``: the run in MLflow: params, a metric per phase and per window, the run directory as
artifacts (``pip install 'energyframe[integrations]'``).

Where it logs: the ``tracking_uri`` option, else ``MLFLOW_TRACKING_URI``, else the active MLflow
run's store (a script inside ``mlflow.start_run()``), else ``sqlite:///<runs>/mlflow.db`` beside
the run directory (its artifacts in ``<runs>/mlartifacts``): ``mlflow ui --backend-store-uri
sqlite:///runs/mlflow.db`` shows every run saved in ``runs/``. Into the active run, or the
``run_id`` option's, when there is one; else into a new run of the ``experiment``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ReporterError
from ..kit import extras
from ..options import Option
from ..plugin import Reporter
from ..results.result import RunResult
from .tracking import Tracked, run_files, tracked

log = logging.getLogger("energyframe")

#: MLflow takes at most this many metrics in one batch
BATCH = 1000
#: the artifacts' folder in the MLflow run
ARTIFACT_PATH = "energyframe-run"


class MlflowReporter(Reporter):
    """Logs params, per-phase and per-window metrics, and the run directory to MLflow."""

    DESCRIPTION = "log the run to MLflow: params, metrics per phase and per window, the run directory as artifacts"
    OPTIONS = (
        Option(
            "tracking_uri",
            "str",
            None,
            "where to log (default: MLFLOW_TRACKING_URI, the active run's, else sqlite:///RUN_DIR/../mlflow.db)",
        ),
        Option("experiment", "str", "energyframe", "the experiment of a new MLflow run"),
        Option("run_id", "str", None, "log into this MLflow run instead of a new one"),
        Option("run_name", "str", None, "the name of a new MLflow run (default: the run directory's)"),
        Option("artifacts", "bool", True, "upload the run directory as artifacts"),
    )

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        super().__init__(name, **options)
        extras.check("mlflow", "reporter 'mlflow'")  # before the run, not after it

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        mlflow = extras.require("mlflow", "reporter 'mlflow'", ReporterError)

        active = mlflow.active_run()
        uri, artifacts_at = self._where(mlflow, active, run_dir)
        if uri is None:
            log.warning("mlflow: not logged: the run was not saved and no tracking URI was given")
            return
        client = mlflow.MlflowClient(tracking_uri=uri)
        data = tracked(result, run_dir)
        given = self.options["run_id"] or (active.info.run_id if active is not None else None)
        created = given is None
        run_id = self._new_run(client, data, artifacts_at) if given is None else str(given)
        _log_batches(client, run_id, _metrics(data), _params(data))
        if self.options["artifacts"] and run_dir is not None:
            _upload(client, run_id, run_dir)
        if created:
            client.set_terminated(run_id, "FINISHED" if result.complete else "FAILED")
        log.info("mlflow: logged to run %s at %s", run_id, uri)

    def _where(self, mlflow: Any, active: Any, run_dir: Path | None) -> tuple[str | None, str | None]:
        """The tracking URI, and the artifact root of an experiment this reporter creates
        (``None``: MLflow's own)."""
        uri = self.options["tracking_uri"] or os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            return uri, None
        if active is not None:
            return mlflow.get_tracking_uri(), None
        if run_dir is None:
            return None, None
        runs = Path(run_dir).resolve().parent
        return f"sqlite:///{runs / 'mlflow.db'}", (runs / "mlartifacts").as_uri()

    def _new_run(self, client: Any, data: Tracked, artifacts_at: str | None) -> str:
        name = self.options["experiment"]
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            experiment_id = client.create_experiment(name, artifact_location=artifacts_at)
        else:
            experiment_id = experiment.experiment_id
        run = client.create_run(experiment_id, run_name=self.options["run_name"] or data.name)
        return str(run.info.run_id)


def _metrics(data: Tracked) -> list[Any]:
    """The run's metrics as MLflow's: the phases' stamped now at step 0, each window's at its
    start and stepped by its trial."""
    from mlflow.entities import Metric

    now_ms = int(time.time() * 1000)
    metrics = [Metric(k, v, now_ms, 0) for k, v in data.metrics.items()]
    for point in data.windows:
        stamp = int(point.time_s * 1000)
        metrics += [Metric(k, v, stamp, point.step) for k, v in point.values.items()]
    return metrics


def _params(data: Tracked) -> list[Any]:
    from mlflow.entities import Param

    return [Param(k, v) for k, v in data.params.items()]


def _upload(client: Any, run_id: str, run_dir: Path) -> None:
    """The run directory's files as the MLflow run's artifacts, under ``ARTIFACT_PATH`` in the
    folders they have in the run directory."""
    for path in run_files(run_dir):
        folder = "/".join((ARTIFACT_PATH, *path.parent.parts))
        client.log_artifact(run_id, str(run_dir / path), artifact_path=folder)


def _log_batches(client: Any, run_id: str, metrics: Sequence[Any], params: Sequence[Any]) -> None:
    client.log_batch(run_id, params=list(params)[:100])
    for k in range(100, len(params), 100):
        client.log_batch(run_id, params=list(params)[k : k + 100])
    for k in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=list(metrics)[k : k + BATCH])
