"""The reporters of a run: called once the run is saved, each within a time budget.

A reporter that raises or blocks must neither lose the run nor pass unnoticed: the run is on
disk before any reporter starts, every reporter still gets its turn, and then the run fails
with the reporters named (``ReporterError``, exit 1), so that a scheduled job writing a history
learns that a run did not reach it. ``errors="warn"`` (``--reporter-errors warn``) only warns.
A reporter runs on a thread of its own: one that hangs costs ``REPORT_BUDGET_S``, and Ctrl-C
always ends the wait.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..errors import ReporterError, RunInterrupted, UsageError
from ..kit.calls import BoundedCall, CallTimeout, PluginCallError, describe
from ..plugin import Reporter
from ..results.result import RunResult

log = logging.getLogger("energyframe")

#: how long one reporter may take (a plot of a long run, a report written to a network share). Units: s.
REPORT_BUDGET_S = 600.0
#: what a failing reporter does to the run: fail it (exit 1), or only warn
REPORTER_ERRORS = ("fail", "warn")


def check_reporter_errors(value: str) -> str:
    """``value`` if it is one of ``REPORTER_ERRORS``.

    Raises:
        UsageError: another value, naming the valid ones.
    """
    if value not in REPORTER_ERRORS:
        raise UsageError(f"reporter_errors must be one of {', '.join(REPORTER_ERRORS)}, got {value!r}")
    return value


def _report(reporter: Reporter, result: RunResult, run_dir: Path | None) -> str | None:
    """Why ``reporter`` failed, or ``None``."""
    call = BoundedCall(
        lambda: reporter.report(result, run_dir), f"reporter {reporter.name!r}",
        name=f"energyframe-report-{reporter.name}",
    )
    try:
        call.wait(REPORT_BUDGET_S)
    except CallTimeout:
        return f"reporter {reporter.name!r} did not return within {REPORT_BUDGET_S:g} s"
    except PluginCallError as e:
        return f"reporter {reporter.name!r} failed: {describe(e.error)}"
    except Exception as e:  # a reporter's bug: every other reporter still runs
        return f"reporter {reporter.name!r} failed: {describe(e)}"
    return None


def run_reporters(
    reporters: Sequence[Reporter], result: RunResult, run_dir: Path | None, errors: str = "fail"
) -> None:
    """Call every reporter with the saved ``result``.

    Raises:
        ReporterError: with ``errors="fail"``, one or more reporters failed or did not return.
        RunInterrupted: Ctrl-C while a reporter ran (the run is saved).
    """
    saved = f"; the run is saved in {run_dir}" if run_dir is not None else ""
    failures = []
    for reporter in reporters:
        try:
            failure = _report(reporter, result, run_dir)
        except KeyboardInterrupt:
            raise RunInterrupted(f"interrupted by SIGINT while reporter {reporter.name!r} ran{saved}") from None
        if failure is not None:
            failures.append(failure)
            if errors == "warn":
                log.warning("warning: %s", failure)
    if failures and errors == "fail":
        raise ReporterError("; ".join(failures) + saved)
