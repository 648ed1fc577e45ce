"""``plot``: the run's power trace as a PNG (every channel, windows shaded, meter lags shown)."""

from __future__ import annotations

from pathlib import Path

from ..kit import extras
from ..options import Option
from ..plugin import Reporter
from ..results.result import RunResult


class PlotReporter(Reporter):
    DESCRIPTION = "draw power-trace.png: every channel over time, windows shaded, meter lags shown"
    OPTIONS = (
        Option("path", "str", None, "PNG to write (default: RUN_DIR/power-trace.png)"),
        Option("primary_only", "bool", False, "only the primary channels"),
    )

    def __init__(self, name: str | None = None, **options) -> None:
        super().__init__(name, **options)
        extras.check("matplotlib", "the plot reporter")  # before the run, not after it

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        from ..report.plots import power_trace

        target = self.options["path"] or (run_dir / "power-trace.png" if run_dir else "power-trace.png")
        power_trace(result, target, all_channels=not self.options["primary_only"])
