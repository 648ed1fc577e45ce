"""A window's energy as soon as it is known, while the run goes on.

When a window closes, its energy is known as soon as every channel has a sample past its end
(about one update period later). ``LiveWindows`` computes it then, on a thread of its own, with
the same steps ``assemble`` runs at the end (placement, fused power, windows), on the samples
around the window (``CONTEXT_S`` before it: the fused power's offset and noise come from
there). Nothing is computed unless someone asks: a handle's ``energy_j``, or a subscriber
(``Measurement.on_window_energy``), so a run nobody watches pays nothing during its work.

Each subscriber hears every window on a thread of its own, in the order windows close: a
subscriber that is slow or blocks holds neither the energy of later windows (a handle's
``energy_j``) nor the other subscribers. When the run ends, each subscriber is given
``DRAIN_BUDGET_S`` to hear the windows still queued for it; one that has not is named in the
run's warnings, with how many windows it did not hear and why. Windows that close faster than
they are computed are computed together, in one pass.

The final run integrates every window again with the whole run: the same code, with all the
samples. Where a number then differs from the live one, ``reconcile`` records it in run.json's
``live`` (which window, both numbers, why: a sample that arrived after the live number, or the
whole run's fused power and alignment).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from ..core.pipeline import Recording, add_fused_power, integrate, place_samples
from ..core.windows import WindowRecord
from ..model import split_flags

log = logging.getLogger("energyframe")

#: samples this long before a window take part in its live number (fused power's offset and
#: noise are estimated from them; 100 tick intervals of a 100-ms counter). Units: s.
CONTEXT_S = 10.0
#: a final energy within this share of the live one is the same number
SAME_REL = 1e-9
#: when the run ends: how long the windows still queued may take to be computed, and each
#: subscriber to hear them, before the run goes on without them and says so. Units: s.
DRAIN_BUDGET_S = 10.0
#: at most this many queued windows are computed in one pass
BATCH = 256


@dataclass(frozen=True)
class LiveEnergy:
    """A closed window's energy, known while the run goes on.

    Args:
        record: the window.
        channel: the primary channel ``energy_j`` is of (empty without a power source).
        energy_j: its energy (NaN when it cannot be known: see ``flags``). Units: J.
        bound_pct: its 95 % bound in % (``uncertainty.py``).
        estimator: how it was read (windows.csv's ``estimator``).
        flags: the window's flags on that channel.
        rows: every channel's row, with windows.csv's columns.
        missing: channels that had no sample past the window's end when it was computed.
    """

    record: WindowRecord
    channel: str
    energy_j: float
    bound_pct: float
    estimator: str
    flags: tuple[str, ...]
    rows: pd.DataFrame = field(repr=False)
    missing: tuple[str, ...] = ()
    samples_seen: Mapping[str, int] = field(default_factory=dict, repr=False)


class Pending:
    """A window whose energy is on its way: ``result(wait)`` returns it once computed."""

    def __init__(self, record: WindowRecord) -> None:
        self.record = record
        self._done = threading.Event()
        self._value: LiveEnergy | None = None
        self._error: BaseException | None = None

    def set(self, value: LiveEnergy | None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()

    def result(self, wait: bool = True, timeout_s: float | None = None) -> LiveEnergy | None:
        if wait:
            self._done.wait(timeout_s)
        if self._error is not None:
            raise self._error
        return self._value


Snapshot = Callable[[float], Recording]
Wait = Callable[[float], list[str]]


class LiveWindows:
    """Computes closed windows' energy on one thread, in the order they closed.

    Args:
        snapshot: the run's recording restricted to samples from a time on (monotonic).
        wait_for_samples: waits until every channel has a sample past a time; returns the
            channels still lacking one.
        primary: the primary channels, in order (the first integrable one is ``channel``).
        warn: the run's warnings.
    """

    def __init__(self, snapshot: Snapshot, wait_for_samples: Wait, primary: Callable[[], list[str]], warn) -> None:
        self._snapshot = snapshot
        self._wait = wait_for_samples
        self._primary = primary
        self._warn = warn
        self._queue: queue.Queue[Pending | None] = queue.Queue()
        self._pending: dict[tuple[str, int], Pending] = {}
        self._subscribers: list[_Subscriber] = []
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._computing = 0  # windows taken off the queue and not yet computed

    # -- asking ------------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[LiveEnergy], None]) -> None:
        """Call ``callback`` with every window's energy from now on (on a thread of its own)."""
        with self._lock:
            self._subscribers.append(_Subscriber(callback, self._warn))

    @property
    def watched(self) -> bool:
        return bool(self._subscribers)

    def submit(self, record: WindowRecord) -> Pending:
        """The window's energy, computed once (later calls get the same one)."""
        key = (record.phase, record.trial)
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None and pending.record == record:
                return pending
            pending = Pending(record)
            self._pending[key] = pending
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="energyframe-live", daemon=True)
                self._thread.start()
        self._queue.put(pending)
        return pending

    def forget(self, record: WindowRecord) -> None:
        """A window discarded before the run ended has no live number."""
        with self._lock:
            self._pending.pop((record.phase, record.trial), None)

    def stop(self, budget_s: float = DRAIN_BUDGET_S) -> None:
        """Compute the windows still queued and let every subscriber hear them, within
        ``budget_s``; what did not happen by then is said in the run's warnings."""
        deadline = time.monotonic() + budget_s
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=budget_s)
            if self._thread.is_alive():
                left = self._queue.qsize() - 1 + self._computing  # the None is not a window
                if self._subscribers and left > 0:
                    self._warn(
                        f"the live energy of {left} window(s) was not computed within {budget_s:g} s of the run's "
                        "end: their on_window_energy callbacks did not run (the run's result has every window)"
                    )
        for subscriber in self._subscribers:  # all at once: each drains while the others do
            subscriber.close()
        for subscriber in self._subscribers:
            subscriber.stop(max(0.0, deadline - time.monotonic()), budget_s)

    # -- computing ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stopping = False
            while len(batch) < BATCH:  # windows that closed meanwhile: computed in one pass
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            self._computing = len(batch)
            self._compute_batch(batch)
            self._computing = 0
            if stopping:
                return

    def _compute_batch(self, batch: list[Pending]) -> None:
        try:
            values = self.compute_all([p.record for p in batch])
        except Exception as e:  # a live number is extra: the final run still has it
            log.debug("live energy failed", exc_info=True)
            for pending in batch:
                pending.set(None, e)
            self._warn(f"the live energy of {len(batch)} window(s) could not be computed ({type(e).__name__}: {e}): "
                       "their on_window_energy callbacks did not run (the run's result has every window)")
            return
        for pending, value in zip(batch, values):
            pending.set(value)
            for subscriber in list(self._subscribers):
                subscriber.hear(value)

    def compute_all(self, records: list[WindowRecord]) -> list[LiveEnergy]:
        """Each window's energy on every channel, in one pass of ``assemble``'s steps."""
        if len(records) == 1:
            return [self.compute(records[0])]
        missing = self._wait(max(r.end_s for r in records))
        recording = self._snapshot(min(r.start_s for r in records) - CONTEXT_S)
        recording = replace(recording, records=list(records), idle_window=None)
        warnings: list[str] = []
        placement = place_samples(recording, None, warnings.append)  # fixed timing maps only
        recording, placement, _ = add_fused_power(recording, placement, warnings.append)
        rows, _ = integrate(recording, placement, None)
        out = []
        for record in records:
            own = rows[(rows["phase"] == record.phase) & (rows["trial"] == record.trial)]
            out.append(self._live(record, own.reset_index(drop=True), tuple(missing), _seen(recording, record)))
        return out

    def compute(self, record: WindowRecord) -> LiveEnergy:
        """``record``'s energy on every channel, by ``assemble``'s steps, once samples cover it."""
        missing = self._wait(record.end_s)
        recording = self._snapshot(record.start_s - CONTEXT_S)
        recording = replace(recording, records=[record], idle_window=None)
        warnings: list[str] = []
        placement = place_samples(recording, None, warnings.append)  # fixed timing maps only
        recording, placement, _ = add_fused_power(recording, placement, warnings.append)
        rows, _ = integrate(recording, placement, None)
        return self._live(record, rows, tuple(missing), _seen(recording, record))

    def _live(self, record: WindowRecord, rows: pd.DataFrame, missing, seen) -> LiveEnergy:
        channel = next((c for c in self._primary() if c in set(rows["channel"])), "")
        row = rows[rows["channel"] == channel].iloc[0] if channel else rows.iloc[0]
        flags = tuple(split_flags(row.get("flags")))
        return LiveEnergy(
            record,
            channel,
            float(row.get("energy_j", math.nan)),
            float(row.get("energy_bound_pct", math.nan)),
            str(row.get("estimator") or ""),
            flags,
            rows,
            missing,
            seen,
        )

    # -- the final run -----------------------------------------------------------------------
    def computed(self) -> list[LiveEnergy]:
        with self._lock:
            pending = list(self._pending.values())
        return [v for p in pending if (v := p.result(wait=False)) is not None]

    def reconcile(self, windows: pd.DataFrame, final_seen: Callable[[WindowRecord], dict]) -> dict[str, Any]:
        """run.json's ``live``: how many windows had a live number, and each number the final
        run changed, with why."""
        revised = []
        live = self.computed()
        # each final energy by window and channel, looked up once (not a scan of every window
        # per live number: thousands of windows made the end of the run wait for minutes)
        final = {
            (phase, int(trial), channel): float(energy)
            for phase, trial, channel, energy in zip(
                windows["phase"], windows["trial"], windows["channel"], windows["energy_j"]
            )
        } if not windows.empty else {}
        for value in live:
            r = value.record
            for row in value.rows.to_dict("records"):
                after = final.get((r.phase, int(r.trial), row["channel"]))
                if after is None:
                    continue
                before = float(row.get("energy_j", math.nan))
                if _same(before, after):
                    continue
                later = final_seen(r)
                late = [c for c, n in later.items() if n > value.samples_seen.get(c, 0)]
                why = (
                    f"samples of {', '.join(sorted(late))} arrived after the live number"
                    if late
                    else "the whole run's fused power and time alignment"
                )
                revised.append(
                    {
                        "phase": r.phase,
                        "trial": r.trial,
                        "channel": row["channel"],
                        "live_energy_j": before,
                        "energy_j": after,
                        "why": why,
                    }
                )
        return {"windows": len(live), "revised": revised}


class _Subscriber:
    """One ``on_window_energy`` callback, on a thread of its own with its own queue: a slow or
    blocked callback delays only itself."""

    def __init__(self, callback: Callable[[LiveEnergy], None], warn: Callable[[str], None]) -> None:
        self.callback = callback
        self.name = getattr(callback, "__qualname__", None) or type(callback).__name__
        self._warn = warn
        self._queue: queue.Queue[LiveEnergy | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self.heard = 0  # windows queued for it
        self.done = 0  # windows its callback returned from
        self._busy_with: LiveEnergy | None = None
        self._failed = False

    def hear(self, value: LiveEnergy) -> None:
        self.heard += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="energyframe-live-subscriber", daemon=True)
            self._thread.start()
        self._queue.put(value)

    def _loop(self) -> None:
        while True:
            value = self._queue.get()
            if value is None:
                return
            self._busy_with = value
            try:
                self.callback(value)
            except Exception as e:  # a reporter's bug must not stop the others
                if not self._failed:
                    self._warn(f"a live-energy subscriber ({self.name}) failed: {type(e).__name__}: {e}")
                    self._failed = True
            self._busy_with = None
            self.done += 1

    def close(self) -> None:
        """No window comes after those queued."""
        self._queue.put(None)

    def stop(self, wait_s: float, budget_s: float) -> None:
        """Let the callback hear what is queued for it, up to ``wait_s``; then say what it missed."""
        if self._thread is None:
            return
        self._thread.join(timeout=wait_s)
        if not self._thread.is_alive() or self.done == self.heard:
            return
        busy = self._busy_with
        missed = self.heard - self.done - (1 if busy is not None else 0)  # queued, never handed to it
        where = f" (it is still in window {busy.record.phase!r} trial {busy.record.trial})" if busy is not None else ""
        self._warn(
            f"live-energy subscriber {self.name} did not return within {budget_s:g} s of the run's end{where}: "
            f"{missed} of {self.heard} windows' energies did not reach it; the run went on without it (an "
            "on_window_energy callback must return quickly: hand slow work to a thread of your own)"
        )


def _same(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return abs(a - b) <= SAME_REL * max(abs(a), abs(b), 1e-12)


def _seen(recording: Recording, record: WindowRecord) -> dict[str, int]:
    """Samples of each channel within a second of the window (to tell later which arrived
    after the live number)."""
    return {
        name: len(series.between(record.start_s - 1.0, record.end_s + 1.0))
        for name, series in recording.series.items()
    }
