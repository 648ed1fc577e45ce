"""``wandb``: the run in Weights & Biases: config, a summary value per phase, a logged row per
window, the run directory as an artifact (``pip install 'energyframe[integrations]'``).

Into the active W&B run when there is one (a script that called ``wandb.init``), else into a new
one of ``project``. ``mode=offline`` (or ``WANDB_MODE=offline``) writes it to disk only, under
``dir`` (default ``RUN_DIR``, or ``WANDB_DIR``); ``wandb sync`` uploads it later.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from ..errors import ReporterError
from ..kit import extras
from ..options import Option
from ..plugin import Reporter
from ..results.result import RunResult
from .tracking import Tracked, run_files, tracked

log = logging.getLogger("energyframe")

#: what an artifact's name may hold
ARTIFACT_CHARS = re.compile(r"[^A-Za-z0-9_\-.]")


class WandbReporter(Reporter):
    """Logs the run to Weights & Biases (online or offline)."""

    DESCRIPTION = "log the run to Weights & Biases (online or offline): config, per-phase summary, per-window rows, artifact"
    OPTIONS = (
        Option("project", "str", "energyframe", "the project of a new W&B run"),
        Option("entity", "str", None, "the W&B entity (user or team)"),
        Option("mode", "choice", None, "online, offline (to disk only) or disabled (default: WANDB_MODE, else online)",
               choices=("online", "offline", "disabled")),
        Option("dir", "path", None, "where W&B keeps its files (default: WANDB_DIR, else RUN_DIR)"),
        Option("run_name", "str", None, "the name of a new W&B run (default: the run directory's)"),
        Option("artifact", "bool", True, "log the run directory as an artifact"),
    )

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        super().__init__(name, **options)
        extras.check("wandb", "reporter 'wandb'")  # before the run, not after it

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        wandb = extras.require("wandb", "reporter 'wandb'", ReporterError)
        data = tracked(result, run_dir)
        run = wandb.run
        created = run is None
        if created:
            run = self._new_run(wandb, data, run_dir)
            if run is None:
                return
        else:
            run.config.update(dict(data.params), allow_val_change=True)
        try:
            self._log(wandb, run, data, run_dir)
        finally:
            if created:
                run.finish(exit_code=0 if result.complete else 1)
        log.info("wandb: logged to run %s", run.id)

    def _new_run(self, wandb: Any, data: Tracked, run_dir: Path | None) -> Any:
        """A W&B run of ``project`` with the run's params as its config, its files in ``dir``
        (``None``, and a warning, when there is nowhere to keep them).

        Raises:
            ReporterError: W&B could not start the run (no API key online, no server).
        """
        folder = self.options["dir"] or os.environ.get("WANDB_DIR") or run_dir
        if folder is None:
            log.warning("wandb: not logged: the run was not saved and no dir was given")
            return None
        try:
            return wandb.init(
                project=self.options["project"],
                entity=self.options["entity"],
                dir=str(folder),
                mode=self.options["mode"],
                name=self.options["run_name"] or data.name,
                config=dict(data.params),
                settings=wandb.Settings(silent=True),
            )
        except Exception as e:  # no API key online, a server that does not answer
            raise ReporterError(f"wandb could not start a run: {type(e).__name__}: {e}") from e

    def _log(self, wandb: Any, run: Any, data: Tracked, run_dir: Path | None) -> None:
        """A logged row per window, the phases' figures in the run's summary, and the run
        directory as an artifact."""
        for point in data.windows:
            run.log({**point.values, "window/trial": point.step})
        for key, value in data.metrics.items():
            run.summary[key] = value
        if self.options["artifact"] and run_dir is not None:
            artifact = wandb.Artifact(ARTIFACT_CHARS.sub("_", f"energyframe-{data.name}"), type="energyframe-run")
            for path in run_files(run_dir):
                artifact.add_file(str(run_dir / path), name=path.as_posix())
            run.log_artifact(artifact)
