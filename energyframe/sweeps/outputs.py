"""A sweep's files: ``benchmark_results.json`` (``SweepResult.save``), ``benchmark_report.txt``
and the plots. The presentation sits here, above the results, so that ``results`` imports
neither the report nor the plots."""

from __future__ import annotations

from pathlib import Path

from ..results import store
from .plots import draw_all
from .report import text_report
from .results import REPORT_TXT, SweepResult


def write(result: SweepResult, directory: Path | str) -> list[Path]:
    """The results, the report and every plot the results allow, into ``directory``.

    Returns:
        The files written, results first (a plot with nothing to draw is not written).
    """
    directory = Path(directory)
    files = [result.save(directory)]
    report = directory / REPORT_TXT
    store.write_bytes(report, text_report(result).encode())
    files.append(report)
    files += draw_all(result, directory)
    return files


def describe(files: list[Path], directory: Path | str, complete: bool = True) -> str:
    """``sweep results in DIR: benchmark_results.json, benchmark_report.txt, heatmap.png``: the
    files written, and only those."""
    return f"sweep results{'' if complete else ' (incomplete)'} in {directory}: {', '.join(f.name for f in files)}"
