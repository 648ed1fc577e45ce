"""Where a window opens and closes: the device synced, the ranks agreed, then the clock read.

``WindowEdges`` takes each edge of a live window in that order, on ``time.monotonic()``, and
hands the window to the ``WindowBook``; with several ranks each edge is agreed through the
coordinator, so every rank's window has the same edges. A window whose edges another process
saw (``record_window``) is recorded as given, unsynced.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..core.windows import WindowRecord
from ..errors import PowerSourceError
from ..model import no_sync
from ..ranks.coordinator import Alone, Coordinator
from .sync import resolve_sync
from .windowbook import WindowBook, WindowHandle, checked_iterations


class WindowEdges:
    """Takes the edges of one run's windows.

    Args:
        book: where the windows go.
        sync: the measurement's device sync (a window may give its own): ``"auto"`` (torch
            CUDA when in use), ``None``, or a callable.
        failure: why a source failed while the run went, if one did (a window closing then
            raises it, once recorded).
    """

    def __init__(
        self,
        book: WindowBook,
        sync: str | Callable[[], None] | None,
        failure: Callable[[], PowerSourceError | None],
    ) -> None:
        self.book = book
        self.sync = resolve_sync(sync)
        self.failure = failure
        #: this process among the ranks (``Measurement.start`` joins them)
        self.coordinator: Coordinator = Alone()

    def idle(self, duration_s: float) -> WindowRecord:
        """The idle baseline's window: ``duration_s`` with nothing running. Units: s."""
        self.sync()
        self.coordinator.edge("measure the idle baseline")
        start = time.monotonic()
        time.sleep(duration_s)
        self.coordinator.edge("end the idle baseline")
        self.book.idle = WindowRecord("(idle)", 0, start, time.monotonic(), 1)
        return self.book.idle

    def begin(self, name: str, iterations: int, sync: Callable[[], None] | None) -> WindowHandle:
        """Sync the device, agree the edge, open the window."""
        iterations = checked_iterations(iterations)
        sync = sync or self.sync
        sync()
        self.coordinator.edge(f"open window {name!r}")
        return self.book.open(name, iterations, time.monotonic(), synced=sync is not no_sync)

    def end(
        self, name: str, iterations: int | None, sync: Callable[[], None] | None, interrupted: bool
    ) -> WindowRecord:
        """Sync the device, agree the edge, close the innermost open window named ``name``."""
        if iterations is not None:
            iterations = checked_iterations(iterations)
        (sync or self.sync)()
        self.book.check_open(name)
        # a Ctrl-C, or a failing source's interrupt, held during the exchange comes after the
        # window is recorded: every rank passed the exchange, so every rank keeps the window
        with self.coordinator.holding_signals():
            self.coordinator.edge(f"close window {name!r}")
            record = self.book.close(name, time.monotonic(), iterations, interrupted)
        failure = self.failure()
        if failure is not None:
            raise failure
        return record

    def seen_elsewhere(self, name: str, start_s: float, end_s: float, iterations: int) -> WindowRecord:
        """Record a window whose edges another process saw (monotonic s), unsynced."""
        iterations = checked_iterations(iterations)
        start_s, end_s = float(start_s), float(end_s)
        handle = self.book.seen_elsewhere(name, iterations, start_s, end_s, time.monotonic())
        with self.coordinator.holding_signals():
            return self.book.add(handle, end_s, None, False)
