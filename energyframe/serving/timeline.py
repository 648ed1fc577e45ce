"""Each request's time in the server as the work model sees it, and the segments they cut.

A request is *queued* from its send until its prefill, in *prefill* until its first token, and
in *decode* until its end. The server runs a prefill in the step that yields the first token,
so the prefill is placed in the last decode step before it: one step as long as the request's
own time per output token (the run's median where the request has fewer than two tokens); the
rest of the wait is queued. A request that never got a token was queued throughout.

Every instant at which a request changes state cuts the load into segments; in each segment the
same requests are active in the same states, and each segment is measured as one window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .client import RequestRecord

QUEUED, PREFILL, DECODE = "queued", "prefill", "decode"
#: state changes are put on this grid before segments are cut, so that no segment is shorter
#: and the segments read back from windows.csv's Unix seconds (0.24 us resolution) hold the same
#: requests at their midpoints; 10 us of a request's time is 7 mJ at 700 W. Units: s.
GRID_S = 1e-5


def snap(t: float) -> float:
    """``t`` on the ``GRID_S`` grid (NaN stays NaN). Units: s."""
    return round(t / GRID_S) * GRID_S if math.isfinite(t) else t


@dataclass(frozen=True)
class RequestSpan:
    """A request in the work model. Units: s (any one clock), tokens.

    Args:
        request_id: the request.
        sent_s: queued from here,
        prefill_s: in prefill from here,
        first_token_s: in decode from here (NaN: never; queued until the end),
        end_s: to here.
        prompt_tokens: its prompt's tokens (the weight of its prefill).
    """

    request_id: str
    sent_s: float
    prefill_s: float
    first_token_s: float
    end_s: float
    prompt_tokens: float

    def shifted(self, offset_s: float) -> RequestSpan:
        """The same span on another clock (``offset_s`` added to every time)."""
        return RequestSpan(
            self.request_id,
            self.sent_s + offset_s,
            self.prefill_s + offset_s,
            self.first_token_s + offset_s,
            self.end_s + offset_s,
            self.prompt_tokens,
        )


def output_tokens(record: RequestRecord) -> int:
    """Its output tokens: the server's ``usage``, else the chunks of text counted."""
    return record.output_tokens if record.output_tokens is not None else record.chunks


def step_s(record: RequestRecord) -> float:
    """Its time per output token after the first (a decode step), from its first to its last
    chunk; NaN with fewer than two tokens. Units: s."""
    n = output_tokens(record)
    if n < 2 or len(record.token_times_s) < 2:
        return math.nan
    return (record.token_times_s[-1] - record.first_token_s) / (n - 1)


def request_spans(records: Sequence[RequestRecord], prompt_tokens: Sequence[float]) -> list[RequestSpan]:
    """The work model's view of each request (``prompt_tokens``: per record)."""
    steps = [step_s(r) for r in records]
    finite = [s for s in steps if math.isfinite(s) and s > 0]
    median_step = float(np.median(finite)) if finite else math.nan
    return [
        _span(record, step if math.isfinite(step) and step > 0 else median_step, tokens)
        for record, step, tokens in zip(records, steps, prompt_tokens)
    ]


def _span(record: RequestRecord, step_s: float, prompt_tokens: float) -> RequestSpan:
    """One request's span: in prefill for one decode step (``step_s``) before its first token;
    queued to its end when it had none. Units: s."""
    sent, end = snap(record.sent_s), snap(record.end_s)
    first = snap(record.first_token_s)
    if not math.isfinite(first):
        return RequestSpan(record.request_id, sent, end, math.nan, end, float(prompt_tokens))
    prefill = snap(max(sent, first - step_s)) if math.isfinite(step_s) else sent
    return RequestSpan(record.request_id, sent, prefill, first, max(end, first), float(prompt_tokens))


def segment_edges(spans: Sequence[RequestSpan]) -> np.ndarray:
    """Every instant where a request changes state, sorted, once each."""
    times = [t for s in spans for t in (s.sent_s, s.prefill_s, s.first_token_s, s.end_s) if math.isfinite(t)]
    return np.unique(np.asarray(times, dtype=float))


def busy(spans: Sequence[RequestSpan], starts_s: np.ndarray, ends_s: np.ndarray) -> np.ndarray:
    """Per segment, whether any request is active in it (at its midpoint)."""
    mid = (starts_s + ends_s) / 2.0
    active = np.zeros(len(mid), dtype=int)
    for s in spans:
        lo, hi = np.searchsorted(mid, [s.sent_s, s.end_s], side="left")
        active[lo:hi] += 1
    return active > 0
