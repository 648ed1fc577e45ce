"""Progress of long work on stderr: phases, trials, and a live window that lasts seconds.

Shown with rich's progress bars when stderr is a terminal and the run is not quiet; otherwise
nothing at all (a log file or a CI job gets the log lines instead, each phase's line saying
which of how many it is). Nothing here runs inside a measured window: bars are updated between
windows, and a long window's elapsed time is redrawn by rich's own refresh thread, twice a
second, so the measured code is not interrupted.

While the bars are drawn, energyframe's log lines go through the bars' console (rich's logging
handler), which prints them above the bars: a handler writing to stderr directly would leave
stale bar frames on screen with log lines glued to them.
"""

from __future__ import annotations

import logging
import math
import operator
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from ..results.display import cell_text

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
        self._moved: list[logging.Handler] = []
        self._handler: logging.Handler | None = None
        #: the phase being measured, 1-based (0 before the first), and how many there are
        self.index = 0
        self.total: int | None = None

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
            stderr = sys.stderr  # rich replaces it while the bars are drawn
            self._progress.start()
            self._route_logging(self._progress.console, stderr)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._restore_logging()

    def _route_logging(self, console: Any, stderr: Any) -> None:
        """Send energyframe's log lines to ``stderr`` through ``console`` while the bars are drawn."""
        from rich.highlighter import NullHighlighter
        from rich.logging import RichHandler

        logger = logging.getLogger("energyframe")
        self._moved = [
            h for h in logger.handlers if type(h) is logging.StreamHandler and h.stream in (stderr, sys.__stderr__)
        ]
        if not self._moved:  # the log goes elsewhere (a file, the root logger): left alone
            return
        handler = RichHandler(
            console=console,
            show_time=False,
            show_level=False,
            show_path=False,
            markup=False,
            highlighter=NullHighlighter(),
        )
        handler.setFormatter(self._moved[0].formatter or logging.Formatter("%(message)s"))
        handler.setLevel(min(h.level for h in self._moved))
        for h in self._moved:
            logger.removeHandler(h)
        logger.addHandler(handler)
        self._handler = handler

    def _restore_logging(self) -> None:
        logger = logging.getLogger("energyframe")
        if self._handler is not None:
            logger.removeHandler(self._handler)
            self._handler = None
        for h in self._moved:
            logger.addHandler(h)
        self._moved = []

    def label(self, name: str) -> str:
        """A phase as its log line names it: ``2 of 5 'matmul-128'`` (``'matmul-128'`` outside
        ``phases``; ``2 'x'`` when the workload does not say how many phases it has)."""
        if not self.index:
            return repr(name)
        return f"{self.index}{f' of {self.total}' if self.total else ''} {name!r}"

    def phases(self, phases: Iterable[T], total: int | None = None) -> Iterator[T]:
        """Iterate the workload's phases with a bar (its total known when the workload says)."""
        total = total or operator.length_hint(phases, 0) or None
        self.total = total
        if self._progress is not None:
            self._phases = self._progress.add_task("phases", total=total)
        for index, phase in enumerate(phases, 1):
            self.index = index
            yield phase
            if self._progress is not None:
                self._progress.advance(self._phases)
        self.index = 0

    def phase(self, name: str, trials: int) -> None:
        """A phase starts measuring ``trials`` windows."""
        if self._progress is None:
            return
        if self._trials is not None:
            self._progress.remove_task(self._trials)
        # the phase's name as text: its [markup] and control characters shown, never acted on
        self._trials = self._progress.add_task(f"  {cell_text(name)}: trials", total=trials)

    def window_opening(self, expected_s: float, label: str) -> None:
        """Called before a window opens: a window of seconds gets a live elapsed-time bar, and
        so does one of unknown length (NaN: a fixed workload, such as a command, is not
        calibrated)."""
        known = math.isfinite(expected_s)
        if self._progress is None or (known and expected_s < LIVE_WINDOW_S):
            return
        length = f" (~{expected_s:.0f} s)" if known else ""
        self._window = self._progress.add_task(f"    window {cell_text(label)}{length}", total=None)

    def window_closed(self) -> None:
        if self._progress is None:
            return
        if self._window is not None:
            self._progress.remove_task(self._window)
            self._window = None

    def trial_done(self) -> None:
        if self._progress is not None and self._trials is not None:
            self._progress.advance(self._trials)
