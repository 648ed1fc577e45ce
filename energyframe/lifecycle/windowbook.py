"""The windows of one run: the open ones by name, the closed ones in the order of their ends.

``WindowBook`` numbers each closed window per name (its trial), journals it through the run's
output, hands it to the live side when someone listens, and keeps what the final integration
needs: the idle window, the work per iteration, the windows a Ctrl-C cut short. It never syncs
a device nor agrees an edge with other ranks: ``Measurement`` does, then tells the book.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..core.windows import WindowRecord
from ..errors import UsageError
from .live import LiveEnergy, LiveWindows, Pending


@dataclass
class WindowHandle:
    """An open window; set ``iterations`` before it closes if the count is known only then.

    Once closed, ``energy_j`` is its energy on the first primary channel as soon as every
    channel has a sample past its end (it waits for that, about one update period), and
    ``energy(wait=False)`` the same without waiting (``None`` until known): ``live.py``.
    """

    name: str
    iterations: int
    start_s: float
    record: WindowRecord | None = None
    #: whether the device was synced as the window opened (``WindowRecord.synced``)
    synced: bool = False
    _submit: Callable[[WindowRecord], Pending] | None = field(default=None, repr=False)
    _pending: Pending | None = field(default=None, repr=False)

    def __setattr__(self, name: str, value: object) -> None:
        if name == "iterations":  # set on an open handle when the count is known only then
            value = checked_iterations(value)
        super().__setattr__(name, value)

    def energy(self, wait: bool = True, timeout_s: float | None = None) -> LiveEnergy | None:
        """The closed window's energy on every channel (``LiveEnergy``); ``None`` while it is not
        known yet and ``wait`` is False (or ``timeout_s`` passed)."""
        if self.record is None or self._submit is None:
            raise UsageError(f"window {self.name!r} is still open: its energy is known once it closes")
        if self._pending is None:
            self._pending = self._submit(self.record)
        return self._pending.result(wait, timeout_s)

    @property
    def energy_j(self) -> float:
        """The closed window's energy on the first primary channel. Units: J."""
        live = self.energy()
        return live.energy_j if live is not None else math.nan

    def closed(self, record: WindowRecord, pending: Pending | None) -> None:
        """The window closed as ``record``; ``pending``: its energy, already asked for."""
        self.record = record
        if pending is not None:
            self._pending = pending


def checked_iterations(iterations: object) -> int:
    """A window's iteration count: a whole number of at least 1.

    Raises:
        UsageError: anything else (a negative or fractional count would give wrong figures per
            iteration).
    """
    if isinstance(iterations, bool) or not isinstance(iterations, numbers.Integral) or iterations < 1:
        raise UsageError(f"iterations must be a whole number of at least 1, got {iterations!r}")
    return int(iterations)


class WindowJournal(Protocol):
    """Where each closed window is written as it closes (the run directory's journal)."""

    def window_closed(self, record: WindowRecord) -> None: ...

    def window_interrupted(self, record: WindowRecord) -> None: ...

    def window_discarded(self, record: WindowRecord) -> None: ...


class WindowBook:
    """The open and closed windows of one run.

    Args:
        live: the run's live side: a closed window's energy is asked of it.
        journal: told of every window closed, interrupted or discarded.
    """

    def __init__(self, live: LiveWindows, journal: WindowJournal) -> None:
        self.live = live
        self.journal = journal
        #: the closed windows, in the order of their ends
        self.records: list[WindowRecord] = []
        #: work per iteration, by window name (``{"tokens": 128}``)
        self.work: dict[str, dict[str, float]] = {}
        #: the idle baseline's window, once measured
        self.idle: WindowRecord | None = None
        #: (name, trial) of the windows a Ctrl-C or SIGTERM ended before their work did
        self.interrupted: set[tuple[str, int]] = set()
        self._open: dict[str, list[WindowHandle]] = {}
        self._trials: dict[str, int] = {}

    # -- opening ---------------------------------------------------------------------------
    def open(self, name: str, iterations: int, start_s: float, synced: bool) -> WindowHandle:
        """A window opened at ``start_s`` (monotonic), innermost of its name."""
        handle = WindowHandle(name, iterations, start_s, synced=synced, _submit=self.live.submit)
        self._open.setdefault(name, []).append(handle)
        return handle

    def drop(self, handle: WindowHandle) -> None:
        """Forget an open window whose work failed: it measures nothing."""
        self._open[handle.name].remove(handle)

    def check_open(self, name: str) -> None:
        """Refuse to close a window that is not open.

        Raises:
            UsageError: no window named ``name`` is open.
        """
        if not self._open.get(name):
            raise UsageError(f"no open window named {name!r}")

    def seen_elsewhere(self, name: str, iterations: int, start_s: float, end_s: float, now_s: float) -> WindowHandle:
        """A window whose edges another process saw, not yet recorded (``record_window``).

        Raises:
            UsageError: an edge that is not finite or lies ahead of ``now_s``, an end before the
                start, or an end before the last recorded window's end.
        """
        if not (math.isfinite(start_s) and math.isfinite(end_s)) or end_s < start_s:
            raise UsageError(f"window {name!r}: edges {start_s!r}..{end_s!r} are not a finite span")
        if end_s > now_s:
            raise UsageError(f"window {name!r} ends at {end_s:.6f} s, ahead of now (time.monotonic())")
        if self.records and end_s < self.records[-1].end_s:
            raise UsageError(
                f"window {name!r} ends at {end_s:.6f} s, before the last recorded window "
                f"({self.records[-1].end_s:.6f} s): record windows in the order of their ends"
            )
        return WindowHandle(name, iterations, start_s, synced=False, _submit=self.live.submit)

    # -- closing ---------------------------------------------------------------------------
    def close(self, name: str, end_s: float, iterations: int | None, interrupted: bool) -> WindowRecord:
        """Close the innermost open window named ``name`` at ``end_s`` (``check_open`` first)."""
        return self.add(self._open[name].pop(), end_s, iterations, interrupted)

    def add(self, handle: WindowHandle, end_s: float, iterations: int | None, interrupted: bool) -> WindowRecord:
        """The closed window ``handle``, numbered and journalled (``end_s``: its closing edge)."""
        name = handle.name
        if iterations is not None:
            handle.iterations = iterations
        trial = self._trials.get(name, 0)
        self._trials[name] = trial + 1
        record = WindowRecord(name, trial, handle.start_s, end_s, handle.iterations, handle.synced)
        self.records.append(record)
        # a subscriber hears of every window
        handle.closed(record, self.live.submit(record) if self.live.watched else None)
        self.journal.window_closed(record)
        if interrupted:
            self.interrupted.add((name, trial))
            self.journal.window_interrupted(record)
        return record

    def discard(self, record: WindowRecord) -> None:
        """Forget the last closed window (its trial number is given to the next of its name).

        Raises:
            UsageError: ``record`` is not the last closed window.
        """
        if not self.records or self.records[-1] is not record:
            raise UsageError("only the last closed window can be discarded")
        self.records.pop()
        self._trials[record.phase] -= 1
        self.live.forget(record)
        self.journal.window_discarded(record)

    def set_work(self, name: str, work: Mapping[str, float]) -> None:
        self.work[name] = dict(work)

    # -- reading ---------------------------------------------------------------------------
    def last_end_s(self) -> float | None:
        """The latest end of a closed window (monotonic), if any closed."""
        return max((r.end_s for r in self.records), default=None)

    def synced_starts_since(self, since_s: float) -> list[float]:
        """Starts at or after ``since_s`` of windows opened after a device sync, closed or still
        open. Windows are recorded as they close, in the order of their ends, so only the tail
        of the record is read: a live number in a run of many windows costs no more than in a
        short one. Called from the live thread while the main thread opens and closes windows."""
        starts = []
        records = self.records
        k = len(records)
        while k > 0:
            k -= 1
            try:
                r = records[k]
            except IndexError:  # the last window was discarded meanwhile (discard)
                continue
            if r.end_s < since_s:
                break
            if r.synced and r.start_s >= since_s:
                starts.append(r.start_s)
        for stack in list(self._open.values()):
            starts += [h.start_s for h in list(stack) if h.synced and h.start_s >= since_s]
        return starts
