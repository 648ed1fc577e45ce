"""A window's energy as soon as it is known, while the run goes on.

When a window closes, its energy is known as soon as every channel has a sample past its end
(about one update period later). ``LiveWindows`` computes it then, on a thread of its own, with
the same steps ``assemble`` runs at the end (placement, fused power, windows), on the samples
around the window (``CONTEXT_S`` before it: the fused power's offset and noise come from
there). Nothing is computed unless someone asks: a handle's ``energy_j``, or a subscriber
(``Measurement.on_window_energy``), so a run nobody watches pays nothing during its work.

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
        self._subscribers: list[Callable[[LiveEnergy], None]] = []
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- asking ------------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[LiveEnergy], None]) -> None:
        """Call ``callback`` with every window's energy from now on (on the live thread)."""
        with self._lock:
            self._subscribers.append(callback)

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

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30.0)

    # -- computing ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            pending = self._queue.get()
            if pending is None:
                return
            try:
                value = self.compute(pending.record)
            except Exception as e:  # a live number is extra: the final run still has it
                log.debug("live energy failed", exc_info=True)
                pending.set(None, e)
                continue
            pending.set(value)
            for callback in list(self._subscribers):
                try:
                    callback(value)
                except Exception as e:  # a reporter's bug must not stop the others
                    self._warn(f"a live-energy subscriber failed: {type(e).__name__}: {e}")

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
        for value in live:
            r = value.record
            final = windows[(windows["phase"] == r.phase) & (windows["trial"] == r.trial)]
            for row in value.rows.to_dict("records"):
                match = final[final["channel"] == row["channel"]]
                if match.empty:
                    continue
                before, after = float(row.get("energy_j", math.nan)), float(match.iloc[0]["energy_j"])
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
