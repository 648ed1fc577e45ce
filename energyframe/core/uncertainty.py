"""How wrong an energy figure may be: a 95 % bound, split into its random and systematic parts.

- **Random** (varies window to window): each estimator's own, where each edge falls between the
  counter's ticks and what the chosen estimator may misplace there (``edge``), or, for power
  samples, where the power may have changed between two samples (``energy.sample_coverage_j``);
  for a phase's summary, also the spread of its trials (the 95 % confidence interval of their
  median).
- **Systematic** (the same for every window on the board): the sensor's stated accuracy
  (``Channel.accuracy_w`` and ``accuracy_pct``) and, for dynamic energy, the idle baseline's
  own bound. It does not shrink with more trials, and it cancels when two runs on the same
  board are compared.

The parts are 95 % half-widths, combined in quadrature (independent errors). docs/measurement.md
says where each number comes from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..model import Channel
from .stats import Z95

#: Student's t, 97.5 % quantile, by degrees of freedom 1..30 (then the normal's 1.96)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
#: the standard error of a normal sample's median over that of its mean (sqrt(pi / 2))
MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2.0)


def t975(dof: int) -> float:
    """Student's t 97.5 % quantile for ``dof`` degrees of freedom (at least 1)."""
    return _T975[dof - 1] if dof <= len(_T975) else Z95


@dataclass(frozen=True)
class Bound:
    """A 95 % bound of an energy figure, in its parts. Units: J (or J per iteration).

    Args:
        random_j: what varies window to window (edges, coverage, spread of trials).
        systematic_j: what the board's sensor may be off by on every window.
    """

    random_j: float
    systematic_j: float = 0.0

    @property
    def total_j(self) -> float:
        return math.hypot(self.random_j, self.systematic_j)

    def pct(self, energy_j: float) -> float:
        """The total bound in % of ``energy_j`` (NaN for an energy of 0 or NaN)."""
        return 100.0 * self.total_j / abs(energy_j) if energy_j and math.isfinite(energy_j) else math.nan

    def scaled(self, factor: float) -> Bound:
        """The bound of the figure times ``factor`` (per iteration: 1 / iterations)."""
        return Bound(self.random_j * abs(factor), self.systematic_j * abs(factor))

    def to_json(self, energy_j: float) -> dict:
        out = {
            "bound_j": self.total_j,
            "bound_pct": self.pct(energy_j),
            "random_j": self.random_j,
            "systematic_j": self.systematic_j,
        }
        return {k: (None if not math.isfinite(v) else v) for k, v in out.items()}

    @classmethod
    def from_json(cls, data: dict | None) -> Bound | None:
        if not data:
            return None
        value = data.get("random_j")
        return cls(math.nan if value is None else float(value), float(data.get("systematic_j") or 0.0))


def energy_bound(channel: Channel, energy_j: float, random_j: float, duration_s: float) -> Bound:
    """A window's bound: ``random_j`` (its estimator's, ``edge`` or ``energy``) and the sensor's
    stated accuracy over it (``systematic_j``); NaN where its energy is unknown."""
    if not math.isfinite(energy_j):
        return Bound(math.nan, math.nan)
    return Bound(random_j, systematic_j(channel, energy_j, duration_s))


def systematic_j(channel: Channel, energy_j: float, duration_s: float) -> float:
    """The sensor's stated accuracy over a window, as a 95 % bound: ± ``accuracy_w`` times the
    duration plus ``accuracy_pct`` of the energy. Units: J."""
    if not math.isfinite(energy_j):
        return math.nan
    return channel.accuracy_w * max(duration_s, 0.0) + channel.accuracy_pct / 100.0 * abs(energy_j)


def median_ci_j(values: Iterable[float]) -> float:
    """Half-width of the 95 % confidence interval of the median of ``values`` (their spread
    over trials): Student's t times the median's standard error (sqrt(pi/2) sd / sqrt(n)). NaN
    for fewer than two finite values."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return math.nan
    return t975(x.size - 1) * MEDIAN_EFFICIENCY * float(np.std(x, ddof=1)) / math.sqrt(x.size)


def _finite(values: Iterable[float | None]) -> list[float]:
    """The values that are numbers, not None, NaN or infinite."""
    return [v for v in values if v is not None and math.isfinite(v)]


def summary_bound(per_iter_j: Iterable[float], bounds: Iterable[Bound | None]) -> Bound | None:
    """The bound of a phase's median energy per iteration over its trials.

    Random: the trials' spread (the median's 95 % interval) and, as the windows' own random
    bounds do not average away with few trials, their median over sqrt(n), in quadrature (the
    spread already holds the windows' errors, so this errs on the safe side). With one trial, the
    window's own bound. Systematic: the windows' median (the same sensor on every window).
    """
    finite = [b for b in bounds if b is not None and math.isfinite(b.random_j)]
    x = _finite(per_iter_j)
    if not finite or not x:
        return None
    n = len(x)
    window_random = float(np.median([b.random_j for b in finite])) / math.sqrt(n)
    spread = median_ci_j(x)
    random = math.hypot(spread, window_random) if math.isfinite(spread) else window_random
    systematic = float(np.median([b.systematic_j for b in finite]))
    return Bound(random, systematic)
