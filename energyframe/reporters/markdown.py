"""``markdown``: report.md, the run for a lab notebook or a pull request (stdout if not saved)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..options import Option
from ..plugin import Reporter
from ..results.result import RunResult
from ..results.store import write_bytes


class MarkdownReporter(Reporter):
    """Writes report.md: facts, summary (median, IQR, trials), flags, status, warnings, tables."""

    DESCRIPTION = "write report.md (summary with spread, flags, status, warnings, derived tables)"
    OPTIONS = (
        Option("path", "str", None, "file to write (default: RUN_DIR/report.md; - for stdout)"),
        Option("all_channels", "bool", False, "also show secondary channels"),
    )

    def report(self, result: RunResult, run_dir: Path | None) -> None:
        from ..report.markdown import run_markdown

        text = run_markdown(result, run_dir, all_channels=self.options["all_channels"])
        path = self.options["path"]
        if path and path != "-":
            target = Path(path)
        elif path != "-" and run_dir is not None:
            target = run_dir / "report.md"
        else:
            sys.stdout.write(text)
            return
        write_bytes(target, text.encode("utf-8"))
