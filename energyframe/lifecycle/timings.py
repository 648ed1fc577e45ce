"""Where a run's time goes: sources starting, set-up (a per-layer capture), idle baseline,
warm-up, calibration, the measured windows, what lies between them, integration and saving.

Kept in run.json as ``timings_s``, so a slow profile says what to make faster. Spans are timed
on the monotonic clock around work that is not measured; nothing is added inside a window.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..kit.sampler import process_age_s


class Timings:
    """Accumulates named spans. Units: s."""

    def __init__(self) -> None:
        self.spans: dict[str, float] = {}
        self._process_age_at_start = process_age_s()
        self._started = time.monotonic()

    def add(self, name: str, seconds: float) -> None:
        self.spans[name] = self.spans.get(name, 0.0) + seconds

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - start)

    def to_json(self) -> dict[str, float | None]:
        """The spans, what they leave out, and the process's wall time up to now."""
        elapsed = time.monotonic() - self._started
        out: dict[str, float | None] = dict(self.spans)
        out["other"] = max(0.0, elapsed - sum(self.spans.values()))
        out["run"] = elapsed
        age = self._process_age_at_start
        out["before_run"] = age  # interpreter start-up, imports, parsing, resolving plugins
        out["process"] = (age + elapsed) if age is not None else None
        return out
