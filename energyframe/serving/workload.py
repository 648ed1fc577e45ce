"""A serve-bench run as the rest of energyframe sees it: a workload whose windows another process
saw (the server's requests), with its own derived tables (the summary, conservation), its own
files (requests.csv, tokens.csv) and its own report figures. Nothing in the core knows about
serving: ``show``, ``compare``, ``report`` and ``ef.load_runs`` read it through these hooks.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..model import DerivedTable, Phase, ReportFigure
from ..options import Option
from ..plugin import RunResult, Workload
from .attribution import Attribution, attribute
from .client import ENDPOINTS, RequestRecord
from .prompts import Prompt
from .requests import REQUESTS_CSV
from .segments import measured_segments, measured_span
from .summary import (
    conservation_row,
    conservation_sentence,
    conservation_table,
    request_rows,
    summary_row,
    summary_table,
)
from .timeline import RequestSpan

TOKENS_CSV = "tokens.csv"


class ServeBenchWorkload(Workload):
    """The load ``energyframe serve-bench`` sent to a server, and what it measured of each request."""

    DESCRIPTION = (
        "requests to an OpenAI-compatible server, each one's energy measured (energyframe serve-bench)"
    )
    OPTIONS = (
        Option("url", "str", required=True, help="the server's OpenAI base URL (http://127.0.0.1:8000/v1)"),
        Option("model", "str", "", "the model named in every request"),
        Option(
            "endpoint", "choice", "chat", "chat (/chat/completions) or completions", choices=tuple(ENDPOINTS)
        ),
        Option("prompts", "str", "", "the prompts: a synthetic:... spec or a JSONL file"),
        Option("requests", "int", None, "requests sent", minimum=1),
        Option("rate", "str", None, "Poisson arrivals per second, or inf (all at once)"),
        Option("concurrency", "int", None, "most requests in flight", minimum=1),
        Option("seed", "int", 0, "the arrivals' seed"),
        Option(
            "request_timeout_s", "float", 300.0, "the longest one request may take. Units: s", minimum=0.0
        ),
        Option(
            "prefill_weight", "float", 1.0, "a prompt token's weight against a generated one's", minimum=0.0
        ),
        Option("warmup_requests", "int", 0, "requests sent before measuring", minimum=0),
    )

    def __init__(self, name: str | None = None, /, **options: Any) -> None:
        super().__init__(name or "serve-bench", **options)
        #: what the load sent, and what became of it
        self.prompts: Sequence[Prompt] = ()
        self.records: tuple[RequestRecord, ...] = ()
        self.spans: tuple[RequestSpan, ...] = ()
        #: the load's window (``serve``) on the monotonic clock, once recorded
        self.span_start_s = math.nan
        #: the load's own figures for the summary (rates, unsent, lags)
        self.load_figures: dict[str, Any] = {}
        self.warn: Callable[[str], None] = lambda message: None
        self._requests: pd.DataFrame | None = None

    def phases(self) -> Iterable[Phase]:
        """None: the windows are the load's segments, recorded after it (``serve_bench``)."""
        return ()

    def derive(self, result: RunResult) -> Sequence[DerivedTable]:
        """The summary and the conservation check, from the segments' energy."""
        primary = list(result.run_meta.primary_channels)
        span = measured_span(result.windows, primary)
        offset = self._unix_offset(result)
        attribution: Attribution | None = None
        if offset is not None:
            shifted = [s.shifted(offset) for s in self.spans]
            attribution = attribute(
                shifted, measured_segments(result.windows, primary), self.options["prefill_weight"]
            )
        frame = request_rows(self.records, self.spans, attribution, offset or 0.0)
        self._requests = frame
        conservation = conservation_row(attribution, span)
        if conservation["within_bound"] is False:
            self.warn(conservation_sentence(conservation))
        row = summary_row(frame, self.records, span, attribution, self.load_figures)
        return (summary_table(row), conservation_table(conservation))

    def _unix_offset(self, result: RunResult) -> float | None:
        """Unix seconds minus monotonic ones, as windows.csv converted the load's own window."""
        span = measured_span(result.windows, list(result.run_meta.primary_channels))
        if span is None or not math.isfinite(self.span_start_s):
            return None
        return span.start_s - self.span_start_s

    def extra_files(self, result: RunResult) -> Mapping[str, bytes]:
        """requests.csv (one row per request) and tokens.csv (when each chunk of text came)."""
        offset = self._unix_offset(result) or 0.0
        frame = (
            self._requests
            if self._requests is not None
            else request_rows(self.records, self.spans, None, offset)
        )
        tokens = pd.DataFrame(
            [(r.request_id, k, t + offset) for r in self.records for k, t in enumerate(r.token_times_s)],
            columns=["request_id", "index", "time_s"],
        )
        return {REQUESTS_CSV: _csv(frame), TOKENS_CSV: _csv(tokens)}

    @classmethod
    def report_figures(cls, run_dir: Path, result: RunResult) -> Sequence[ReportFigure]:
        """Energy per request against its tokens, and the power with the requests stacked."""
        from .figures import report_figures

        return report_figures(run_dir, result)


def _csv(frame: pd.DataFrame) -> bytes:
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode()
