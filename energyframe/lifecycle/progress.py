"""Progress of long work on stderr: phases, trials, and a live window that lasts seconds.

Shown with rich's progress bars when stderr is a terminal and the run is not quiet; otherwise
nothing at all (a log file or a CI job gets the log lines instead). Nothing here runs inside a
measured window: bars are updated between windows, and a long window's elapsed time is redrawn
by rich's own refresh thread, twice a second, so the measured code is not interrupted.
"""

from __future__ import annotations

import logging
import operator
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: a window expected to last at least this long gets its own live bar. Units: s.
LIVE_WINDOW_S = 3.0


def enabled(quiet: bool | None = None) -> bool:
    """Bars only for a person watching: a terminal on stderr, and not ``-q``."""
    if quiet is None:
        quiet = logging.getLogger("energyframe").getEffectiveLevel() > logging.INFO
    return not quiet and sys.stderr.isatty()


class RunProgress:
    """The bars of one run. Use as a context manager; every method is a no-op when disabled."""

    def __init__(self, show: bool | None = None) -> None:
        self.show = enabled() if show is None else show
        self._progress: Any = None
        self._phases: Any = None
        self._trials: Any = None
        self._window: Any = None

    def __enter__(self) -> RunProgress:
        if self.show:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                refresh_per_second=2,
                transient=True,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def phases(self, phases: Iterable[T], total: int | None = None) -> Iterator[T]:
        """Iterate the workload's phases with a bar (its total known when the workload says)."""
        total = total or operator.length_hint(phases, 0) or None
        if self._progress is not None:
            self._phases = self._progress.add_task("phases", total=total)
        for phase in phases:
            yield phase
            if self._progress is not None:
                self._progress.advance(self._phases)

    def phase(self, name: str, trials: int) -> None:
        """A phase starts measuring ``trials`` windows."""
        if self._progress is None:
            return
        if self._trials is not None:
            self._progress.remove_task(self._trials)
        self._trials = self._progress.add_task(f"  {name}: trials", total=trials)

    def window_opening(self, expected_s: float, label: str) -> None:
        """Called before a window opens: a window of seconds gets a live elapsed-time bar."""
        if self._progress is None or expected_s < LIVE_WINDOW_S:
            return
        self._window = self._progress.add_task(f"    window {label} (~{expected_s:.0f} s)", total=None)

    def window_closed(self) -> None:
        if self._progress is None:
            return
        if self._window is not None:
            self._progress.remove_task(self._window)
            self._window = None

    def trial_done(self) -> None:
        if self._progress is not None and self._trials is not None:
            self._progress.advance(self._trials)
