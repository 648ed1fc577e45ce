"""Spread of repeated measurements: median, quartiles, IQR, coefficient of variation."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

#: the 95 % two-sided quantile of a normal error
Z95 = 1.959963984540054
#: torch.utils.benchmark warns from this IQR/median on; so do we
NOISY_IQR_RATIO = 0.10


@dataclass(frozen=True)
class Spread:
    """Summary of the finite values of a measurement over trials (NaNs are left out of ``n``)."""

    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    cv: float
    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        x = np.asarray([v for v in values if v is not None], dtype=float)
        x = x[np.isfinite(x)]
        if x.size == 0:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan, nan, nan, nan)
        q1, median, q3 = (float(v) for v in np.percentile(x, [25, 50, 75]))
        mean = float(np.mean(x))
        std = float(np.std(x, ddof=1)) if x.size > 1 else 0.0
        cv = std / abs(mean) if mean != 0 else math.nan
        return cls(int(x.size), median, q1, q3, q3 - q1, cv, mean, float(x.min()), float(x.max()))

    @property
    def relative_iqr(self) -> float:
        return self.iqr / abs(self.median) if self.median else math.nan

    @property
    def noisy(self) -> bool:
        return self.n > 1 and self.relative_iqr >= NOISY_IQR_RATIO

    def to_json(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> Spread:
        values = {k: (math.nan if v is None else v) for k, v in data.items()}
        return cls(int(values.pop("n")), **{k: float(v) for k, v in values.items()})
