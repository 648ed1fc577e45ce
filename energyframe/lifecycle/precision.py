"""``--precision``: measure a phase until the 95 % interval of its median time and energy per
iteration is within the target, for at most ``--max-time`` of windows.

The energies come from the live side (``live.py``): each window's is computed while the next
one runs. With several ranks rank 0's answer decides, so every rank measures as many windows.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.uncertainty import median_ci_j
from ..core.windows import WindowRecord
from .measurement import Measurement

#: with --precision, no interval of a median from fewer windows than this is trusted
MIN_PRECISION_TRIALS = 3


@dataclass(frozen=True)
class Precision:
    """``--precision``: measure until the 95 % interval of the median time and energy per
    iteration is within ± ``pct`` %, for at most ``max_time_s`` of windows. Units: %, s."""

    pct: float
    max_time_s: float

    def reached(self, m: Measurement, records: Sequence[WindowRecord]) -> bool:
        """Whether the phase's windows so far are precise enough (or have taken their time). The
        energies are computed while the next windows run (``live.py``). Those still being computed
        are waited for only where they may decide (the known ones are too few or already precise
        enough), and at most as long as another window would take: waiting for every window's
        samples took up to half a second per 0.23-s window of a per-layer run on an H100."""
        if sum(r.duration_s for r in records) >= self.max_time_s:
            return True
        times = [r.duration_s / r.iterations for r in records if r.iterations]
        if relative_ci_pct(times) > self.pct:
            return False
        if not m.has_sources:
            return True
        energies, pending = _known_energies(m, records)
        if pending and (len(energies) < MIN_PRECISION_TRIALS or relative_ci_pct(energies) <= self.pct):
            # the windows still being computed may decide: wait for them, at most as long as
            # another window would take, then count what is known
            deadline = time.monotonic() + records[-1].duration_s
            for r in pending:
                m.window_energy(r, timeout_s=max(0.0, deadline - time.monotonic()))
            energies, _ = _known_energies(m, records)
        return len(energies) >= MIN_PRECISION_TRIALS and relative_ci_pct(energies) <= self.pct


def _known_energies(m: Measurement, records: Sequence[WindowRecord]) -> tuple[list[float], list[WindowRecord]]:
    """The energies per iteration known so far, and the windows whose energy is not yet."""
    energies, pending = [], []
    for r in records:
        e = m.window_energy(r, wait=False)
        if e is None:
            pending.append(r)
        elif r.iterations:
            energies.append(e.energy_j / r.iterations)
    return energies, pending


def relative_ci_pct(values: Sequence[float]) -> float:
    """The 95 % interval of the median of ``values``, in % of it (inf for fewer than
    ``MIN_PRECISION_TRIALS``)."""
    if len(values) < MIN_PRECISION_TRIALS:
        return math.inf
    median = statistics.median(values)
    half = median_ci_j(values)
    return 100.0 * half / abs(median) if median and math.isfinite(half) else math.inf


def agreed_reached(m: Measurement, precision: Precision, records: Sequence[WindowRecord]) -> bool:
    """Every rank measures the same number of windows: rank 0's answer decides."""
    reached = precision.reached(m, records)
    return bool(m.coordinator.agree(1.0 if reached else 0.0, "whether the precision is reached", "root"))
