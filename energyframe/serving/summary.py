"""The tables of a serve-bench run: one row per request (requests.csv), the summary (medians,
p90, p99, each energy with its 95 % bound) and the conservation check.

A quantile's bound: if every request's true energy lies within its own bound, the true quantile
lies between the quantile of the energies minus their bounds and that of the energies plus their
bounds (a quantile never falls when one value rises), so the bound given is the wider side.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..model import DerivedTable
from .attribution import Attribution, RequestEnergy
from .client import OK, RequestRecord
from .segments import SpanEnergy
from .timeline import RequestSpan, output_tokens

#: requests.csv's columns, in order (docs/serving.md)
REQUEST_COLUMNS = [
    "request_id",
    "status",
    "http_status",
    "finish_reason",
    "error",
    "usage_reported",
    "prompt_tokens",
    "output_tokens",
    "scheduled_s",
    "sent_s",
    "prefill_s",
    "first_token_s",
    "end_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "energy_j",
    "energy_bound_j",
    "prefill_energy_j",
    "decode_energy_j",
    "dynamic_energy_j",
    "dynamic_energy_bound_j",
    "energy_per_output_token_j",
]
QUANTILES = {"median": 0.5, "p90": 0.9, "p99": 0.99}
SUMMARY_TABLE, CONSERVATION_TABLE = "serving", "conservation"
#: a difference this small against the energy is the float sums' rounding, not a joule lost
ROUNDING = 1e-9


def request_rows(
    records: Sequence[RequestRecord],
    spans: Sequence[RequestSpan],
    attribution: Attribution | None,
    offset_s: float,
) -> pd.DataFrame:
    """requests.csv: one row per request sent, times as Unix seconds (monotonic + ``offset_s``)."""
    rows = []
    for i, (r, s) in enumerate(zip(records, spans)):
        n = output_tokens(r)
        ttft = r.first_token_s - r.sent_s
        rows.append(
            {
                "request_id": r.request_id,
                "status": r.status,
                "http_status": r.http_status,
                "finish_reason": r.finish_reason,
                "error": r.error,
                "usage_reported": r.output_tokens is not None,
                "prompt_tokens": int(s.prompt_tokens),
                "output_tokens": n,
                "scheduled_s": r.scheduled_s + offset_s,
                "sent_s": r.sent_s + offset_s,
                "prefill_s": s.prefill_s + offset_s,
                "first_token_s": r.first_token_s + offset_s,
                "end_s": r.end_s + offset_s,
                "ttft_s": ttft,
                "tpot_s": _tpot_s(r, n, ttft),
                "e2e_s": r.end_s - r.sent_s,
                **_request_energy(attribution.requests[i] if attribution is not None else None, n),
            }
        )
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS)


def _tpot_s(r: RequestRecord, tokens: int, ttft_s: float) -> float:
    """Time per output token after the first; NaN for fewer than two or no first token. Units: s."""
    return (r.end_s - r.first_token_s) / (tokens - 1) if tokens >= 2 and math.isfinite(ttft_s) else math.nan


def _request_energy(e: RequestEnergy | None, tokens: int) -> dict[str, float]:
    """A request's energy columns of requests.csv; NaN without an attribution. Units: J."""
    if not e:
        return dict.fromkeys(_REQUEST_ENERGY_COLUMNS, math.nan)
    return {
        "energy_j": e.energy_j,
        "energy_bound_j": e.energy_bound_j,
        "prefill_energy_j": e.prefill_energy_j,
        "decode_energy_j": e.decode_energy_j,
        "dynamic_energy_j": e.dynamic_energy_j,
        "dynamic_energy_bound_j": e.dynamic_energy_bound_j,
        "energy_per_output_token_j": e.energy_j / tokens if tokens else math.nan,
    }


_REQUEST_ENERGY_COLUMNS = (
    "energy_j",
    "energy_bound_j",
    "prefill_energy_j",
    "decode_energy_j",
    "dynamic_energy_j",
    "dynamic_energy_bound_j",
    "energy_per_output_token_j",
)


def quantile_bound(values: np.ndarray, bounds: np.ndarray, q: float) -> tuple[float, float]:
    """The ``q`` quantile of ``values`` and its bound (the module docstring)."""
    keep = np.isfinite(values) & np.isfinite(bounds)
    if not keep.any():
        return math.nan, math.nan
    v, b = values[keep], bounds[keep]
    mid = float(np.quantile(v, q))
    return mid, max(float(np.quantile(v + b, q)) - mid, mid - float(np.quantile(v - b, q)))


def _timing(frame: pd.DataFrame, column: str, label: str) -> dict[str, float]:
    values = frame[column].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    return {
        f"{label}_{k}_s": float(np.quantile(values, q)) if values.size else math.nan
        for k, q in QUANTILES.items()
    }


def _energy(
    frame: pd.DataFrame, value: str, bound: str, label: str, per_token: bool = False
) -> dict[str, float]:
    v, b = frame[value].to_numpy(dtype=float), frame[bound].to_numpy(dtype=float)
    if per_token:
        tokens = frame["output_tokens"].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            v, b = np.where(tokens > 0, v / tokens, np.nan), np.where(tokens > 0, b / tokens, np.nan)
    out = {}
    for k, q in QUANTILES.items():
        out[f"{label}_{k}_j"], out[f"{label}_{k}_bound_j"] = quantile_bound(v, b, q)
    return out


def failure_counts(records: Sequence[RequestRecord]) -> str:
    """``timeout=2, http_error=1``: the statuses other than ok, most frequent first."""
    counts = Counter(r.status for r in records if r.status != OK)
    return ", ".join(f"{status}={n}" for status, n in counts.most_common())


def summary_row(
    frame: pd.DataFrame,
    records: Sequence[RequestRecord],
    span: SpanEnergy | None,
    attribution: Attribution | None,
    load: Mapping[str, Any],
) -> dict[str, Any]:
    """The summary's one row; ``load`` holds the load's own figures (rates, unsent, lags)."""
    ok = frame[frame["status"] == OK]
    row: dict[str, Any] = {
        "requests": len(frame),
        "ok": len(ok),
        "failed": len(frame) - len(ok),
        "failures": failure_counts(records),
        **load,
        **_window_figures(span, int(frame["output_tokens"].sum())),
        **_attribution_figures(attribution),
        **_energy(ok, "energy_j", "energy_bound_j", "energy_per_request"),
        **_energy(ok, "energy_j", "energy_bound_j", "energy_per_output_token", per_token=True),
        **_energy(ok, "dynamic_energy_j", "dynamic_energy_bound_j", "dynamic_energy_per_request"),
        **_timing(ok, "ttft_s", "ttft"),
        **_timing(ok, "tpot_s", "tpot"),
        **_timing(ok, "e2e_s", "e2e"),
    }
    return row


def _window_figures(span: SpanEnergy | None, tokens: int) -> dict[str, Any]:
    """The load's window: its duration, the output tokens and their rate, its energy and mean
    power with their bounds; NaN without a window. Units: s, J, W."""
    duration = span.duration_s if span is not None else math.nan
    energy = span.energy_j if span is not None else math.nan
    bound = span.bound_j if span is not None else math.nan
    return {
        "duration_s": duration,
        "output_tokens": tokens,
        "output_tokens_per_s": tokens / duration if duration > 0 else math.nan,
        "energy_j": energy,
        "energy_bound_j": bound,
        "dynamic_energy_j": span.dynamic_j if span is not None else math.nan,
        "dynamic_energy_bound_j": span.dynamic_bound_j if span is not None else math.nan,
        "mean_power_w": energy / duration if duration > 0 else math.nan,
        "mean_power_bound_w": bound / duration if duration > 0 else math.nan,
    }


def _attribution_figures(attribution: Attribution | None) -> dict[str, float]:
    """The energy attributed to requests, and the idle energy between them. Units: J."""
    if not attribution:
        return dict.fromkeys(("attributed_energy_j", "idle_energy_j", "idle_energy_bound_j"), math.nan)
    return {
        "attributed_energy_j": attribution.attributed_energy_j,
        "idle_energy_j": attribution.idle_energy_j,
        "idle_energy_bound_j": attribution.idle_bound_j,
    }


SUMMARY_DISPLAY = (
    "requests",
    "failed",
    "failures",
    "request_rate_per_s",
    "output_tokens_per_s",
    "energy_per_request_median_j",
    "energy_per_request_median_bound_j",
    "energy_per_request_p90_j",
    "energy_per_request_p99_j",
    "energy_per_output_token_median_j",
    "energy_per_output_token_median_bound_j",
    "ttft_median_s",
    "ttft_p99_s",
    "tpot_median_s",
    "tpot_p99_s",
    "mean_power_w",
    "mean_power_bound_w",
    "idle_energy_j",
    "idle_energy_bound_j",
)


def summary_table(row: Mapping[str, Any]) -> DerivedTable:
    return DerivedTable(
        SUMMARY_TABLE,
        "per request (ok requests; energy with its 95 % bound)",
        [dict(row)],
        note="requests.csv has every request; docs/serving.md says how each figure is computed",
        display=tuple(c for c in SUMMARY_DISPLAY if c in row),
    )


def conservation_row(attribution: Attribution | None, span: SpanEnergy | None) -> dict[str, Any]:
    """Sum attributed + idle against the load's own window."""
    attributed = attribution.attributed_energy_j if attribution else math.nan
    idle = attribution.idle_energy_j if attribution else math.nan
    measured = span.energy_j if span else math.nan
    bound = span.bound_j if span else math.nan
    total = attributed + idle
    difference = total - measured
    return {
        "attributed_energy_j": attributed,
        "idle_energy_j": idle,
        "sum_energy_j": total,
        "measured_energy_j": measured,
        "measured_bound_j": bound,
        "difference_j": difference,
        "within_bound": (
            bool(abs(difference) <= bound + ROUNDING * abs(measured))
            if math.isfinite(difference) and math.isfinite(bound)
            else None
        ),
    }


def conservation_sentence(row: Mapping[str, Any]) -> str:
    """The check in one line, as every run prints it."""
    if row["within_bound"] is None:
        return "conservation: not checked (no energy measured over the load)"
    verdict = "within its bound" if row["within_bound"] else "OUTSIDE its bound"
    return (
        f"conservation: attributed {row['attributed_energy_j']:.6g} J + idle {row['idle_energy_j']:.6g} J = "
        f"{row['sum_energy_j']:.6g} J; the load's window measured {row['measured_energy_j']:.6g} J "
        f"± {row['measured_bound_j']:.3g} J (difference {row['difference_j']:+.3g} J, {verdict})"
    )


def conservation_table(row: Mapping[str, Any]) -> DerivedTable:
    return DerivedTable(
        CONSERVATION_TABLE,
        "conservation: requests + idle against the load's window",
        [dict(row)],
    )
