"""``tensorboard``: the run as TensorBoard scalars (``pip install 'energyframe[integrations]'``).

Writes one event file into ``logdir`` (default ``RUN_DIR/tensorboard``, so that ``tensorboard
--logdir runs`` shows every saved run): a scalar per phase and primary channel (step 0) and one
per window (stepped by trial, at the window's start time). Written with TensorBoard's own event
writer: no torch or TensorFlow needed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from ..errors import ReporterError
from ..kit import extras
from ..options import Option
from ..plugin import Reporter
from ..results.result import RunResult
from .tracking import tracked

log = logging.getLogger("energyframe")

#: the event file's folder inside the run directory, by default
FOLDER = "tensorboard"


class TensorBoardReporter(Reporter):
    """Writes the run's figures as TensorBoard scalars."""

    DESCRIPTION = "write the run as TensorBoard scalars (per phase and per window) into RUN_DIR/tensorboard"
    OPTIONS = (Option("logdir", "path", None, "folder of the event file (default: RUN_DIR/tensorboard)"),)

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        super().__init__(name, **options)
        extras.check("tensorboard", "reporter 'tensorboard'")  # before the run, not after it

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        extras.require("tensorboard", "reporter 'tensorboard'", ReporterError)
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        logdir = self.options["logdir"] or (run_dir / FOLDER if run_dir is not None else None)
        if logdir is None:
            log.warning("tensorboard: not written: the run was not saved and no logdir was given")
            return
        data = tracked(result, run_dir)

        def scalar(tag: str, value: float, step: int, wall_s: float) -> Any:
            return Event(wall_time=wall_s, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))

        writer = EventFileWriter(str(logdir))
        try:
            now = time.time()
            for tag, value in data.metrics.items():
                writer.add_event(scalar(tag, value, 0, now))
            for point in data.windows:
                for tag, value in point.values.items():
                    writer.add_event(scalar(tag, value, point.step, point.time_s))
        finally:
            writer.close()
        log.info("tensorboard: wrote %s", logdir)
