"""The end of a measurement: what the run recorded turned into its result.

``Finisher`` stops the sources once every channel has a sample past the last window, hands the
recording to ``assemble`` and saves the result through the run's output; it also gives the run
so far while it goes (``snapshot``), and, with several ranks, this process's own part for rank 0.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ..core.pipeline import TimeAligner
from ..core.windows import WINDOW_COLUMNS
from ..plugin import Workload
from ..results.result import RunResult
from .acquisition import Acquisition
from .assemble import assemble
from .live import LiveWindows
from .output import RunOutput
from .ranked import OwnPart
from .windowbook import WindowBook


class Finisher:
    """Turns one run's recording into its result.

    Args:
        acquisition, book, live, output: the measurement's sources, windows, live side and output.
        workload: the measured workload (its derived tables and files), if any.
        aligner: the per-channel time corrections (``Measurement``'s ``aligner``).
    """

    def __init__(
        self,
        acquisition: Acquisition,
        book: WindowBook,
        live: LiveWindows,
        output: RunOutput,
        workload: Workload | None,
        aligner: TimeAligner | str | None,
    ) -> None:
        self.acquisition = acquisition
        self.book = book
        self.live = live
        self.output = output
        self.workload = workload
        self.aligner = aligner

    def snapshot(self) -> RunResult:
        """The run so far, its sources still running: ``incomplete``, "running"."""
        last_end = self.book.last_end_s()
        if last_end is not None:
            self.acquisition.wait_for(last_end)
        meta = self.output.running_meta()
        recording = self.acquisition.recording(self.book)
        return assemble(recording, meta, self.workload, self.aligner, list(self.output.warnings))

    def finish(self, status: str, reason: str | None) -> RunResult:
        """The run of one process: integrated, the live numbers reconciled, saved."""
        self.live.stop()  # the windows asked for are computed with the sources still running
        result, _, _ = self._integrate(status, reason)
        if self.live.computed():  # which live numbers the whole run changed, and why
            with self.output.span("integrate"):
                live = self.live.reconcile(result.windows, self.acquisition.seen)
                result = replace(result, meta={**result.meta, "live": live})
        return self.output.save(result, workload=self.workload)

    def own_part(self, status: str, reason: str | None) -> OwnPart:
        """This rank's own run, for rank 0 (no windows when it failed before measuring)."""
        if self.acquisition.running:
            result, status, reason = self._integrate(status, reason)
        else:
            self.acquisition.stop_sources()  # it failed before measuring: its part says why
            meta = self.output.run_meta(status, reason, ended=True)
            result = RunResult(meta, pd.DataFrame(columns=WINDOW_COLUMNS), pd.DataFrame(), ())
        return OwnPart(
            result,
            status,
            reason,
            self.acquisition.device_channels(),
            dict(self.book.work),
            list(self.output.warnings),
        )

    def _integrate(self, status: str, reason: str | None) -> tuple[RunResult, str, str | None]:
        """Stop the sources once the last window is covered, and integrate every window.
        Returns the result and the status and reason it ended with."""
        output = self.output
        with output.span("stop_sources"):
            status, reason = self.acquisition.stop(status, reason, self.book.last_end_s(), output.warn)
        with output.span("integrate"):
            meta = output.run_meta(status, reason, ended=True)
            recording = self.acquisition.recording(self.book)
            return assemble(recording, meta, self.workload, self.aligner, output.warnings), status, reason
